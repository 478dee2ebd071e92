//! The push queue in Postgres: the watched topics (`event_watches`) and the jobs owed a push
//! (`job_pushes`), which the database's triggers fill as watched jobs change
//! (sql/functions/queue_job_push.sql); the dispatcher claims them here.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::{ToSql, Type};

use crate::adapters::postgres::{self as db, millis};
use crate::domain::client::ClientKey;
use crate::domain::events::Topic;
use crate::domain::JobId;
use crate::ports::events::{DuePush, PushQueue};
use crate::ports::StoreError;

pub struct PgPushQueue {
    pool: deadpool_postgres::Pool,
}

impl PgPushQueue {
    pub fn new(pool: deadpool_postgres::Pool) -> Self {
        Self { pool }
    }

    /// `sql` on `job`'s push: `$1` the job, `$2` `value`.
    async fn execute_on(
        &self,
        sql: &str,
        job: JobId,
        value: (&(dyn ToSql + Sync), Type),
    ) -> Result<(), StoreError> {
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(sql, &[(&job.as_uuid(), Type::UUID), value])
            .await?;
        Ok(())
    }
}

/// A watch is only ever extended.
const WATCH_SQL: &str = "\
INSERT INTO event_watches (topic, until) VALUES ($1, $2)
ON CONFLICT (topic) DO UPDATE SET until = EXCLUDED.until
 WHERE event_watches.until < EXCLUDED.until";

/// The earliest due pushes not leased (a range of job_pushes_due), each leased: its due_at
/// moves to the lease's end, when it is due again unless pushed or changed meanwhile.
const CLAIM_SQL: &str = "\
WITH due AS (
    SELECT job_id FROM job_pushes
     WHERE due_at <= now() AND (leased_until IS NULL OR leased_until <= now())
     ORDER BY due_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE job_pushes p
   SET attempts = p.attempts + 1,
       leased_until = now() + $2 * interval '1 millisecond',
       due_at = now() + $2 * interval '1 millisecond'
  FROM due
 WHERE p.job_id = due.job_id
RETURNING p.job_id, p.client, p.attempts";

/// Removed unless a change after the pushed state queued it again (a greater sequence).
const PUSHED_SQL: &str = "DELETE FROM job_pushes WHERE job_id = $1 AND sequence <= $2";

/// A leased push is being sent: its claimer's `push_at` says when the next is due. Otherwise
/// a push is only brought forward. Nothing for a job that is gone.
const PUSH_AT_SQL: &str = "\
INSERT INTO job_pushes (job_id, client, sequence, due_at)
SELECT id, client_ip, event_seq, $2 FROM jobs WHERE id = $1
ON CONFLICT (job_id) DO UPDATE
   SET due_at = CASE WHEN job_pushes.leased_until > now() THEN EXCLUDED.due_at
                     ELSE least(job_pushes.due_at, EXCLUDED.due_at) END,
       leased_until = NULL";

/// Milliseconds until the earliest due_at (negative if past), NULL if none is queued.
const NEXT_DUE_SQL: &str = "\
SELECT (extract(epoch FROM (SELECT min(due_at) FROM job_pushes) - now()) * 1000)::float8";

/// The oldest ended watches, at most `$1` (a range of event_watches_until).
const PRUNE_WATCHES_SQL: &str = "\
DELETE FROM event_watches
 WHERE topic IN (SELECT topic FROM event_watches
                  WHERE until <= now()
                  ORDER BY until
                  LIMIT $1
                    FOR UPDATE SKIP LOCKED)";

#[async_trait]
impl PushQueue for PgPushQueue {
    async fn watch(&self, topic: &Topic, until: DateTime<Utc>) -> Result<(), StoreError> {
        let name = topic.name();
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(
            WATCH_SQL,
            &[(&name, Type::TEXT), (&until, Type::TIMESTAMPTZ)],
        )
        .await?;
        Ok(())
    }

    async fn claim(&self, limit: i64, lease: Duration) -> Result<Vec<DuePush>, StoreError> {
        let lease = millis(lease);
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(CLAIM_SQL, &[(&limit, Type::INT8), (&lease, Type::INT8)])
            .await?;
        Ok(rows
            .iter()
            .map(|row| DuePush {
                job: JobId::from(row.get::<_, uuid::Uuid>(0)),
                client: ClientKey::stored(row.get(1)),
                attempts: row.get(2),
            })
            .collect())
    }

    async fn pushed(&self, job: JobId, sequence: i64) -> Result<(), StoreError> {
        self.execute_on(PUSHED_SQL, job, (&sequence, Type::INT8))
            .await
    }

    async fn push_at(&self, job: JobId, at: DateTime<Utc>) -> Result<(), StoreError> {
        self.execute_on(PUSH_AT_SQL, job, (&at, Type::TIMESTAMPTZ))
            .await
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let row = conn.query_row(NEXT_DUE_SQL, &[], "next_due").await?;
        Ok(row
            .get::<_, Option<f64>>(0)
            .map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0)))
    }

    async fn prune_watches(&self, limit: i64) -> Result<u64, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(PRUNE_WATCHES_SQL, &[(&limit, Type::INT8)])
            .await
    }
}
