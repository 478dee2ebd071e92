//! The ports: what the use cases need from outside, as traits with the data that crosses them.
//! The adapters in adapters/ implement them (Postgres, DynamoDB, S3, SQS), and so do the in-memory
//! ones the unit tests use (adapters/memory/). Nothing here knows a database or a cloud.

pub mod artifacts;
pub mod callbacks;
#[cfg(any(test, feature = "contracts"))]
pub mod contracts;
pub mod events;
pub mod health;
pub mod idempotency;
pub mod jobs;
pub mod keys;
pub mod leased;
pub mod limiter;
pub mod outbox;
pub mod policy;
pub mod queue;
pub mod replays;
pub mod secrets;
pub mod skins;
pub mod wake;

/// A store call that failed, and whether what it asked for may still have happened.
use std::sync::Arc;

use crate::support::problem::Rejection;

/// One process's adapters behind every port, as the wiring (or a test) built them; the App is
/// made from it (`App::from_ports`).
pub struct Ports {
    pub limiter: Arc<dyn limiter::RateLimiter>,
    pub jobs: Arc<dyn jobs::JobStore>,
    pub replays: Arc<dyn replays::ReplayStore>,
    pub outbox: Arc<outbox::OutboxQueue>,
    pub queue: Arc<dyn queue::EventPublisher>,
    pub callbacks: Arc<callbacks::CallbackQueue>,
    pub callback_addresses: Arc<dyn callbacks::CallbackAddresses>,
    pub replay_fetcher: Arc<dyn replays::ReplayFetcher>,
    pub skins: Arc<dyn skins::SkinStore>,
    pub skin_names: Arc<dyn skins::SkinRegistry>,
    pub idempotency: Arc<dyn idempotency::IdempotencyStore>,
    pub keys: Arc<dyn keys::KeyStore>,
    pub policy: Arc<dyn policy::PolicyStore>,
    pub artifacts: Arc<dyn artifacts::ArtifactLinks>,
    pub secrets: Arc<dyn secrets::SecretStore>,
    /// What wakes the dispatcher for a callback; none without a wake queue (the schedule sends
    /// them all).
    pub wake: Option<Arc<dyn wake::DispatcherWake>>,
    /// Live events: the open connections and what each follows.
    pub connections: Arc<dyn events::ConnectionStore>,
    /// What sends a frame to a connection; none where no events are pushed from (no
    /// `EVENTS_MANAGEMENT_URL`).
    pub pusher: Option<Arc<dyn events::Pusher>>,
    /// The jobs whose watchers are owed their state.
    pub pushes: Arc<dyn events::PushQueue>,
    /// What `/health` probes.
    pub dependencies: Vec<Arc<dyn health::Dependency>>,
}

#[derive(Debug, thiserror::Error)]
#[error("store failed: {message}")]
pub struct StoreError {
    message: String,
    outcome: Outcome,
}

/// What a failed call did to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing: the request was never sent, or the store answered with an error (for Postgres:
    /// which rolls the statement's transaction back).
    NotApplied,
    /// Unknown: the request was sent and no answer came (a timeout, a connection lost, an
    /// answer cut mid-way). It may have been applied, or still be running.
    Unknown,
}

impl StoreError {
    /// A failure that changed nothing (a configuration or connection error, a refusal).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            outcome: Outcome::NotApplied,
        }
    }

    /// A failure after the request was sent: it may have been applied.
    pub fn unknown(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            outcome: Outcome::Unknown,
        }
    }

    /// What failed, without the "store failed" prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// A request's answer to this failure of `what` (a read, a statement): 503
    /// `database_unavailable`, with the failure logged; its message never reaches the client.
    pub fn into_rejection(self, what: &str) -> Rejection {
        tracing::error!(error = %self, "{what} failed");
        Rejection::DatabaseUnavailable
    }

    /// Whether a write may have been applied although it failed: then nothing it refers to
    /// may be undone until the outcome is known.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome == Outcome::Unknown
    }
}
