//! The workers' reports: a job's transition, once per nonce, from a legal predecessor only.

use async_trait::async_trait;
use tokio_postgres::types::{ToSql, Type};

use super::{status_of, PgJobStore};
use crate::adapters::postgres::{self as db, millis};
use crate::domain::failure::FailureCode;
use crate::ports::jobs::{JobReport, JobTransitions, TransitionOutcome};
use crate::ports::StoreError;

/// The nonce insert and the conditional update in one statement: the update runs only if the
/// insert did (the nonce was fresh) and only from a legal predecessor, which Postgres re-checks
/// against the newest row version if another transaction changed the job meanwhile. Progress is
/// per state: a report that changes the state without a progress starts it at 0.
///
/// `pushes`: the change queued a live-event push, as the `queue_job_push` trigger decides (its
/// event_seq moved, and its job or its key is watched): the trigger's own insert is not visible to
/// this statement. The sequence before is read from the statement's snapshot: a concurrent change
/// may make it say so for nothing, which costs one needless wake.
const TRANSITION_SQL: &str = "\
WITH before AS (
    SELECT event_seq FROM jobs WHERE id = $1
), fresh AS (
    INSERT INTO webhook_nonces (nonce, expires_at) VALUES ($2, $3)
    ON CONFLICT DO NOTHING
    RETURNING nonce
), moved AS (
    UPDATE jobs
       SET status = $4::text::job_status,
           progress = coalesce($6, CASE WHEN status = $4::text::job_status
                                        THEN progress ELSE 0 END),
           video_key = coalesce($7, video_key),
           thumb_key = coalesce($8, thumb_key),
           error = coalesce($9, error),
           error_code = coalesce($11, error_code),
           error_retryable = coalesce($12, error_retryable),
           deadline_at = now() + $10 * interval '1 millisecond',
           started_at = CASE WHEN started_at IS NULL AND $4 IN ('downloading', 'rendering')
                             THEN now() ELSE started_at END,
           updated_at = now()
     WHERE id = $1
       AND status = ANY ($5::text[]::job_status[])
       AND EXISTS (SELECT FROM fresh)
    RETURNING status::text, progress,
              -- queue_job_callback (BEFORE UPDATE) set callback_at if it queued one
              callback_url IS NOT NULL AND callback_at = now() AS calls_back,
              event_seq IS DISTINCT FROM (SELECT event_seq FROM before)
              AND EXISTS (SELECT FROM event_watches w
                           WHERE w.topic IN ('job#' || id,
                                             CASE WHEN client_ip LIKE 'key:%'
                                                  THEN 'key#' || client_ip END)
                             AND w.until > now()) AS pushes
)
SELECT EXISTS (SELECT FROM fresh),
       (SELECT status FROM moved),
       (SELECT progress FROM moved),
       (SELECT status::text FROM jobs WHERE id = $1),
       (SELECT calls_back FROM moved),
       (SELECT pushes FROM moved)";

#[async_trait]
impl JobTransitions for PgJobStore {
    async fn transition(&self, report: &JobReport<'_>) -> Result<TransitionOutcome, StoreError> {
        let (transition, nonce) = (report.transition, report.nonce);
        let predecessors: Vec<&str> = transition
            .to
            .predecessors()
            .iter()
            .map(|status| status.as_str())
            .collect();
        let deadline_ms = transition.deadline_in.map(millis);
        let error_code = transition.error_code.map(FailureCode::as_str);
        let retryable = transition.error_code.map(FailureCode::retryable);
        let params: [(&(dyn ToSql + Sync), Type); 12] = [
            (&report.id.as_uuid(), Type::UUID),
            (&nonce.value, Type::TEXT),
            (&nonce.expires_at, Type::TIMESTAMPTZ),
            (&transition.to.as_str(), Type::TEXT),
            (&predecessors, Type::TEXT_ARRAY),
            (&transition.progress, Type::FLOAT4),
            (&transition.video_key, Type::TEXT),
            (&transition.thumb_key, Type::TEXT),
            (&transition.error, Type::TEXT),
            (&deadline_ms, Type::INT8),
            (&error_code, Type::TEXT),
            (&retryable, Type::BOOL),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(TRANSITION_SQL, &params, "transition")
            .await?;
        let fresh: bool = row.get(0);
        let moved: Option<&str> = row.get(1);
        let current: Option<&str> = row.get(3);
        Ok(match (fresh, moved, current) {
            (false, _, _) => TransitionOutcome::NonceReused,
            (true, Some(status), _) => TransitionOutcome::Applied {
                status: status_of(status)?,
                progress: row.get(2),
                calls_back: row.get::<_, Option<bool>>(4).unwrap_or(false),
                pushes: row.get::<_, Option<bool>>(5).unwrap_or(false),
            },
            (true, None, None) => TransitionOutcome::UnknownJob,
            (true, None, Some(current)) => TransitionOutcome::Illegal {
                current: status_of(current)?,
            },
        })
    }
}
