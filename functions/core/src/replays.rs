//! Step 10's storage: replays in S3 under `replays/{job_id}.osr`.

use async_trait::async_trait;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use crate::deadline::{self, Expired};

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
        Self {
            message: expired.to_string(),
            transient: true,
        }
    }
}

pub(crate) fn storage_error<E: std::error::Error + 'static>(error: E) -> StorageError {
    StorageError::new(aws_sdk_s3::error::DisplayErrorContext(error).to_string())
}

/// An S3 call's failure, transient unless S3 answered with a refusal (4xx).
fn sdk_storage_error<E: std::error::Error + 'static>(
    error: SdkError<E, HttpResponse>,
) -> StorageError {
    let transient = match &error {
        SdkError::ServiceError(failure) => failure.raw().status().is_server_error(),
        _ => true,
    };
    StorageError {
        transient,
        ..storage_error(error)
    }
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
            .map_err(sdk_storage_error)
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
            .map_err(sdk_storage_error)
    }
}
