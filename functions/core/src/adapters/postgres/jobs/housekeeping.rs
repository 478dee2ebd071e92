//! The janitor's statements: expiry, stalls, unclaimed releases, and bounded pruning of what
//! ended, each by an index and a batch.

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::types::{ToSql, Type};

use super::PgJobStore;
use crate::adapters::postgres::{self as db, millis};
use crate::ports::jobs::{Deleted, JobHousekeeping};
use crate::ports::StoreError;

const EXPIRE_QUEUED_SQL: &str = "\
UPDATE jobs
   SET status = 'expired', error = 'no renderer took the job in time',
       error_code = 'queue_expired', error_retryable = true, updated_at = now()
 WHERE status = 'queued' AND created_at < now() - $1 * interval '1 millisecond'";

/// Released jobs still queued past `$1` ms (jobs_released_waiting: at most the farm's room)
/// while a worker has started a job released after them (one probe of
/// jobs_started_by_release): their message was lost, not waiting for a worker. A released job
/// without a start tag (`fair_start` null) is left to QUEUED_TTL.
const FAIL_UNCLAIMED_SQL: &str = "\
UPDATE jobs j
   SET status = 'failed', error = 'no render worker took the job in time',
       error_code = 'timed_out', error_retryable = true, updated_at = now()
 WHERE j.status = 'queued' AND j.released_at IS NOT NULL AND j.fair_start IS NOT NULL
   AND j.released_at < now() - $1 * interval '1 millisecond'
   AND EXISTS (SELECT FROM jobs s
                WHERE s.started_at IS NOT NULL AND s.released_at > j.released_at)";

/// Up to `$1` fair clients whose last finish the clock has passed (fair_clients_by_finish):
/// their next job starts at the clock with or without the row.
const PRUNE_FAIR_CLIENTS_SQL: &str = "\
DELETE FROM fair_clients
 WHERE client IN (SELECT client FROM fair_clients
                   WHERE finish <= (SELECT virtual_time FROM fair_clock)
                   ORDER BY finish LIMIT $1 FOR UPDATE SKIP LOCKED)";

const FAIL_STALLED_SQL: &str = "\
UPDATE jobs
   SET status = 'failed', error = 'timed out', error_code = 'timed_out', error_retryable = true,
       deadline_at = NULL, updated_at = now()
 WHERE status IN ('downloading', 'rendering')
   AND coalesce(deadline_at, updated_at + $1 * interval '1 millisecond') < now()";

/// Up to `$2` jobs ended over `$1` ms ago, oldest first by `jobs_ended_by_update`, and their
/// outbox events (deleted here rather than left to the cascade, to be counted). Rows another
/// run holds are skipped, so two runs split the work; an active job is never selected.
const DELETE_ENDED_SQL: &str = "\
WITH doomed AS (
    SELECT id FROM jobs
     WHERE status IN ('completed', 'failed', 'expired')
       AND updated_at < now() - $1 * interval '1 millisecond'
     ORDER BY updated_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM outbox_events WHERE job_id IN (SELECT id FROM doomed) RETURNING 1
), gone AS (
    DELETE FROM jobs WHERE id IN (SELECT id FROM doomed) RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM events)";

/// Up to `$1` expired nonces, by the expiry index.
const PRUNE_NONCES_SQL: &str = "\
DELETE FROM webhook_nonces
 WHERE nonce IN (SELECT nonce FROM webhook_nonces WHERE expires_at < now()
                  ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)";

/// A day, as the migration that made the fences says; up to `$1`, by the age index.
const PRUNE_FENCES_SQL: &str = "\
DELETE FROM admission_fences
 WHERE job_id IN (SELECT job_id FROM admission_fences
                   WHERE created_at < now() - interval '1 day'
                   ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)";

#[async_trait]
impl JobHousekeeping for PgJobStore {
    async fn expire_queued(&self, ttl: Duration) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(EXPIRE_QUEUED_SQL, &[(&millis(ttl), Type::INT8)])
            .await?)
    }

    async fn fail_stalled(&self, stall_timeout: Duration) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(FAIL_STALLED_SQL, &[(&millis(stall_timeout), Type::INT8)])
            .await?)
    }

    async fn fail_unclaimed(&self, older_than: Duration) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(FAIL_UNCLAIMED_SQL, &[(&millis(older_than), Type::INT8)])
            .await?)
    }

    async fn delete_ended(&self, retention: Duration, batch: i64) -> Result<Deleted, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&millis(retention), Type::INT8), (&batch, Type::INT8)];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(DELETE_ENDED_SQL, &params, "delete_ended")
            .await?;
        let count = |n: i64| u64::try_from(n).unwrap_or_default();
        Ok(Deleted {
            jobs: count(row.get(0)),
            outbox_events: count(row.get(1)),
        })
    }

    async fn prune_nonces(&self, batch: i64) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(PRUNE_NONCES_SQL, &[(&batch, Type::INT8)])
            .await?)
    }

    async fn prune_fences(&self, batch: i64) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(PRUNE_FENCES_SQL, &[(&batch, Type::INT8)])
            .await?)
    }

    async fn prune_fair_clients(&self, batch: i64) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(PRUNE_FAIR_CLIENTS_SQL, &[(&batch, Type::INT8)])
            .await?)
    }
}
