//! Where skins live: the objects in S3 (`skins/{name}.osk`, presigned uploads under
//! `incoming/`) and the names in Postgres, claimed before an object is written so that two
//! uploads of one new name cannot both win.

use std::ops::Range;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_s3::config::ProvideCredentials;
use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;
use deadpool_postgres::Pool;
use futures_util::Stream;
use sha2::{Digest, Sha256};
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use super::presign::{self, PostPolicy, PresignedPost};
use crate::db::{self, DbError};
use crate::deadline;
use crate::domain::SkinName;
use crate::idempotency::{self, StoredResponse};
use crate::replays::{storage_error, StorageError};

/// Uploaded skins: `skins/{name}.osk`.
const SKIN_PREFIX: &str = "skins/";
const SKIN_SUFFIX: &str = ".osk";
/// Presigned uploads wait here for `ingest`; a bucket lifecycle rule should expire leftovers.
pub const INCOMING_PREFIX: &str = "incoming/";

pub fn skin_key(name: &SkinName) -> String {
    format!("{SKIN_PREFIX}{}{SKIN_SUFFIX}", name.as_str())
}

/// The skin name of a `skins/{name}.osk` key; `None` for anything else under `skins/`.
fn name_of_key(key: &str) -> Option<SkinName> {
    let stem = key.strip_prefix(SKIN_PREFIX)?.strip_suffix(SKIN_SUFFIX)?;
    SkinName::parse(stem).ok()
}

/// A fresh `incoming/{upload id}/{name}.osk`: unique per presigned upload, with the name in
/// the key so the ingest needs nothing but the key.
pub fn incoming_key(name: &SkinName) -> String {
    format!(
        "{INCOMING_PREFIX}{}/{}{SKIN_SUFFIX}",
        Uuid::new_v4().simple(),
        name.as_str()
    )
}

/// The skin name an `incoming/{upload id}/{name}.osk` key asks for.
pub fn name_of_incoming_key(key: &str) -> Option<SkinName> {
    let (upload_id, file) = key.strip_prefix(INCOMING_PREFIX)?.split_once('/')?;
    Uuid::try_parse(upload_id).ok()?;
    SkinName::parse(file.strip_suffix(SKIN_SUFFIX)?).ok()
}

/// One version of an incoming object: what its check read is what gets published (a presigned
/// POST may be repeated to the same key while its policy lasts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    pub size: u64,
    pub etag: String,
}

/// An object's bytes as they arrive.
pub type ByteChunks = Pin<Box<dyn Stream<Item = Result<Bytes, StorageError>> + Send>>;

/// What `copy_new` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    Stored,
    /// An object was already at the destination: left as it was.
    Exists,
}

#[async_trait]
pub trait SkinStore: Send + Sync {
    /// Names of the uploaded skins, at most `limit`, in key order.
    async fn list(&self, limit: usize) -> Result<Vec<SkinName>, StorageError>;
    async fn exists(&self, name: &SkinName) -> Result<bool, StorageError>;
    /// Writes `skins/{name}.osk` unless an object is already there (`Ok(false)` then): an
    /// object from before the name registry, or from another fleet, is never overwritten. The
    /// object carries its content's SHA-256, so the same content found there (an earlier
    /// attempt whose answer was lost) counts as written (`Ok(true)`).
    async fn put_new(&self, name: &SkinName, body: Bytes) -> Result<bool, StorageError>;
    /// Whether `skins/{name}.osk` holds the content `content` names (`content_id`,
    /// `incoming_content_id`): how a write whose answer never came is settled.
    async fn holds(&self, name: &SkinName, content: &str) -> Result<bool, StorageError>;
    /// A presigned POST that lets a client upload exactly `size` bytes to `key` until
    /// `expires_at`.
    async fn presign_post(
        &self,
        key: &str,
        size: u64,
        expires_at: SystemTime,
    ) -> Result<PresignedPost, StorageError>;
    /// Keys under `incoming/`, at most `limit`.
    async fn list_incoming(&self, limit: usize) -> Result<Vec<String>, StorageError>;
    /// The object's current version; `None` when it is gone (ingested by another run, expired).
    async fn head(&self, key: &str) -> Result<Option<ObjectVersion>, StorageError>;
    /// The bytes `range` of `key`, streamed; fails if the object is no longer `version`.
    async fn read(
        &self,
        key: &str,
        version: &ObjectVersion,
        range: Range<u64>,
    ) -> Result<ByteChunks, StorageError>;
    /// Copies `key` (still at `version`, else an error) to `skins/{name}.osk` within S3, unless
    /// an object is there already (as `put_new`; the same upload there counts as stored).
    async fn copy_new(
        &self,
        key: &str,
        version: &ObjectVersion,
        name: &SkinName,
    ) -> Result<Copied, StorageError>;
    async fn delete(&self, key: &str) -> Result<(), StorageError>;
}

/// The user metadata (`x-amz-meta-content`) naming a stored skin's content.
const CONTENT_METADATA: &str = "content";

/// A directly uploaded skin's content as the object's metadata names it: its SHA-256.
pub fn content_id(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// A presigned upload's content as the copy's metadata names it: the incoming version's ETag
/// (one upload id names one key, so its ETag names what the client uploaded).
pub fn incoming_content_id(version: &ObjectVersion) -> String {
    format!("etag:{}", version.etag)
}

pub struct S3SkinStore {
    client: aws_sdk_s3::Client,
    sdk: SdkConfig,
    bucket: String,
}

impl S3SkinStore {
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
    async fn list(&self, limit: usize) -> Result<Vec<SkinName>, StorageError> {
        let keys = self.list_keys(SKIN_PREFIX, limit).await?;
        Ok(keys.iter().filter_map(|key| name_of_key(key)).collect())
    }

    async fn exists(&self, name: &SkinName) -> Result<bool, StorageError> {
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(skin_key(name))
            .send();
        let head = deadline::within(head).await?;
        match head {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(false),
            Err(e) => Err(storage_error(e)),
        }
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
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(skin_key(name))
            .send();
        match deadline::within(head).await? {
            Ok(object) => Ok(object
                .metadata()
                .and_then(|metadata| metadata.get(CONTENT_METADATA))
                .is_some_and(|stored| stored == content)),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(false),
            Err(e) => Err(storage_error(e)),
        }
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
        let head = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await;
        match head {
            Ok(head) => Ok(Some(ObjectVersion {
                size: head.content_length().unwrap_or_default().max(0) as u64,
                etag: head.e_tag().unwrap_or_default().to_owned(),
            })),
            Err(e) if e.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(e) => Err(storage_error(e)),
        }
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

/// A name held for one upload until it is confirmed (stored) or released (failed).
#[derive(Debug, Clone)]
pub struct Claim {
    pub name: SkinName,
    token: Uuid,
}

/// What claiming a name found.
#[derive(Debug, Clone)]
pub enum NameClaim {
    Claimed(Claim),
    /// A skin of that name is stored (confirmed).
    Stored,
    /// Another upload holds the name, unconfirmed: in flight, or one whose outcome was lost.
    Held,
}

#[async_trait]
pub trait SkinRegistry: Send + Sync {
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, DbError>;
    /// The skin is stored: the name is taken for good. With `completes`, the upload's
    /// idempotency claim is completed in the same statement, so a key answers with the skin
    /// exactly when its name is confirmed.
    async fn confirm(
        &self,
        claim: &Claim,
        completes: Option<(&idempotency::Claim, &StoredResponse)>,
    ) -> Result<(), DbError>;
    /// The upload failed: the name is free again.
    async fn release(&self, claim: &Claim) -> Result<(), DbError>;
    /// Whether `name` is stored or held, without claiming it.
    async fn is_taken(&self, name: &SkinName) -> Result<bool, DbError>;
}

/// The `skins` table (migrations/V3): the name is the primary key, so of two concurrent
/// claims exactly one inserts. A claim lives for one S3 write; one older than `stale_after`
/// belongs to an upload whose function died between claim and confirm, and may be taken over
/// so the name is not lost for good.
pub struct PgSkinRegistry {
    pool: Pool,
    stale_after_secs: f64,
}

/// Longer than any function runs (Lambda's maximum is 15 minutes), so a live claim is never
/// taken over.
pub const CLAIM_STALE_AFTER: Duration = Duration::from_secs(15 * 60);

impl PgSkinRegistry {
    pub fn new(pool: Pool, stale_after: Duration) -> Self {
        Self {
            pool,
            stale_after_secs: stale_after.as_secs_f64(),
        }
    }

    /// Runs `sql` with `$1` the claimed name and `$2` the claim's token; the rows it touched.
    async fn execute_on_claim(&self, sql: &str, claim: &Claim) -> Result<u64, DbError> {
        let name = claim.name.as_str();
        let conn = db::checkout(&self.pool).await?;
        let touched = conn
            .execute_typed(sql, &[(&name, Type::TEXT), (&claim.token, Type::UUID)])
            .await?;
        Ok(touched)
    }
}

/// Whether the name was claimed, and else whether it is stored (the outer query's snapshot is
/// the statement's: it sees the row as it was before the insert).
const CLAIM_SQL: &str = "\
WITH claimed AS (
    INSERT INTO skins (name, claim) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET claim = EXCLUDED.claim, claimed_at = now()
     WHERE skins.stored_at IS NULL
       AND skins.claimed_at < now() - make_interval(secs => $3)
    RETURNING claim
)
SELECT EXISTS (SELECT FROM claimed),
       EXISTS (SELECT FROM skins WHERE name = $1 AND stored_at IS NOT NULL)";

/// `$3`–`$7`: the idempotency claim to complete with the response, or NULLs. With a claim,
/// the name is confirmed only while the claim is still the upload's (locked first), so an
/// upload that gave up and released its key can no longer be confirmed by a statement of its
/// that arrives late: the name stays unconfirmed, and a retry finds its content stored.
const CONFIRM_SQL: &str = "\
WITH held AS (
    SELECT FROM idempotency_keys
     WHERE client_ip = $3 AND endpoint = $4 AND key = $5 AND token = $6
       AND status = 'in_progress'
       FOR UPDATE
), confirmed AS (
    UPDATE skins SET stored_at = now()
     WHERE name = $1 AND claim = $2 AND stored_at IS NULL
       AND ($6::uuid IS NULL OR EXISTS (SELECT FROM held))
    RETURNING name
), completed AS (
    UPDATE idempotency_keys SET status = 'completed', response = $7
     WHERE client_ip = $3 AND endpoint = $4 AND key = $5 AND token = $6
       AND status = 'in_progress' AND EXISTS (SELECT FROM confirmed)
)
SELECT count(*) FROM confirmed";

const RELEASE_SQL: &str = "DELETE FROM skins WHERE name = $1 AND claim = $2 AND stored_at IS NULL";

const TAKEN_SQL: &str = "\
SELECT EXISTS (SELECT 1 FROM skins
                WHERE name = $1
                  AND (stored_at IS NOT NULL OR claimed_at >= now() - make_interval(secs => $2)))";

#[async_trait]
impl SkinRegistry for PgSkinRegistry {
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, DbError> {
        let token = Uuid::new_v4();
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&name.as_str(), Type::TEXT),
            (&token, Type::UUID),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_typed(CLAIM_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| DbError::unknown("the name claim returned no row"))?;
        Ok(match (row.get(0), row.get(1)) {
            (true, _) => NameClaim::Claimed(Claim {
                name: name.clone(),
                token,
            }),
            (false, true) => NameClaim::Stored,
            (false, false) => NameClaim::Held,
        })
    }

    async fn confirm(
        &self,
        claim: &Claim,
        completes: Option<(&idempotency::Claim, &StoredResponse)>,
    ) -> Result<(), DbError> {
        let (key, response) = completes.unzip();
        let response = response
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| DbError::new(format!("response: {e}")))?;
        let params: [(&(dyn ToSql + Sync), Type); 7] = [
            (&claim.name.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
            (&key.map(|k| k.client.as_str()), Type::TEXT),
            (&key.map(|k| k.endpoint), Type::TEXT),
            (&key.map(|k| k.key.as_str()), Type::TEXT),
            (&key.map(|k| k.token), Type::UUID),
            (&response, Type::JSONB),
        ];
        let conn = db::checkout(&self.pool).await?;
        let confirmed: i64 = conn
            .query_typed(CONFIRM_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| DbError::unknown("the confirmation returned no row"))?
            .get(0);
        if confirmed == 1 {
            Ok(())
        } else {
            Err(DbError::new(format!(
                "the claim on skin `{}` was lost",
                claim.name.as_str()
            )))
        }
    }

    async fn release(&self, claim: &Claim) -> Result<(), DbError> {
        self.execute_on_claim(RELEASE_SQL, claim).await.map(drop)
    }

    async fn is_taken(&self, name: &SkinName) -> Result<bool, DbError> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [
            (&name.as_str(), Type::TEXT),
            (&self.stale_after_secs, Type::FLOAT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_typed(TAKEN_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| DbError::new("the name lookup returned no row"))?;
        Ok(row.get(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_names() {
        let name = SkinName::parse("My Skin_2").unwrap();
        assert_eq!(skin_key(&name), "skins/My Skin_2.osk");
        assert_eq!(name_of_key(&skin_key(&name)), Some(name.clone()));
        let incoming = incoming_key(&name);
        assert!(incoming.starts_with(INCOMING_PREFIX));
        assert_eq!(name_of_incoming_key(&incoming), Some(name));
        for foreign in [
            "skins/a.b.osk",
            "skins/nested/a.osk",
            "skins/a.zip",
            "replays/x.osr",
        ] {
            assert_eq!(name_of_key(foreign), None, "{foreign}");
        }
        for foreign in [
            "incoming/not-a-uuid/a.osk",
            "incoming/a.osk",
            "incoming/0123456789abcdef0123456789abcdef/../a.osk",
            "skins/a.osk",
        ] {
            assert_eq!(name_of_incoming_key(foreign), None, "{foreign}");
        }
    }
}
