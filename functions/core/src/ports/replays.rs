//! The replay store port (the replay's storage): replays under `replays/{job_id}.osr`
//! (adapters/s3.rs), and the error every object store reports; and the fetch of a replay a
//! client names by URL (`replay_url`, adapters/replay_fetch.rs).

use crate::domain::callback::CallbackUrl;
use crate::domain::deadline::Expired;
use async_trait::async_trait;
use bytes::Bytes;

#[derive(Debug, thiserror::Error)]
#[error("object storage failed: {message}")]
pub struct StorageError {
    message: String,
    transient: bool,
}

impl StorageError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
        }
    }

    /// A failure a retry may well get past (see `is_transient`).
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: true,
        }
    }

    /// What failed, without the "object storage failed" prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// S3 did not answer in time, could not be reached, or answered that it is unwell (5xx):
    /// a retry may well succeed, unlike after a refusal (a missing bucket, a denied access).
    pub fn is_transient(&self) -> bool {
        self.transient
    }
}

impl From<Expired> for StorageError {
    fn from(expired: Expired) -> Self {
        Self {
            message: expired.to_string(),
            transient: true,
        }
    }
}

#[async_trait]
pub trait ReplayStore: Send + Sync {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError>;
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
}

/// Why a replay could not be fetched from its URL (`replay_url`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The body is (or says it is) longer than the cap: a 413, as an upload's would be.
    #[error("the replay at the URL is larger than {0} bytes")]
    TooLarge(usize),
    /// Anything else, said to the client as it is: never a resolved address.
    #[error("{0}")]
    Failed(String),
}

/// Fetches the replay a client names by URL: under the callbacks' address guard (every address
/// the host resolves to public, the connection made to the addresses checked, no redirects, no
/// proxy), streamed and stopped at the cap, within its own timeout and the request's deadline.
#[async_trait]
pub trait ReplayFetcher: Send + Sync {
    async fn fetch(&self, url: &CallbackUrl, max_bytes: usize) -> Result<Bytes, FetchError>;
}
