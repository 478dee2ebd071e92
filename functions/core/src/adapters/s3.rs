//! S3: replays (`replays/{job_id}.osr`), skins (`skins/{name}.osk`, presigned uploads under
//! `incoming/`), and the presigned links the API hands out. Every call of a request is bounded by
//! what is left of its deadline.

use super::presign::{self, PostPolicy};
use crate::domain::deadline::{self};
use crate::domain::render::SkinName;
use crate::ports::replays::ReplayStore;
use crate::ports::replays::StorageError;
use crate::ports::skins::content_id;
use crate::ports::skins::incoming_content_id;
use crate::ports::skins::skin_key;
use crate::ports::skins::ByteChunks;
use crate::ports::skins::Copied;
use crate::ports::skins::ObjectVersion;
use crate::ports::skins::PresignedPost;
use crate::ports::skins::SkinStore;
use crate::ports::skins::INCOMING_PREFIX;
use async_trait::async_trait;
use aws_sdk_s3::operation::head_object::HeadObjectOutput;
use aws_sdk_s3::presigning::PresigningConfig;

use crate::ports::artifacts::ArtifactLinks;
use crate::ports::health::Dependency;
use aws_config::SdkConfig;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::ProvideCredentials;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use std::ops::Range;
use std::time::{Duration, SystemTime};
/// A bucket of plain objects: the replays are stored in one, and the artifacts' links are
/// presigned GETs of another.
pub struct S3Bucket {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Bucket {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }
}

#[async_trait]
impl ArtifactLinks for S3Bucket {
    async fn link(&self, key: &str, ttl: Duration) -> Result<String, StorageError> {
        let config = PresigningConfig::expires_in(ttl).map_err(storage_error)?;
        self.client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(config)
            .await
            .map(|request| request.uri().to_owned())
            .map_err(storage_error)
    }
}

pub(crate) fn storage_error<E: std::error::Error + 'static>(error: E) -> StorageError {
    StorageError::new(aws_sdk_s3::error::DisplayErrorContext(error).to_string())
}

/// Deletes `key` (S3 answers success for a key that is not there).
async fn delete_object(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
) -> Result<(), StorageError> {
    let delete = client.delete_object().bucket(bucket).key(key).send();
    deadline::within(delete)
        .await?
        .map(drop)
        .map_err(sdk_storage_error)
}

/// An S3 call's failure, transient unless S3 answered with a refusal (4xx).
fn sdk_storage_error<E: std::error::Error + 'static>(
    error: SdkError<E, HttpResponse>,
) -> StorageError {
    let transient = match &error {
        SdkError::ServiceError(failure) => failure.raw().status().is_server_error(),
        _ => true,
    };
    let message = aws_sdk_s3::error::DisplayErrorContext(error).to_string();
    if transient {
        StorageError::transient(message)
    } else {
        StorageError::new(message)
    }
}

#[async_trait]
impl ReplayStore for S3Bucket {
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
        delete_object(&self.client, &self.bucket, key).await
    }
}

/// `/health`: the bucket answers.
#[async_trait]
impl Dependency for S3Bucket {
    fn name(&self) -> &'static str {
        "s3"
    }

    async fn check(&self) -> Result<(), String> {
        super::probe(self.client.head_bucket().bucket(&self.bucket).send()).await
    }
}

/// The user metadata (`x-amz-meta-content`) naming a stored skin's content.
const CONTENT_METADATA: &str = "content";

pub struct S3SkinStore {
    client: aws_sdk_s3::Client,
    sdk: SdkConfig,
    bucket: String,
}

impl S3SkinStore {
    /// The object at `key`, or `None` if there is none; bounded by the request's deadline.
    async fn head_object(&self, key: &str) -> Result<Option<HeadObjectOutput>, StorageError> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send();
        match deadline::within(head).await? {
            Ok(object) => Ok(Some(object)),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(e) => Err(storage_error(e)),
        }
    }

    /// `sdk` supplies what presigning needs and the S3 client does not expose: the
    /// credentials, the region and the endpoint.
    pub fn new(client: aws_sdk_s3::Client, sdk: SdkConfig, bucket: impl Into<String>) -> Self {
        Self {
            client,
            sdk,
            bucket: bucket.into(),
        }
    }

    /// Lists keys under `prefix`, page by page, stopping at `limit`.
    async fn list_keys(&self, prefix: &str, limit: usize) -> Result<Vec<String>, StorageError> {
        let mut keys = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = deadline::within(pages.next()).await? {
            let page = page.map_err(storage_error)?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            if keys.len() >= limit {
                keys.truncate(limit);
                break;
            }
        }
        Ok(keys)
    }
}

#[async_trait]
impl SkinStore for S3SkinStore {
    async fn exists(&self, name: &SkinName) -> Result<bool, StorageError> {
        Ok(self.head_object(&skin_key(name)).await?.is_some())
    }

    async fn put_new(&self, name: &SkinName, body: Bytes) -> Result<bool, StorageError> {
        let content = content_id(&body);
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(skin_key(name))
            .if_none_match("*")
            .metadata(CONTENT_METADATA, &content)
            .content_type("application/octet-stream")
            .body(ByteStream::from(body))
            .send();
        match deadline::within(put).await? {
            Ok(_) => Ok(true),
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => {
                self.holds(name, &content).await
            }
            Err(e) => Err(storage_error(e)),
        }
    }

    async fn holds(&self, name: &SkinName, content: &str) -> Result<bool, StorageError> {
        let head = self.head_object(&skin_key(name)).await?;
        Ok(head
            .as_ref()
            .and_then(|object| object.metadata()?.get(CONTENT_METADATA))
            .is_some_and(|stored| stored == content))
    }

    async fn presign_post(
        &self,
        key: &str,
        size: u64,
        expires_at: SystemTime,
    ) -> Result<PresignedPost, StorageError> {
        let provider = self
            .sdk
            .credentials_provider()
            .ok_or_else(|| StorageError::new("no AWS credentials configured"))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(storage_error)?;
        let region = self
            .sdk
            .region()
            .ok_or_else(|| StorageError::new("no AWS region configured"))?;
        let policy = PostPolicy {
            bucket: &self.bucket,
            key,
            size,
            region: region.as_ref(),
            access_key_id: credentials.access_key_id(),
            secret_access_key: credentials.secret_access_key(),
            session_token: credentials.session_token(),
            now: SystemTime::now(),
            expires_at,
        };
        let url = presign::bucket_url(self.sdk.endpoint_url(), &self.bucket, region.as_ref());
        Ok(policy.sign(url))
    }

    async fn list_incoming(&self, limit: usize) -> Result<Vec<String>, StorageError> {
        self.list_keys(INCOMING_PREFIX, limit).await
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectVersion>, StorageError> {
        Ok(self.head_object(key).await?.map(|head| ObjectVersion {
            size: head.content_length().unwrap_or_default().max(0) as u64,
            etag: head.e_tag().unwrap_or_default().to_owned(),
        }))
    }

    async fn read(
        &self,
        key: &str,
        version: &ObjectVersion,
        range: Range<u64>,
    ) -> Result<ByteChunks, StorageError> {
        if range.is_empty() {
            return Ok(Box::pin(futures_util::stream::empty()));
        }
        let object = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .if_match(&version.etag)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await
            .map_err(storage_error)?;
        let expected = range.end - range.start;
        if object.content_length().unwrap_or_default().max(0) as u64 != expected {
            return Err(StorageError::new(format!(
                "s3://{}/{key}: asked for {expected} bytes, the answer has {:?}",
                self.bucket,
                object.content_length()
            )));
        }
        let chunks = futures_util::stream::unfold(object.body, |mut body| async move {
            let chunk = body.next().await?;
            Some((chunk.map_err(storage_error), body))
        });
        Ok(Box::pin(chunks))
    }

    async fn copy_new(
        &self,
        key: &str,
        version: &ObjectVersion,
        name: &SkinName,
    ) -> Result<Copied, StorageError> {
        let destination = skin_key(name);
        let copied = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(&destination)
            .copy_source(copy_source(&self.bucket, key))
            .copy_source_if_match(&version.etag)
            .if_none_match("*")
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .metadata(CONTENT_METADATA, incoming_content_id(version))
            .content_type("application/octet-stream")
            .send()
            .await;
        match copied {
            Ok(_) => Ok(Copied::Stored),
            // 412 is either condition: the destination taken, or the source replaced.
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => {
                if self.holds(name, &incoming_content_id(version)).await? {
                    Ok(Copied::Stored)
                } else if self.exists(name).await? {
                    Ok(Copied::Exists)
                } else {
                    Err(StorageError::new(format!(
                        "s3://{}/{key} changed while it was checked",
                        self.bucket
                    )))
                }
            }
            Err(e) => Err(storage_error(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        delete_object(&self.client, &self.bucket, key).await
    }
}

/// CopyObject's `x-amz-copy-source`: bucket and key, the key URL-encoded (keys hold spaces).
fn copy_source(bucket: &str, key: &str) -> String {
    let encoded: String = key
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("{bucket}/{encoded}")
}
