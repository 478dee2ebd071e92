//! The ports: what the use cases need from outside, as traits with the data that crosses them.
//! The adapters in store/ implement them (Postgres, DynamoDB, S3, SQS), and so do the in-memory
//! ones the unit tests use (store/memory.rs). Nothing here knows a database or a cloud.

pub mod artifacts;
pub mod health;
pub mod idempotency;
pub mod jobs;
pub mod limiter;
pub mod outbox;
pub mod queue;
pub mod replays;
pub mod skins;

/// A store call that failed, and whether what it asked for may still have happened.
#[derive(Debug, thiserror::Error)]
#[error("database unavailable: {message}")]
pub struct DbError {
    message: String,
    outcome: Outcome,
}

/// What a failed call did to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing: the statement was never sent, or the server answered with an error (which
    /// rolls the statement's transaction back).
    NotApplied,
    /// Unknown: the statement was sent and no answer came (a timeout, a connection lost, an
    /// answer cut mid-way). It may have committed, or still be running.
    Unknown,
}

impl DbError {
    /// A failure that changed nothing (a configuration or connection error, a refusal).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            outcome: Outcome::NotApplied,
        }
    }

    /// A failure after the statement was sent: it may have been applied.
    pub fn unknown(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            outcome: Outcome::Unknown,
        }
    }

    /// What failed, without the "database unavailable" prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Whether a write may have been applied although it failed: then nothing it refers to
    /// may be undone until the outcome is known.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome == Outcome::Unknown
    }
}
