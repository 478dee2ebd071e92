//! The rate limiter port: a fixed-window counter per endpoint and client (adapters/dynamo.rs).

use crate::domain::client::ClientKey;
use crate::domain::rate::RateDecision;
use crate::domain::rate::RateLimit;
use async_trait::async_trait;
#[derive(Debug, thiserror::Error)]
#[error("rate limiter unavailable: {0}")]
pub struct LimiterUnavailable(pub String);

/// One request of `client` against `endpoint`'s `limit`, in the window containing `now` (epoch
/// seconds).
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    pub endpoint: &'static str,
    pub client: &'a ClientKey,
    pub limit: RateLimit,
    pub now: u64,
}

impl Hit<'_> {
    /// The key of the counter this hit counts in (one per endpoint, client and window), and
    /// when that window ends.
    pub fn counter(&self) -> (String, u64) {
        let (start, end) = self.limit.window(self.now);
        (format!("{}#{}#{start}", self.endpoint, self.client), end)
    }

    /// The decision once the counter answered: `hits` with this one, `None` if refused.
    pub fn decision(&self, hits: Option<u64>) -> RateDecision {
        RateDecision::new(self.endpoint, self.limit, hits, self.now)
    }
}

#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Counts `hit`'s request in its window.
    async fn hit(&self, hit: Hit<'_>) -> Result<RateDecision, LimiterUnavailable>;

    /// Takes back one counted `hit` (the same endpoint, client and window): a request refused
    /// after the rate limit for the service's state, not its own, spends no quota. Never below
    /// zero; a window that has ended or been pruned is left alone.
    async fn give_back(&self, hit: Hit<'_>) -> Result<(), LimiterUnavailable>;
}
