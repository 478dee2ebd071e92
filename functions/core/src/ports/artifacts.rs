//! Links to the render workers' artifacts (videos, thumbnails) that `GET /v1/jobs/{id}` hands
//! out: presigned, so the bucket stays private.

use std::time::Duration;

use async_trait::async_trait;

use super::replays::StorageError;

#[async_trait]
pub trait ArtifactLinks: Send + Sync {
    /// A URL that fetches `key` for `ttl`.
    async fn link(&self, key: &str, ttl: Duration) -> Result<String, StorageError>;
}
