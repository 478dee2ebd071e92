//! The `skins` table (migrations/V3): names claimed before their object is written.

use crate::domain::render::SkinName;
use crate::ports::idempotency;
use crate::ports::idempotency::StoredResponse;
use crate::ports::skins::Claim;
use crate::ports::skins::NameClaim;
use crate::ports::skins::SkinRegistry;
use crate::ports::StoreError;
use crate::store::postgres::{self as db};
use async_trait::async_trait;
use deadpool_postgres::Pool;
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;
/// The `skins` table (migrations/V3): the name is the primary key, so of two concurrent
/// claims exactly one inserts. A claim lives for one S3 write; one older than `stale_after`
/// belongs to an upload whose function died between claim and confirm, and may be taken over
/// so the name is not lost for good.
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

    /// Runs `sql` with `$1` the claimed name and `$2` the claim's token; the rows it touched.
    async fn execute_on_claim(&self, sql: &str, claim: &Claim) -> Result<u64, StoreError> {
        let name = claim.name.as_str();
        let conn = db::checkout(&self.pool).await?;
        let touched = conn
            .execute_typed(sql, &[(&name, Type::TEXT), (&claim.token, Type::UUID)])
            .await?;
        Ok(touched)
    }
}

/// Whether the name was claimed, and else whether it is stored (the outer query's snapshot is
/// the statement's: it sees the row as it was before the insert).
const CLAIM_SQL: &str = "\
WITH claimed AS (
    INSERT INTO skins (name, claim) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET claim = EXCLUDED.claim, claimed_at = now()
     WHERE skins.stored_at IS NULL
       AND skins.claimed_at < now() - make_interval(secs => $3)
    RETURNING claim
)
SELECT EXISTS (SELECT FROM claimed),
       EXISTS (SELECT FROM skins WHERE name = $1 AND stored_at IS NOT NULL)";

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

const TAKEN_SQL: &str = "\
SELECT EXISTS (SELECT 1 FROM skins
                WHERE name = $1
                  AND (stored_at IS NOT NULL OR claimed_at >= now() - make_interval(secs => $2)))";

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
        let row = conn
            .query_typed(CLAIM_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| StoreError::unknown("the name claim returned no row"))?;
        Ok(match (row.get(0), row.get(1)) {
            (true, _) => NameClaim::Claimed(Claim {
                name: name.clone(),
                token,
            }),
            (false, true) => NameClaim::Stored,
            (false, false) => NameClaim::Held,
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
            .query_typed(CONFIRM_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| StoreError::unknown("the confirmation returned no row"))?
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
        self.execute_on_claim(RELEASE_SQL, claim).await.map(drop)
    }

    async fn is_taken(&self, name: &SkinName) -> Result<bool, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [
            (&name.as_str(), Type::TEXT),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_typed(TAKEN_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| StoreError::new("the name lookup returned no row"))?;
        Ok(row.get(0))
    }
}
