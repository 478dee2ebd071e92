//! The rate limiter port: a fixed-window counter per endpoint and client (store/dynamo.rs).

use crate::domain::client::ClientKey;
use crate::domain::rate::RateDecision;
use crate::domain::rate::RateLimit;
use async_trait::async_trait;
#[derive(Debug, thiserror::Error)]
#[error("rate limiter unavailable: {0}")]
pub struct LimiterUnavailable(pub String);

#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Counts one request of `client` against `endpoint`'s window containing `now`.
    async fn hit(
        &self,
        endpoint: &'static str,
        client: &ClientKey,
        limit: RateLimit,
        now: u64,
    ) -> Result<RateDecision, LimiterUnavailable>;
}
