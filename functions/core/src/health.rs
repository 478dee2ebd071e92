//! `GET /health`: whether this function can reach what it depends on.
//!
//! Every check runs at once, each under a short timeout, so the answer comes within about
//! `CHECK_TIMEOUT` however many dependencies are down. The body names each dependency with
//! `ok` or `unavailable`; why one failed is logged, never shown to an unauthenticated caller.

use std::time::Duration;

use futures_util::future::{join_all, BoxFuture};
use futures_util::FutureExt;

use crate::app::App;

/// Well below a load balancer's or API Gateway's patience, well above a healthy round trip.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Every dependency's check, at once, each within `CHECK_TIMEOUT`: its name and whether it
/// answered. Why one failed is logged, never returned.
pub async fn probe(app: &App) -> Vec<(&'static str, bool)> {
    join_all(checks(app).into_iter().map(|(name, check)| async move {
        let outcome = match tokio::time::timeout(CHECK_TIMEOUT, check).await {
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

type Check<'a> = (&'static str, BoxFuture<'a, Result<(), String>>);

fn checks(app: &App) -> Vec<Check<'_>> {
    vec![
        ("postgres", postgres(app).boxed()),
        ("dynamodb", dynamodb(app).boxed()),
        ("s3", s3(app).boxed()),
        ("sqs", app.queue.check().boxed()),
    ]
}

async fn postgres(app: &App) -> Result<(), String> {
    let conn = app.clients.pool.get().await.map_err(|e| e.to_string())?;
    conn.query_typed("SELECT 1", &[])
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

async fn dynamodb(app: &App) -> Result<(), String> {
    app.clients
        .dynamodb
        .describe_table()
        .table_name(&app.config.rate_limit_table)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_sdk_dynamodb::error::DisplayErrorContext(e).to_string())
}

async fn s3(app: &App) -> Result<(), String> {
    app.clients
        .s3
        .head_bucket()
        .bucket(&app.config.replay_bucket)
        .send()
        .await
        .map(drop)
        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())
}
