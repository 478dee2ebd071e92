//! `GET /health`: whether this function can reach what it depends on.
//!
//! Every check runs at once, each under a short timeout, so a probe takes about
//! `CHECK_TIMEOUT` at most however many dependencies are down. An instance probes at most once
//! per `HEALTH_CHECK_INTERVAL` (10 s), one probe at a time, and answers every other request
//! from the last probe: health checks, however many and from whomever, cost the dependencies
//! one round trip each per interval per instance. The body names each dependency with `ok` or
//! `unavailable`; why one failed is logged, never shown to an unauthenticated caller.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use crate::ports::health::Dependency;
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading};

/// Well below a load balancer's or API Gateway's patience, well above a healthy round trip.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Each dependency's name and whether it answered.
pub type Checks = Arc<[(&'static str, bool)]>;

/// An instance's dependencies and its last probe of them.
pub struct HealthCheck {
    dependencies: Vec<Arc<dyn Dependency>>,
    /// The last probe's answer: requests that find it stale wait for one probe, not one each.
    last: Refreshed<Checks>,
}

impl HealthCheck {
    pub fn new(dependencies: Vec<Arc<dyn Dependency>>, interval: Duration) -> Self {
        let refresh = Refresh {
            ttl: interval,
            // A probe cannot fail: each failed check is part of its answer.
            retry_after_failure: interval,
            while_loading: WhileLoading::Wait,
        };
        Self {
            dependencies,
            last: Refreshed::new(refresh),
        }
    }

    /// The last probe's answer if it started less than the interval ago, else a new probe's.
    pub async fn checks(&self) -> Checks {
        let probed = self
            .last
            .get(|| async { Ok::<_, Infallible>(self.probe().await.into()) })
            .await;
        // A probe always loads (it cannot fail), so there is always a value.
        probed.unwrap_or_default()
    }

    /// Every dependency's check, at once, each within `CHECK_TIMEOUT`. Why one failed is
    /// logged, never returned.
    async fn probe(&self) -> Vec<(&'static str, bool)> {
        join_all(self.dependencies.iter().map(|dependency| async move {
            let name = dependency.name();
            let outcome = match tokio::time::timeout(CHECK_TIMEOUT, dependency.check()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
            };
            if let Err(error) = &outcome {
                tracing::warn!(dependency = name, %error, "health check failed");
            }
            (name, outcome.is_ok())
        }))
        .await
    }
}

#[cfg(test)]
mod tests;
