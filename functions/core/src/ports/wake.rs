//! The dispatcher's wake-up (adapters/sqs.rs `SqsWake`): a message on the wake queue, which the
//! dispatcher's event source turns into a callback sweep. A status change is then called back
//! within seconds, and a retry or a sandbox job's next step when it falls due, rather than at
//! the next scheduled sweep (which stays, for a wake that was lost).

use std::time::Duration;

use async_trait::async_trait;

use crate::ports::StoreError;

/// The longest delay a wake can carry (SQS's `DelaySeconds` maximum); what falls due later is
/// the schedule's.
pub const MAX_WAKE_DELAY: Duration = Duration::from_secs(900);

/// The delay a wake asked for `after` from now carries: whole seconds, rounded up, at most
/// `MAX_WAKE_DELAY`.
pub fn delay_secs(after: Duration) -> i32 {
    after.min(MAX_WAKE_DELAY).as_secs_f64().ceil() as i32
}

#[async_trait]
pub trait DispatcherWake: Send + Sync {
    /// Asks for a callback sweep `after` from now (whole seconds, rounded up; at most
    /// `MAX_WAKE_DELAY`).
    async fn wake(&self, after: Duration) -> Result<(), StoreError>;
}
