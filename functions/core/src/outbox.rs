//! Delivering outbox events to the render queue, at least once (DESIGN.md invariant 4).
//!
//! Each event has a lease: while `available_at` lies ahead, one publisher owns it. The admission
//! inserts its event already leased to its own fast path (`publish_admitted`), which publishes
//! right after commit and marks it dispatched. The scheduled `sweep` claims due events with
//! `FOR UPDATE SKIP LOCKED`, pushing `available_at` one lease ahead and counting the attempt in
//! the same committed statement, then sends and marks. So two sweepers never claim one event,
//! and an event whose publisher failed or died becomes due again when its lease or backoff
//! ends: there is nothing stuck to re-arm. Normally each event is sent exactly once; it is sent
//! twice only when a publisher dies (or its marking fails) after SQS took the message, which is
//! why consumers dedupe by event id.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};

use crate::app::App;
use crate::config::Config;
use crate::db::{self, DbError};
use crate::domain::JobId;

/// The event a job's admission records, and the type of its queue message.
pub const RENDER_JOB_CREATED: &str = "render_job_created";

/// Events one claim takes: ten `SendMessageBatch` calls, sent concurrently.
const CLAIM_BATCH: i64 = 100;
/// Claims per sweep, so one sweep's work is bounded however far behind it is.
const MAX_CLAIMS_PER_SWEEP: usize = 10;
/// First retry delay; doubled per attempt up to `MAX_BACKOFF`.
const BASE_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(600);
/// Shortest lease: ample for one concurrent round of SQS calls and the marking statement.
const MIN_LEASE: Duration = Duration::from_secs(30);

/// An event to publish, as stored in `outbox_events`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEvent {
    pub id: i64,
    pub job_id: JobId,
    pub event_type: String,
    pub payload: serde_json::Value,
    /// Publishes begun, this one included.
    pub attempts: i32,
}

impl OutboxEvent {
    /// The queue message: the event's identity with its payload.
    pub fn message_body(&self) -> String {
        #[derive(Serialize)]
        struct Message<'a> {
            event_id: i64,
            event_type: &'a str,
            job_id: JobId,
            payload: &'a serde_json::Value,
        }
        serde_json::to_string(&Message {
            event_id: self.id,
            event_type: &self.event_type,
            job_id: self.job_id,
            payload: &self.payload,
        })
        .expect("messages serialize")
    }
}

/// How long a publisher owns an event it took: longer than its slowest SQS call (each bounded
/// by `AWS_TIMEOUT_MS`) plus the statement that marks it, so a live publisher never loses an
/// event to a second one.
pub fn lease(config: &Config) -> Duration {
    (3 * config.aws_timeout.max(config.db_timeout)).max(MIN_LEASE)
}

/// Delay before the next publish after `attempts` failed ones: 5 s, 10 s, 20 s, … capped at
/// 10 minutes, so a queue outage of about half an hour is ridden out with the default ten
/// attempts without hammering SQS.
pub fn backoff(attempts: i32) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 16) as u32;
    BASE_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// A publish that failed: when to try again, and why it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub id: i64,
    pub delay: Duration,
    pub error: String,
}

#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Takes up to `limit` due pending events that have attempts left, leasing each for `lease`
    /// and counting the attempt; committed before it returns.
    async fn claim(
        &self,
        limit: i64,
        lease: Duration,
        max_attempts: i32,
    ) -> Result<Vec<OutboxEvent>, DbError>;

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), DbError>;

    /// Schedules each retry; an event out of attempts becomes `failed`. Returns how many did.
    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, DbError>;

    /// Fails the due pending events that have no attempts left: their last publisher died
    /// before it could say how the publish went. Returns how many.
    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, DbError>;
}

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
RETURNING e.id, e.job_id, e.event_type, e.payload, e.attempts";

const DISPATCHED_SQL: &str = "\
UPDATE outbox_events
   SET status = 'dispatched', dispatched_at = now(), last_error = NULL
 WHERE id = ANY($1) AND status = 'pending'";

const RETRY_SQL: &str = "\
UPDATE outbox_events e
   SET available_at = now() + r.delay_ms * interval '1 millisecond',
       last_error = r.error,
       status = CASE WHEN e.attempts >= $4 THEN 'failed' ELSE 'pending' END
  FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r (id, delay_ms, error)
 WHERE e.id = r.id AND e.status = 'pending'
RETURNING e.status";

const FAIL_EXHAUSTED_SQL: &str = "\
UPDATE outbox_events
   SET status = 'failed',
       last_error = coalesce(last_error, 'publisher stopped before the outcome was recorded')
 WHERE status = 'pending' AND available_at <= now() AND attempts >= $1";

fn millis(duration: Duration) -> i64 {
    duration.as_millis().try_into().unwrap_or(i64::MAX)
}

#[async_trait]
impl OutboxStore for PgOutboxStore {
    async fn claim(
        &self,
        limit: i64,
        lease: Duration,
        max_attempts: i32,
    ) -> Result<Vec<OutboxEvent>, DbError> {
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(
                CLAIM_SQL,
                &[
                    (&limit, Type::INT8),
                    (&millis(lease), Type::INT8),
                    (&max_attempts, Type::INT4),
                ],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| OutboxEvent {
                id: row.get(0),
                job_id: JobId::from(row.get::<_, uuid::Uuid>(1)),
                event_type: row.get(2),
                payload: row.get(3),
                attempts: row.get(4),
            })
            .collect())
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), DbError> {
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(DISPATCHED_SQL, &[(&ids, Type::INT8_ARRAY)])
            .await?;
        Ok(())
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, DbError> {
        let ids: Vec<i64> = retries.iter().map(|r| r.id).collect();
        let delays: Vec<i64> = retries.iter().map(|r| millis(r.delay)).collect();
        let errors: Vec<&str> = retries.iter().map(|r| r.error.as_str()).collect();
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&ids, Type::INT8_ARRAY),
            (&delays, Type::INT8_ARRAY),
            (&errors, Type::TEXT_ARRAY),
            (&max_attempts, Type::INT4),
        ];
        let conn = db::checkout(&self.pool).await?;
        let rows = conn.query_typed(RETRY_SQL, &params).await?;
        Ok(rows
            .iter()
            .filter(|row| row.get::<_, &str>(0) == "failed")
            .count() as u64)
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, DbError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn
            .execute_typed(FAIL_EXHAUSTED_SQL, &[(&max_attempts, Type::INT4)])
            .await?)
    }
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub claimed: u64,
    pub dispatched: u64,
    pub retried: u64,
    pub failed: u64,
}

impl std::ops::AddAssign for SweepReport {
    fn add_assign(&mut self, round: Self) {
        self.claimed += round.claimed;
        self.dispatched += round.dispatched;
        self.retried += round.retried;
        self.failed += round.failed;
    }
}

/// The `outbox-dispatcher`'s work: publishes due events until none are left (at most
/// `MAX_CLAIMS_PER_SWEEP` claims).
pub async fn sweep(app: &App) -> Result<SweepReport, DbError> {
    let mut report = SweepReport::default();
    let lease = lease(&app.config);
    for _ in 0..MAX_CLAIMS_PER_SWEEP {
        let events = app
            .outbox
            .claim(CLAIM_BATCH, lease, app.config.outbox_max_attempts)
            .await?;
        report += deliver(app, &events).await?;
        if (events.len() as i64) < CLAIM_BATCH {
            break;
        }
    }
    Ok(report)
}

/// Publishes claimed events and records the outcome of each.
async fn deliver(app: &App, events: &[OutboxEvent]) -> Result<SweepReport, DbError> {
    if events.is_empty() {
        return Ok(SweepReport::default());
    }
    let published = app.queue.publish(events).await;
    if !published.sent.is_empty() {
        app.outbox.mark_dispatched(&published.sent).await?;
    }
    let retries = retries(events, &published);
    for retry in &retries {
        tracing::warn!(event_id = retry.id, error = %retry.error, "outbox publish failed");
    }
    let failed = if retries.is_empty() {
        0
    } else {
        app.outbox
            .mark_retry(&retries, app.config.outbox_max_attempts)
            .await?
    };
    Ok(SweepReport {
        claimed: events.len() as u64,
        dispatched: published.sent.len() as u64,
        retried: retries.len() as u64 - failed,
        failed,
    })
}

/// Every event SQS did not acknowledge, with its backoff.
fn retries(events: &[OutboxEvent], published: &crate::queue::Published) -> Vec<Retry> {
    let reasons: HashMap<i64, &str> = published
        .failed
        .iter()
        .map(|(id, reason)| (*id, reason.as_str()))
        .collect();
    events
        .iter()
        .filter(|event| !published.sent.contains(&event.id))
        .map(|event| Retry {
            id: event.id,
            delay: backoff(event.attempts),
            error: reasons
                .get(&event.id)
                .copied()
                .unwrap_or("not acknowledged by SQS")
                .to_owned(),
        })
        .collect()
}

/// The fast path of a fresh admission: publish its event and mark it dispatched. A failure
/// is only logged: the event's lease runs out and the sweep delivers it.
pub async fn publish_admitted(app: &App, event: &OutboxEvent) {
    let published = app.queue.publish(std::slice::from_ref(event)).await;
    if let Some((_, error)) = published.failed.first() {
        tracing::warn!(event_id = event.id, %error, "fast-path publish failed; the sweep will deliver");
        return;
    }
    if let Err(error) = app.outbox.mark_dispatched(&published.sent).await {
        tracing::warn!(event_id = event.id, %error, "published but not marked; the sweep may send it again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Published;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs = |attempts| backoff(attempts).as_secs();
        assert_eq!(
            (1..=9).map(secs).collect::<Vec<_>>(),
            [5, 10, 20, 40, 80, 160, 320, 600, 600]
        );
        assert_eq!(secs(0), 5);
        assert_eq!(secs(-3), 5);
        assert_eq!(secs(i32::MAX), 600);
    }

    #[test]
    fn lease_outlasts_the_slowest_publish() {
        let config = |aws_ms: &str| {
            Config::from_lookup(|name| (name == "AWS_TIMEOUT_MS").then(|| aws_ms.to_owned()))
                .unwrap()
        };
        assert_eq!(lease(&config("5000")), MIN_LEASE);
        assert_eq!(lease(&config("20000")), Duration::from_secs(60));
    }

    fn event(id: i64, attempts: i32) -> OutboxEvent {
        OutboxEvent {
            id,
            job_id: JobId::new(),
            event_type: RENDER_JOB_CREATED.into(),
            payload: serde_json::json!({ "skin": "Default" }),
            attempts,
        }
    }

    #[test]
    fn everything_not_acknowledged_is_retried_with_its_backoff() {
        let events = [event(1, 1), event(2, 3), event(3, 1)];
        let published = Published {
            sent: vec![1],
            failed: vec![(2, "throttled".into())],
        };
        assert_eq!(
            retries(&events, &published),
            [
                Retry {
                    id: 2,
                    delay: Duration::from_secs(20),
                    error: "throttled".into()
                },
                Retry {
                    id: 3,
                    delay: Duration::from_secs(5),
                    error: "not acknowledged by SQS".into()
                },
            ]
        );
    }

    #[test]
    fn the_message_carries_the_event_id() {
        let e = event(42, 1);
        let body: serde_json::Value = serde_json::from_str(&e.message_body()).unwrap();
        assert_eq!(body["event_id"], 42);
        assert_eq!(body["event_type"], RENDER_JOB_CREATED);
        assert_eq!(body["job_id"], e.job_id.to_string());
        assert_eq!(body["payload"]["skin"], "Default");
    }
}
