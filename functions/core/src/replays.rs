//! Step 10's storage: replays in S3 under `replays/{job_id}.osr`.

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use crate::deadline::{self, Expired};

#[derive(Debug, thiserror::Error)]
#[error("object storage failed: {0}")]
pub struct StorageError(pub String);

#[async_trait]
pub trait ReplayStore: Send + Sync {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError>;
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
}

pub struct S3ReplayStore {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3ReplayStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }
}

impl From<Expired> for StorageError {
    fn from(expired: Expired) -> Self {
        Self(expired.to_string())
    }
}

pub(crate) fn storage_error<E: std::error::Error + 'static>(error: E) -> StorageError {
    StorageError(aws_sdk_s3::error::DisplayErrorContext(error).to_string())
}

#[async_trait]
impl ReplayStore for S3ReplayStore {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/octet-stream")
            .body(ByteStream::from(body))
            .send();
        deadline::within(put)
            .await?
            .map(drop)
            .map_err(storage_error)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let delete = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        deadline::within(delete)
            .await?
            .map(drop)
            .map_err(storage_error)
    }
}
