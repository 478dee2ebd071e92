//! `idempotency_keys`: the claims of `Idempotency-Key`s.

use crate::adapters::postgres::{self as db, millis};
use crate::domain::hash::RequestHash;
use crate::ports::idempotency::Claim;
use crate::ports::idempotency::Held;
use crate::ports::idempotency::IdempotencyStore;
use crate::ports::idempotency::StoredResponse;
use crate::ports::idempotency::KEY_TTL;
use crate::ports::StoreError;
use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};
pub struct PgIdempotencyStore {
    pool: Pool,
}

impl PgIdempotencyStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

/// A free key is inserted; an expired row, or a claim whose owner died, is taken over. Postgres
/// serializes the conflicting inserts on the key: a second one waits for the first to commit and
/// then sees its row, so exactly one request owns a key.
const CLAIM_SQL: &str = "\
INSERT INTO idempotency_keys (client_ip, endpoint, key, request_hash, token, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
ON CONFLICT (client_ip, endpoint, key) DO UPDATE
   SET request_hash = EXCLUDED.request_hash, token = EXCLUDED.token, status = 'in_progress',
       response = NULL, job_id = NULL, created_at = now(), expires_at = EXCLUDED.expires_at
 WHERE idempotency_keys.expires_at <= now()
    OR (idempotency_keys.status = 'in_progress'
        AND idempotency_keys.created_at < now() - $7 * interval '1 millisecond')
RETURNING true";

/// The key's holder: not expired, nor a claim in progress past its staleness (`CLAIM_SQL`
/// takes that over).
const HELD_SQL: &str = "\
SELECT status, request_hash, response FROM idempotency_keys
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND expires_at > now()
   AND NOT (status = 'in_progress' AND created_at < now() - $4 * interval '1 millisecond')";

const COMPLETE_SQL: &str = "\
UPDATE idempotency_keys SET status = 'completed', response = $5
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND token = $4";

const RELEASE_SQL: &str = "\
DELETE FROM idempotency_keys
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND token = $4 AND status = 'in_progress'";

/// Up to `$1` expired keys, by the expiry index. A key being taken over is locked by its
/// claim, so it is skipped, not deleted under it.
const PRUNE_SQL: &str = "\
DELETE FROM idempotency_keys
 WHERE (client_ip, endpoint, key) IN (
       SELECT client_ip, endpoint, key FROM idempotency_keys WHERE expires_at <= now()
        ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
   AND expires_at <= now()";

/// Tries to claim the key on `conn`: whether it did.
async fn try_claim(
    conn: &db::Conn,
    claim: &Claim,
    request_hash: &RequestHash,
) -> Result<bool, StoreError> {
    let hash = request_hash.as_bytes().as_slice();
    let params: [(&(dyn ToSql + Sync), Type); 7] = [
        (&claim.client.as_str(), Type::TEXT),
        (&claim.endpoint, Type::TEXT),
        (&claim.key.as_str(), Type::TEXT),
        (&hash, Type::BYTEA),
        (&claim.token, Type::UUID),
        (&millis(KEY_TTL), Type::INT8),
        (&millis(claim.stale_after), Type::INT8),
    ];
    Ok(!conn.query_typed(CLAIM_SQL, &params).await?.is_empty())
}

/// The key's holder, read on `conn`. Shared with the job store, which sends it pipelined with
/// its occupancy read so a keyed render pays no extra round trip for it.
pub(crate) async fn held_on(conn: &db::Conn, claim: &Claim) -> Result<Option<Held>, StoreError> {
    let stale_ms = millis(claim.stale_after);
    let params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&claim.client.as_str(), Type::TEXT),
        (&claim.endpoint, Type::TEXT),
        (&claim.key.as_str(), Type::TEXT),
        (&stale_ms, Type::INT8),
    ];
    let Some(row) = conn.query_typed(HELD_SQL, &params).await?.pop() else {
        return Ok(None);
    };
    let status: &str = row.get(0);
    let request_hash = RequestHash::from_stored(row.get(1))
        .ok_or_else(|| StoreError::new("a stored request hash that is not 32 bytes"))?;
    let response: Option<serde_json::Value> = row.get(2);
    Ok(Some(match (status, response) {
        ("completed", Some(response)) => Held::Completed {
            request_hash,
            response: serde_json::from_value(response)
                .map_err(|e| StoreError::new(format!("stored response: {e}")))?,
        },
        _ => Held::InProgress { request_hash },
    }))
}

#[async_trait]
impl IdempotencyStore for PgIdempotencyStore {
    async fn claim(
        &self,
        claim: &Claim,
        request_hash: &RequestHash,
    ) -> Result<Result<(), Option<Held>>, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        if try_claim(&conn, claim, request_hash).await? {
            Ok(Ok(()))
        } else {
            drop(conn);
            Ok(Err(self.held(claim).await?))
        }
    }

    async fn held(&self, claim: &Claim) -> Result<Option<Held>, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        held_on(&conn, claim).await
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), StoreError> {
        let response = serde_json::to_value(response).expect("responses serialize");
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&claim.client.as_str(), Type::TEXT),
            (&claim.endpoint, Type::TEXT),
            (&claim.key.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
            (&response, Type::JSONB),
        ];
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(COMPLETE_SQL, &params).await?;
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&claim.client.as_str(), Type::TEXT),
            (&claim.endpoint, Type::TEXT),
            (&claim.key.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
        ];
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(RELEASE_SQL, &params).await?;
        Ok(())
    }

    async fn prune(&self, batch: i64) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(PRUNE_SQL, &[(&batch, Type::INT8)])
            .await?)
    }
}
