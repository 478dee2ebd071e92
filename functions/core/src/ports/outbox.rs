//! The outbox port: the events admission records with its job, and the store that leases them
//! out to publishers (adapters/postgres/outbox.rs).

use serde::Serialize;

use crate::domain::job::JobId;
use crate::ports::leased::{LeaseClaim, Leased, LeasedQueue};

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
    /// The client whose share of the farm it is (an anonymous network, or a key): the SQS
    /// message group, so a fair queue keeps one client's burst from delaying another's.
    pub group: Option<String>,
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

impl Leased for OutboxEvent {
    fn lease(&self) -> (i64, i32) {
        (self.id, self.attempts)
    }
}

/// The render events, leased out to publishers.
pub type OutboxQueue = dyn LeasedQueue<Item = OutboxEvent, Claim = LeaseClaim>;
