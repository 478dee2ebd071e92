//! `job_callbacks` (migrations/V10): the in-order claim; the marks are the outbox's.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::Type;

use super::outbox::{leased_table, LeasedTable};
use crate::domain::job::JobId;
use crate::domain::key::SigningSecret;
use crate::ports::callbacks::{Callback, CallbackStore};
use crate::ports::outbox::Retry;
use crate::ports::StoreError;
use crate::store::postgres::{self as db, millis};

pub struct PgCallbackStore {
    pool: Pool,
}

impl PgCallbackStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

const CALLBACKS: LeasedTable = leased_table!("job_callbacks");

/// As the outbox's claim, but only the earliest pending callback of each job is due: a later
/// one waits while an earlier one is being sent or retried, so a job's callbacks arrive in
/// order. (A second sweeper skips the rows this one locks, and sees a leased one still pending,
/// so it cannot take the next of the same job either.) At most `$4` of one client (key) are
/// taken, from the oldest 1000 due (a bound on the claim's work): a key with many slow
/// receivers cannot fill a claim. The rows are locked in a query of their own, which re-checks that each is still due
/// (a concurrent claim may have leased it since the first read). The key's signing secret
/// comes along, none once it is revoked.
const CLAIM_SQL: &str = "\
WITH heads AS (
    SELECT c.id, c.available_at, j.client_ip
      FROM job_callbacks c
      JOIN jobs j ON j.id = c.job_id
     WHERE c.status = 'pending' AND c.available_at <= now() AND c.attempts < $3
       AND NOT EXISTS (SELECT FROM job_callbacks e
                        WHERE e.job_id = c.job_id AND e.sequence < c.sequence
                          AND e.status = 'pending')
     ORDER BY c.available_at, c.id
     LIMIT 1000
), fair AS (
    SELECT id FROM (
        SELECT id, available_at,
               row_number() OVER (PARTITION BY client_ip ORDER BY available_at, id) AS nth
          FROM heads
    ) ranked
     WHERE nth <= $4
     ORDER BY available_at, id
     LIMIT $1
), due AS (
    SELECT c.id FROM job_callbacks c
     WHERE c.id IN (SELECT id FROM fair)
       AND c.status = 'pending' AND c.available_at <= now() AND c.attempts < $3
       FOR UPDATE OF c SKIP LOCKED
)
UPDATE job_callbacks c
   SET available_at = now() + $2 * interval '1 millisecond',
       attempts = c.attempts + 1
  FROM due, jobs j
  LEFT JOIN api_keys k ON j.client_ip = 'key:' || k.id::text AND k.revoked_at IS NULL
 WHERE c.id = due.id AND j.id = c.job_id
RETURNING c.id, c.job_id, c.sequence, c.url, c.body, c.attempts, k.signing_secret";

#[async_trait]
impl CallbackStore for PgCallbackStore {
    async fn claim(
        &self,
        limit: i64,
        per_client: i64,
        lease: Duration,
        max_attempts: i32,
    ) -> Result<Vec<Callback>, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(
                CLAIM_SQL,
                &[
                    (&limit, Type::INT8),
                    (&millis(lease), Type::INT8),
                    (&max_attempts, Type::INT4),
                    (&per_client, Type::INT8),
                ],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| Callback {
                id: row.get(0),
                job_id: JobId::from(row.get::<_, uuid::Uuid>(1)),
                sequence: row.get(2),
                url: row.get(3),
                body: row.get(4),
                attempts: row.get(5),
                signing_secret: row.get::<_, Option<&str>>(6).and_then(SigningSecret::parse),
            })
            .collect())
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        CALLBACKS.mark_dispatched(&self.pool, ids).await
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        CALLBACKS
            .mark_retry(&self.pool, retries, max_attempts)
            .await
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        CALLBACKS.fail_exhausted(&self.pool, max_attempts).await
    }
}
