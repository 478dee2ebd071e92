//! The outbox port: the events admission records with its job, and the store that leases them
//! out to publishers (adapters/postgres/outbox.rs).

use crate::domain::job::JobId;
use crate::ports::StoreError;
use async_trait::async_trait;
use serde::Serialize;
use std::time::Duration;

/// The event a job's admission records, and the type of its queue message.
pub const RENDER_JOB_CREATED: &str = "render_job_created";

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

/// A publish that failed: when to try again, and why it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub id: i64,
    pub delay: Duration,
    pub error: String,
}

/// What a claim of leased items (render events, callbacks) asks for: up to `limit` of the due
/// pending ones that have attempts left (fewer than `max_attempts` begun), each leased for
/// `lease` with its attempt counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseClaim {
    pub limit: i64,
    pub lease: Duration,
    pub max_attempts: i32,
}

#[async_trait]
pub trait OutboxStore: Send + Sync {
    /// Takes the events `claim` asks for; committed before it returns.
    async fn claim(&self, claim: LeaseClaim) -> Result<Vec<OutboxEvent>, StoreError>;

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError>;

    /// Schedules each retry; an event out of attempts becomes `failed`. Returns how many did.
    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError>;

    /// Fails the due pending events that have no attempts left: their last publisher died
    /// before it could say how the publish went. Returns how many.
    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError>;
}
