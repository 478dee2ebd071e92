//! What `GET /health` checks: each dependency the function reaches, by name.

use async_trait::async_trait;

#[async_trait]
pub trait Dependency: Send + Sync {
    /// The name the health answer shows (`postgres`, `dynamodb`, `s3`, `sqs`).
    fn name(&self) -> &'static str;
    /// One cheap round trip; why it failed, for the log (never shown to the caller).
    async fn check(&self) -> Result<(), String>;
}
