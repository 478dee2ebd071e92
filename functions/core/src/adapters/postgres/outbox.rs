//! `outbox_events`: leased claims, marks and the janitor's give-up.

use std::time::Duration;

use crate::adapters::postgres::{self as db, millis};
use crate::domain::job::JobId;
use crate::ports::leased::{LeaseClaim, LeasedQueue, Retry, JUST_DUE};
use crate::ports::outbox::OutboxEvent;
use crate::ports::StoreError;
use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};
pub struct PgOutboxStore {
    pool: Pool,
}

impl PgOutboxStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

/// One statement: a second sweeper skips the rows this one has locked, and a row committed as
/// claimed no longer matches `available_at <= now()` when re-checked.
const CLAIM_SQL: &str = "\
WITH due AS (
    SELECT id FROM outbox_events
     WHERE status = 'pending' AND available_at <= now() AND attempts < $3
     ORDER BY available_at, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE outbox_events e
   SET available_at = now() + $2 * interval '1 millisecond',
       attempts = e.attempts + 1
  FROM due
 WHERE e.id = due.id
RETURNING e.id, e.job_id, e.event_type, e.payload, e.attempts,
          -- The message group: the job's fair client (an anonymous network, or the key).
          (SELECT coalesce(j.client_network, j.client_ip) FROM jobs j WHERE j.id = e.job_id)";

/// The marks of a leased claim, shared by the render events (`outbox_events`) and the callbacks
/// (`job_callbacks`, adapters/postgres/callbacks.rs): both tables have the same lease columns.
/// Statements made once, at compile time (`leased_table!`): marking runs on every admission.
pub(super) struct LeasedTable {
    dispatched: &'static str,
    retry: &'static str,
    fail_exhausted: &'static str,
    next_due: &'static str,
}

/// The `LeasedTable` of the table named by this literal.
macro_rules! leased_table {
    ($table:literal) => {
        LeasedTable::new(
            concat!(
                "UPDATE ", $table,
                " SET status = 'dispatched', dispatched_at = now(), last_error = NULL",
                " WHERE id = ANY($1) AND status = 'pending'"
            ),
            concat!(
                "UPDATE ", $table, " e",
                " SET available_at = now() + r.delay_ms * interval '1 millisecond',",
                " last_error = r.error,",
                " status = CASE WHEN e.attempts >= $4 THEN 'failed' ELSE 'pending' END",
                " FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r (id, delay_ms, error)",
                " WHERE e.id = r.id AND e.status = 'pending'",
                " RETURNING e.status"
            ),
            concat!(
                "UPDATE ", $table,
                " SET status = 'failed',",
                " last_error = coalesce(last_error, 'sender stopped before the outcome was recorded')",
                " WHERE status = 'pending' AND available_at <= now() AND attempts >= $1"
            ),
            // The pending index on available_at, from JUST_DUE ago: its first row with attempts left.
            concat!(
                // (Not greatest(…, 0): it skips a NULL, and no row must stay NULL.)
                "SELECT (extract(epoch FROM min(available_at) - now()) * 1000)::bigint FROM ",
                $table,
                " WHERE status = 'pending' AND attempts < $1",
                " AND available_at > now() - $2 * interval '1 millisecond'",
                // A render event held for release (release_jobs) is due when released.
                " AND available_at < 'infinity'"
            ),
        )
    };
}
pub(super) use leased_table;

impl LeasedTable {
    /// The same table with marks of its own (job_callbacks' also move a job's later callbacks).
    pub(super) const fn with_marks(self, dispatched: &'static str, retry: &'static str) -> Self {
        Self {
            dispatched,
            retry,
            ..self
        }
    }

    pub(super) const fn new(
        dispatched: &'static str,
        retry: &'static str,
        fail_exhausted: &'static str,
        next_due: &'static str,
    ) -> Self {
        Self {
            dispatched,
            retry,
            fail_exhausted,
            next_due,
        }
    }

    pub async fn mark_dispatched(&self, pool: &Pool, ids: &[i64]) -> Result<(), StoreError> {
        let conn = db::checkout(pool).await?;
        conn.execute_typed(self.dispatched, &[(&ids, Type::INT8_ARRAY)])
            .await?;
        Ok(())
    }

    pub async fn mark_retry(
        &self,
        pool: &Pool,
        retries: &[Retry],
        max_attempts: i32,
    ) -> Result<u64, StoreError> {
        let ids: Vec<i64> = retries.iter().map(|r| r.id).collect();
        let delays: Vec<i64> = retries.iter().map(|r| millis(r.delay)).collect();
        let errors: Vec<&str> = retries.iter().map(|r| r.error.as_str()).collect();
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&ids, Type::INT8_ARRAY),
            (&delays, Type::INT8_ARRAY),
            (&errors, Type::TEXT_ARRAY),
            (&max_attempts, Type::INT4),
        ];
        let conn = db::checkout(pool).await?;
        let rows = conn.query_typed(self.retry, &params).await?;
        Ok(rows
            .iter()
            .filter(|row| row.get::<_, &str>(0) == "failed")
            .count() as u64)
    }

    pub async fn fail_exhausted(&self, pool: &Pool, max_attempts: i32) -> Result<u64, StoreError> {
        let conn = db::checkout(pool).await?;
        conn.execute_typed(self.fail_exhausted, &[(&max_attempts, Type::INT4)])
            .await
    }

    pub async fn next_due(
        &self,
        pool: &Pool,
        max_attempts: i32,
    ) -> Result<Option<Duration>, StoreError> {
        let just_due = millis(JUST_DUE);
        let params: [(&(dyn ToSql + Sync), Type); 2] =
            [(&max_attempts, Type::INT4), (&just_due, Type::INT8)];
        let conn = db::checkout(pool).await?;
        let row = conn.query_row(self.next_due, &params, "next due").await?;
        Ok(row
            .get::<_, Option<i64>>(0)
            .map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }
}

const OUTBOX: LeasedTable = leased_table!("outbox_events");

/// A claim's `$1` to `$3`, as both tables' claims take them: limit, lease (ms), attempts.
pub(super) fn lease_params<'a>(
    claim: &'a LeaseClaim,
    lease_ms: &'a i64,
) -> [(&'a (dyn ToSql + Sync), Type); 3] {
    [
        (&claim.limit, Type::INT8),
        (lease_ms, Type::INT8),
        (&claim.max_attempts, Type::INT4),
    ]
}

#[async_trait]
impl LeasedQueue for PgOutboxStore {
    type Item = OutboxEvent;
    type Claim = LeaseClaim;

    async fn claim(&self, claim: LeaseClaim) -> Result<Vec<OutboxEvent>, StoreError> {
        let lease = millis(claim.lease);
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(CLAIM_SQL, &lease_params(&claim, &lease))
            .await?;
        Ok(rows
            .iter()
            .map(|row| OutboxEvent {
                id: row.get(0),
                job_id: JobId::from(row.get::<_, uuid::Uuid>(1)),
                event_type: row.get(2),
                payload: row.get(3),
                attempts: row.get(4),
                group: row.get(5),
            })
            .collect())
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        OUTBOX.mark_dispatched(&self.pool, ids).await
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        OUTBOX.mark_retry(&self.pool, retries, max_attempts).await
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        OUTBOX.fail_exhausted(&self.pool, max_attempts).await
    }

    async fn next_due(&self, max_attempts: i32) -> Result<Option<Duration>, StoreError> {
        OUTBOX.next_due(&self.pool, max_attempts).await
    }
}
