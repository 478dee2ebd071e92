//! `GET /health`: whether this function can reach what it depends on.
//!
//! Every check runs at once, each under a short timeout, so the answer comes within about
//! `CHECK_TIMEOUT` however many dependencies are down. The body names each dependency with
//! `ok` or `unavailable`; why one failed is logged, never shown to an unauthenticated caller.

use std::time::Duration;

use futures_util::future::join_all;

use crate::app::App;

/// Well below a load balancer's or API Gateway's patience, well above a healthy round trip.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Every dependency's check, at once, each within `CHECK_TIMEOUT`: its name and whether it
/// answered. Why one failed is logged, never returned.
pub async fn probe(app: &App) -> Vec<(&'static str, bool)> {
    join_all(app.dependencies.iter().map(|dependency| async move {
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
