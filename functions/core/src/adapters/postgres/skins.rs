//! The `skins` table: names claimed before their object is written, and `skin_ingests`:
//! presigned uploads' ingests, one per upload key.

use crate::adapters::postgres::{self as db};
use crate::domain::render::SkinName;
use crate::ports::idempotency;
use crate::ports::idempotency::StoredResponse;
use crate::ports::skins::Claim;
use crate::ports::skins::NameClaim;
use crate::ports::skins::SkinRegistry;
use crate::ports::skins::{Freeing, IngestClaim, IngestTicket, NameState, Removal};
use crate::ports::StoreError;
use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;
/// The `skins` table: the folded name is unique (`skins_folded`), so of two concurrent claims of
/// names folding alike exactly one inserts. A claim lives for one S3 write; one older than
/// `stale_after` belongs to an upload whose function died between claim and confirm, and may be
/// taken over so the name is not lost for good.
pub struct PgSkinRegistry {
    pool: Pool,
    stale_after_secs: f64,
}

impl PgSkinRegistry {
    pub fn new(pool: Pool, stale_after: Duration) -> Self {
        Self {
            pool,
            stale_after_secs: stale_after.as_secs_f64(),
        }
    }

    /// Runs `sql` with `$1` a text (a name, a key) and `$2` a claim's token; the rows it
    /// touched.
    async fn execute_on_claim(&self, sql: &str, on: &str, token: &Uuid) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let touched = conn
            .execute_typed(sql, &[(&on, Type::TEXT), (token, Type::UUID)])
            .await?;
        Ok(touched)
    }

    /// Runs `sql` with `$1` a name; the rows it touched.
    async fn execute_on_name(&self, sql: &str, name: &SkinName) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(sql, &[(&name.as_str(), Type::TEXT)])
            .await
    }
}

/// Whether the name was claimed; else whether it is reserved, and whether it is stored
/// (removed: true, kept: false, NULL: not stored). The outer query's snapshot is the
/// statement's: it sees the row as it was before the insert. A stale claim taken over takes
/// this spelling of the name, which the object is written under; a removed row is stored, so
/// never taken over. `$1` is trimmed (a `SkinName`), so `lower($1)` is its folded form.
const CLAIM_SQL: &str = "\
WITH reserved AS (
    SELECT EXISTS (SELECT FROM skin_reservations WHERE folded = lower($1)) AS yes
), claimed AS (
    INSERT INTO skins (name, claim) SELECT $1, $2 WHERE NOT (SELECT yes FROM reserved)
    ON CONFLICT (folded) WHERE NOT shadowed DO UPDATE
       SET name = EXCLUDED.name, claim = EXCLUDED.claim, claimed_at = now()
     WHERE skins.stored_at IS NULL
       AND skins.claimed_at < now() - make_interval(secs => $3)
    RETURNING claim
)
SELECT EXISTS (SELECT FROM claimed),
       (SELECT yes FROM reserved),
       (SELECT removed_at IS NOT NULL FROM skins
         WHERE folded = lower($1) AND NOT shadowed AND stored_at IS NOT NULL)";

/// `$3`–`$7`: the idempotency claim to complete with the response, or NULLs. With a claim,
/// the name is confirmed only while the claim is still the upload's (locked first), so an
/// upload that gave up and released its key can no longer be confirmed by a statement of its
/// that arrives late: the name stays unconfirmed, and a retry finds its content stored.
const CONFIRM_SQL: &str = "\
WITH held AS (
    SELECT FROM idempotency_keys
     WHERE client_ip = $3 AND endpoint = $4 AND key = $5 AND token = $6
       AND status = 'in_progress'
       FOR UPDATE
), confirmed AS (
    UPDATE skins SET stored_at = now()
     WHERE name = $1 AND claim = $2 AND stored_at IS NULL
       AND ($6::uuid IS NULL OR EXISTS (SELECT FROM held))
    RETURNING name
), completed AS (
    UPDATE idempotency_keys SET status = 'completed', response = $7
     WHERE client_ip = $3 AND endpoint = $4 AND key = $5 AND token = $6
       AND status = 'in_progress' AND EXISTS (SELECT FROM confirmed)
)
SELECT count(*) FROM confirmed";

const RELEASE_SQL: &str = "DELETE FROM skins WHERE name = $1 AND claim = $2 AND stored_at IS NULL";

/// By `skins_folded`: the row holding the folded name (a shadowed one's group is held by a stored
/// skin), if any, and the name's reservation. Always one row.
const STATE_SQL: &str = "\
SELECT skins.stored_at IS NOT NULL,
       skins.claimed_at >= now() - make_interval(secs => $2),
       skins.removed_at IS NOT NULL,
       EXISTS (SELECT FROM skin_reservations WHERE folded = lower($1))
  FROM (SELECT) AS one
  LEFT JOIN skins ON skins.folded = lower($1) AND NOT skins.shadowed";

/// One page, by `skins_listed_kept` (keyset on the name, in byte order).
const LIST_SQL: &str = "\
SELECT name FROM skins
 WHERE stored_at IS NOT NULL AND removed_at IS NULL AND name COLLATE \"C\" > $1
 ORDER BY name COLLATE \"C\"
 LIMIT $2";

/// Whether the ingest was claimed, and else the key's row as it was: at this ETag, finished.
const CLAIM_INGEST_SQL: &str = "\
WITH claimed AS (
    INSERT INTO skin_ingests (key, etag, claim) VALUES ($1, $2, $3)
    ON CONFLICT (key) DO UPDATE SET claim = EXCLUDED.claim, claimed_at = now()
     WHERE skin_ingests.finished_at IS NULL
       AND skin_ingests.etag = EXCLUDED.etag
       AND (skin_ingests.claim IS NULL
            OR skin_ingests.claimed_at < now() - make_interval(secs => $4))
    RETURNING claim
)
SELECT EXISTS (SELECT FROM claimed),
       (SELECT etag = $2 FROM skin_ingests WHERE key = $1),
       (SELECT finished_at IS NOT NULL FROM skin_ingests WHERE key = $1)";

const FINISH_INGEST_SQL: &str = "\
UPDATE skin_ingests SET finished_at = now() WHERE key = $1 AND claim = $2 AND finished_at IS NULL";

const RELEASE_INGEST_SQL: &str = "\
UPDATE skin_ingests SET claim = NULL WHERE key = $1 AND claim = $2 AND finished_at IS NULL";

/// By `skin_ingests_by_age`, oldest first, a bounded batch.
const PRUNE_INGESTS_SQL: &str = "\
DELETE FROM skin_ingests WHERE key IN (
    SELECT key FROM skin_ingests
     WHERE claimed_at < now() - make_interval(secs => $1)
     ORDER BY claimed_at
     LIMIT $2)";

const RESERVE_SQL: &str = "\
INSERT INTO skin_reservations (folded, name) VALUES (lower($1), $1) ON CONFLICT (folded) DO NOTHING";

const UNRESERVE_SQL: &str = "DELETE FROM skin_reservations WHERE folded = lower($1)";

/// By `skins_by_folded`: the names removed now, and whether one was removed before (the outer
/// query sees the rows as they were before the update).
const REMOVE_SQL: &str = "\
WITH removed AS (
    UPDATE skins SET removed_at = now()
     WHERE folded = lower($1) AND stored_at IS NOT NULL AND removed_at IS NULL
    RETURNING name
)
SELECT ARRAY(SELECT name FROM removed ORDER BY name COLLATE \"C\"),
       EXISTS (SELECT FROM skins WHERE folded = lower($1) AND removed_at IS NOT NULL)";

/// By `skins_by_folded` and `jobs_active_by_status` (at most the queue's and the farm's rows):
/// the removed skins of a name, how much of `$2` seconds after the latest removal is left, and
/// the jobs not ended that name it in any spelling (a render's `skin` is compared as names are).
const FREEABLE_SQL: &str = "\
SELECT ARRAY(SELECT name FROM skins WHERE folded = lower($1) AND removed_at IS NOT NULL
              ORDER BY name COLLATE \"C\"),
       (SELECT extract(epoch FROM max(removed_at) + make_interval(secs => $2) - now())::float8
          FROM skins WHERE folded = lower($1) AND removed_at IS NOT NULL),
       (SELECT count(*) FROM jobs
         WHERE status IN ('queued', 'downloading', 'rendering')
           AND lower(btrim(skin, ' ')) = lower($1))";

const FORGET_REMOVED_SQL: &str =
    "DELETE FROM skins WHERE folded = lower($1) AND removed_at IS NOT NULL";

#[async_trait]
impl SkinRegistry for PgSkinRegistry {
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, StoreError> {
        let token = Uuid::new_v4();
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&name.as_str(), Type::TEXT),
            (&token, Type::UUID),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn.query_row(CLAIM_SQL, &params, "the name claim").await?;
        let (claimed, reserved, removed): (bool, bool, Option<bool>) =
            (row.get(0), row.get(1), row.get(2));
        Ok(match (claimed, reserved, removed) {
            (true, _, _) => NameClaim::Claimed(Claim {
                name: name.clone(),
                token,
            }),
            (false, true, _) | (false, _, Some(true)) => NameClaim::Kept,
            (false, false, Some(false)) => NameClaim::Stored,
            (false, false, None) => NameClaim::Held,
        })
    }

    async fn confirm(
        &self,
        claim: &Claim,
        completes: Option<(&idempotency::Claim, &StoredResponse)>,
    ) -> Result<(), StoreError> {
        let (key, response) = completes.unzip();
        let response = response
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| StoreError::new(format!("response: {e}")))?;
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&claim.name.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
            (&key.map(|k| k.client.as_str()), Type::TEXT),
            (&key.map(|k| k.endpoint), Type::TEXT),
            (&key.map(|k| k.key.as_str()), Type::TEXT),
            (&key.map(|k| k.token), Type::UUID),
            (&response, Type::JSONB),
        ];
        let conn = db::checkout(&self.pool).await?;
        let confirmed: i64 = conn
            .query_row(CONFIRM_SQL, &params, "the confirmation")
            .await?
            .get(0);
        if confirmed == 1 {
            Ok(())
        } else {
            Err(StoreError::new(format!(
                "the claim on skin `{}` was lost",
                claim.name.as_str()
            )))
        }
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.execute_on_claim(RELEASE_SQL, claim.name.as_str(), &claim.token)
            .await
            .map(drop)
    }

    async fn state(&self, name: &SkinName) -> Result<NameState, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [
            (&name.as_str(), Type::TEXT),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(STATE_SQL, &params, "the name's state")
            .await?;
        let stored: Option<bool> = row.get(0);
        let fresh: Option<bool> = row.get(1);
        let removed: Option<bool> = row.get(2);
        let reserved: bool = row.get(3);
        Ok(match (stored, fresh, removed, reserved) {
            (_, _, Some(true), _) => NameState::Removed,
            (stored, _, _, true) => NameState::Reserved {
                stored: stored == Some(true),
            },
            (Some(true), _, _, false) => NameState::Stored,
            (Some(false), Some(true), _, false) => NameState::Held,
            _ => NameState::Free,
        })
    }

    async fn list(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(LIST_SQL, &[(&after, Type::TEXT), (&limit, Type::INT8)])
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn claim_ingest(
        &self,
        ticket: &IngestTicket,
        etag: &str,
    ) -> Result<IngestClaim, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&ticket.key, Type::TEXT),
            (&etag, Type::TEXT),
            (&ticket.token, Type::UUID),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(CLAIM_INGEST_SQL, &params, "the ingest claim")
            .await?;
        let claimed: bool = row.get(0);
        let same_etag: Option<bool> = row.get(1);
        let finished: Option<bool> = row.get(2);
        Ok(match (claimed, same_etag, finished) {
            (true, _, _) => IngestClaim::Ours,
            (false, Some(false), _) => IngestClaim::Replaced,
            (false, _, Some(true)) => IngestClaim::Done,
            (false, _, _) => IngestClaim::Running,
        })
    }

    async fn finish_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        let finished = self
            .execute_on_claim(FINISH_INGEST_SQL, &ticket.key, &ticket.token)
            .await?;
        if finished == 1 {
            Ok(())
        } else {
            Err(StoreError::new(format!(
                "the ingest claim on `{}` was lost",
                ticket.key
            )))
        }
    }

    async fn release_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        self.execute_on_claim(RELEASE_INGEST_SQL, &ticket.key, &ticket.token)
            .await
            .map(drop)
    }

    async fn prune_ingests(&self, older_than: Duration, limit: u64) -> Result<u64, StoreError> {
        let older_than = older_than.as_secs_f64();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(
                PRUNE_INGESTS_SQL,
                &[(&older_than, Type::FLOAT8), (&limit, Type::INT8)],
            )
            .await?)
    }

    async fn reserve(&self, name: &SkinName) -> Result<bool, StoreError> {
        Ok(self.execute_on_name(RESERVE_SQL, name).await? == 1)
    }

    async fn unreserve(&self, name: &SkinName) -> Result<bool, StoreError> {
        Ok(self.execute_on_name(UNRESERVE_SQL, name).await? == 1)
    }

    async fn remove(&self, name: &SkinName) -> Result<Removal, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(REMOVE_SQL, &[(&name.as_str(), Type::TEXT)], "the removal")
            .await?;
        let removed: Vec<String> = row.get(0);
        let removed_before: bool = row.get(1);
        Ok(match (removed.is_empty(), removed_before) {
            (false, _) => Removal::Removed(removed),
            (true, true) => Removal::AlreadyRemoved,
            (true, false) => Removal::NotStored,
        })
    }

    async fn freeable(&self, name: &SkinName, settle: Duration) -> Result<Freeing, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [
            (&name.as_str(), Type::TEXT),
            (&settle.as_secs_f64(), Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(FREEABLE_SQL, &params, "the freeing check")
            .await?;
        let left = row
            .get::<_, Option<f64>>(1)
            .filter(|secs| *secs > 0.0)
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok());
        Ok(Freeing::of(row.get(0), left, row.get(2)))
    }

    async fn forget_removed(&self, name: &SkinName) -> Result<u64, StoreError> {
        self.execute_on_name(FORGET_REMOVED_SQL, name).await
    }
}
