//! The rate limiter: fixed windows in a map.

use super::*;

/// Fixed windows in a map, exact as DynamoDB's conditional update.
pub struct MemoryLimiter {
    calls: Calls,
    hits: Mutex<HashMap<String, u64>>,
    down: Outage,
}

impl MemoryLimiter {
    pub(super) fn new(calls: Calls) -> Self {
        Self {
            calls,
            hits: Mutex::default(),
            down: Outage::default(),
        }
    }

    /// The limiter answers nothing until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }
}

#[async_trait]
impl RateLimiter for MemoryLimiter {
    async fn hit(&self, hit: Hit<'_>) -> Result<RateDecision, LimiterUnavailable> {
        self.calls.record("limiter.hit");
        if self.down.is_down() {
            return Err(LimiterUnavailable("the limiter is down".into()));
        }
        let mut hits = lock(&self.hits);
        let count = hits.entry(hit.counter().0).or_default();
        let allowed = *count < u64::from(hit.limit.requests);
        if allowed {
            *count += 1;
        }
        Ok(hit.decision(allowed.then_some(*count)))
    }

    async fn give_back(&self, hit: Hit<'_>) -> Result<(), LimiterUnavailable> {
        self.calls.record("limiter.give_back");
        if self.down.is_down() {
            return Err(LimiterUnavailable("the limiter is down".into()));
        }
        if let Some(count) = lock(&self.hits).get_mut(&hit.counter().0) {
            *count = count.saturating_sub(1);
        }
        Ok(())
    }
}
