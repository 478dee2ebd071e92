//! The skin ports: skin objects (`skins/{name}.osk`, `incoming/…`; store/s3.rs) and the name
//! registry (store/postgres/skins.rs).

use std::collections::BTreeMap;
use std::ops::Range;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use crate::domain::render::SkinName;
use crate::ports::idempotency;
use crate::ports::idempotency::StoredResponse;
use crate::ports::replays::StorageError;
use crate::ports::StoreError;
use async_trait::async_trait;
use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Uploaded skins: `skins/{name}.osk`.
pub const SKIN_PREFIX: &str = "skins/";
const SKIN_SUFFIX: &str = ".osk";
/// Presigned uploads wait here for `ingest`; a bucket lifecycle rule should expire leftovers.
pub const INCOMING_PREFIX: &str = "incoming/";

pub fn skin_key(name: &SkinName) -> String {
    format!("{SKIN_PREFIX}{}{SKIN_SUFFIX}", name.as_str())
}

/// The skin name of a `skins/{name}.osk` key; `None` for anything else under `skins/`.
pub fn name_of_key(key: &str) -> Option<SkinName> {
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

/// A directly uploaded skin's content as the object's metadata names it: its SHA-256.
pub fn content_id(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// A presigned upload's content as the copy's metadata names it: the incoming version's ETag
/// (one upload id names one key, so its ETag names what the client uploaded).
pub fn incoming_content_id(version: &ObjectVersion) -> String {
    format!("etag:{}", version.etag)
}

/// A name held for one upload until it is confirmed (stored) or released (failed).
#[derive(Debug, Clone)]
pub struct Claim {
    pub name: SkinName,
    pub token: Uuid,
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
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, StoreError>;
    /// The skin is stored: the name is taken for good. With `completes`, the upload's
    /// idempotency claim is completed in the same statement, so a key answers with the skin
    /// exactly when its name is confirmed.
    async fn confirm(
        &self,
        claim: &Claim,
        completes: Option<(&idempotency::Claim, &StoredResponse)>,
    ) -> Result<(), StoreError>;
    /// The upload failed: the name is free again.
    async fn release(&self, claim: &Claim) -> Result<(), StoreError>;
    /// Whether `name` is stored or held, without claiming it.
    async fn is_taken(&self, name: &SkinName) -> Result<bool, StoreError>;
}

/// Longer than any function runs (Lambda's maximum is 15 minutes), so a live claim is never
/// taken over.
pub const CLAIM_STALE_AFTER: Duration = Duration::from_secs(15 * 60);

/// What a client needs to upload: POST a multipart form to `url` with every field of `fields`
/// and the file last (S3 ignores fields after the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PresignedPost {
    pub url: String,
    pub fields: BTreeMap<&'static str, String>,
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
