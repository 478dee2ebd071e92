//! One leased queue, two tables: the render events (`outbox_events`, ports/outbox.rs) and the
//! jobs' callbacks (`job_callbacks`, ports/callbacks.rs) are claimed, leased, marked and given up
//! by the same protocol, so a sender that dies mid-way loses nothing and sends at most again.

use std::time::Duration;

use async_trait::async_trait;

use crate::ports::StoreError;

/// How long after falling due an item still counts as due now in `next_due`: longer than a
/// claim takes (a complex claim's first plan can take a second), so an item that fell due
/// while a sweep made its last claim is not missed.
pub const JUST_DUE: Duration = Duration::from_secs(5);

/// What a claim of leased items asks for: up to `limit` of the due pending ones that have
/// attempts left (fewer than `max_attempts` begun), each leased for `lease` with its attempt
/// counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseClaim {
    pub limit: i64,
    pub lease: Duration,
    pub max_attempts: i32,
}

/// A send that failed: when to try again, and why it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub id: i64,
    pub delay: Duration,
    pub error: String,
}

/// An item of a leased queue: its id, and the sends begun (the claimed one included).
pub trait Leased {
    fn lease(&self) -> (i64, i32);
}

#[async_trait]
pub trait LeasedQueue: Send + Sync {
    type Item: Leased + Send;
    /// A `LeaseClaim`, with whatever else decides which due items a claim takes.
    type Claim: Send;

    /// Takes the items `claim` asks for; committed before it returns.
    async fn claim(&self, claim: Self::Claim) -> Result<Vec<Self::Item>, StoreError>;

    /// The items were delivered: they are never claimed again.
    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError>;

    /// Schedules each retry of a pending item; an item out of attempts becomes `failed`.
    /// Returns how many did.
    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError>;

    /// Fails a pending item now, whatever attempts it has left (a send that cannot succeed).
    /// Returns 1, or 0 when it was no longer pending.
    async fn mark_failed(&self, failed: Retry) -> Result<u64, StoreError> {
        self.mark_retry(std::slice::from_ref(&failed), 0).await
    }

    /// Fails the due pending items that have no attempts left: their last sender died before
    /// it could say how the send went. Returns how many.
    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError>;

    /// How long until the earliest pending item with attempts left (fewer than `max_attempts`)
    /// falls due (a retry's backoff, a lease, a callback scheduled for later): zero for one
    /// that fell due within the last `JUST_DUE` (a sweep that claimed just before may have
    /// missed it); `None` if none waits. Items due for longer are a sweep's to claim, not to
    /// wait for: counting them would wake a sweep again and again for an item it cannot take.
    /// (The dispatcher reads the callbacks'; the render events are swept on the schedule, but
    /// both tables answer alike, one statement for both.)
    async fn next_due(&self, max_attempts: i32) -> Result<Option<Duration>, StoreError>;
}
