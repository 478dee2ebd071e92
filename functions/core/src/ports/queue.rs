//! The render queue port: where admitted jobs' events go (adapters/sqs.rs).

use crate::ports::outbox::OutboxEvent;
use async_trait::async_trait;

/// What became of each event handed to `publish`, by event id.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub sent: Vec<i64>,
    pub failed: Vec<(i64, String)>,
}

#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Sends every event, and says which went out.
    async fn publish(&self, events: &[OutboxEvent]) -> Published;
}
