//! The operator's policy port: the intake pause and the bans (adapters/postgres/policy.rs).
//! Requests read the whole policy in one call, through each instance's cache
//! (usecases/policy/mod.rs); `osurender-admin` writes it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::policy::{Ban, BanTarget, Pause, Policy, Reason};
use crate::ports::StoreError;

/// The most bans in force one read returns: the policy every instance holds in memory. Past
/// it, the bans that end soonest are left out (and the cache logs a warning).
pub const MAX_BANS: usize = 10_000;

/// A ban to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBan {
    pub target: BanTarget,
    pub reason: Option<Reason>,
    /// `None`: until removed.
    pub until: Option<DateTime<Utc>>,
}

#[async_trait]
pub trait PolicyStore: Send + Sync {
    /// The pause and the bans in force now (at most `max_bans`, ≤ `MAX_BANS`, the longest
    /// lasting first), in one read; no ended ban is read.
    async fn read(&self, max_bans: usize) -> Result<Policy, StoreError>;
    /// Pauses the intake (again: replaces the pause's scope and reason, and its `since`).
    async fn pause(
        &self,
        anonymous_only: bool,
        reason: Option<&Reason>,
    ) -> Result<Pause, StoreError>;
    /// Lifts the pause; the pause it lifted, `None` when the intake was not paused.
    async fn resume(&self) -> Result<Option<Pause>, StoreError>;
    async fn add_ban(&self, ban: &NewBan) -> Result<Ban, StoreError>;
    /// Removes a ban, in force or ended; the ban removed, `None` when no ban has the id.
    async fn remove_ban(&self, id: i64) -> Result<Option<Ban>, StoreError>;
}
