//! The skin ports: skin objects (`skins/{name}.osk`, `incoming/…`; adapters/s3.rs) and the name
//! registry (adapters/postgres/skins.rs).

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
    registered_skin_key(name.as_str())
}

/// The object of a skin under its name as registered (a legacy name, stored untrimmed, may have
/// surrounding spaces, and its object has them too).
pub fn registered_skin_key(registered: &str) -> String {
    format!("{SKIN_PREFIX}{registered}{SKIN_SUFFIX}")
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

/// The skin name an `incoming/{upload id}/{name}.osk` key asks for (as `incoming_key` wrote
/// it: a stem that is not a name as it stands is no upload of ours).
pub fn name_of_incoming_key(key: &str) -> Option<SkinName> {
    let (upload_id, file) = key.strip_prefix(INCOMING_PREFIX)?.split_once('/')?;
    Uuid::try_parse(upload_id).ok()?;
    let stem = file.strip_suffix(SKIN_SUFFIX)?;
    SkinName::parse(stem)
        .ok()
        .filter(|name| name.as_str() == stem)
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

/// Where a name stands in the registry. Names compare case-insensitively and trimmed (by their
/// folded form, `lower(name)`: names are ASCII, so that is Unicode's lowercase too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameState {
    Free,
    /// Claimed by an upload not yet confirmed, less than `CLAIM_STALE_AFTER` ago.
    Held,
    /// A skin of that name, in any case, is stored.
    Stored,
    /// The operator removed the skin (`skins remove`): not listed, not renderable. Its object
    /// is kept for the jobs that name it, so the name is not free again: an upload never
    /// writes over an object.
    Removed,
    /// The operator reserved the name (`skins reserve`) and it is not removed; `stored`: a skin
    /// of that name was stored (before the reservation), and is still listed and renderable.
    Reserved {
        stored: bool,
    },
}

impl NameState {
    /// Whether a render may name it.
    pub fn renderable(self) -> bool {
        matches!(self, Self::Stored | Self::Reserved { stored: true })
    }

    /// Whether the operator keeps the name from every upload (409 `skin_name_reserved`).
    pub fn kept_by_operator(self) -> bool {
        matches!(self, Self::Removed | Self::Reserved { .. })
    }
}

/// What `SkinRegistry::remove` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// These stored names (as registered; `shadowed` legacy names folding alike too) are removed.
    Removed(Vec<String>),
    /// Removed before: nothing changed.
    AlreadyRemoved,
    /// No skin of that name is stored (an upload still running is not a skin yet).
    NotStored,
}

/// Where a name stands for the operator's `skins free`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freeing {
    /// Its removed skins, as registered (each `skins/{name}.osk`): removed long enough ago, and
    /// named by no job that is not ended.
    Ready(Vec<String>),
    /// No skin of that name is removed: stored and listed, only reserved, never stored, or
    /// freed already.
    NotRemoved,
    /// This many jobs not ended (queued, downloading, rendering) name it: their workers may
    /// still read its object.
    InUse(i64),
    /// Removed less than the settling time ago; this much of it is left.
    RemovedRecently(Duration),
}

impl Freeing {
    /// From what a store found: the removed skins (as registered), what is left of their
    /// settling time (`None`: nothing), and how many jobs not ended name them. Being named by
    /// a job says more than the time: it is told first.
    pub fn of(removed: Vec<String>, settling: Option<Duration>, jobs: i64) -> Self {
        match (removed.is_empty(), jobs, settling) {
            (true, _, _) => Self::NotRemoved,
            (false, 1.., _) => Self::InUse(jobs),
            (false, _, Some(left)) => Self::RemovedRecently(left),
            (false, _, None) => Self::Ready(removed),
        }
    }
}

/// One run's claim on a presigned upload's ingest (`incoming/{upload id}/…`), made before it
/// is sent, so a claim whose answer was lost can still be released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestTicket {
    pub key: String,
    pub token: Uuid,
}

impl IngestTicket {
    pub fn new(key: &str) -> Self {
        Self {
            key: key.to_owned(),
            token: Uuid::new_v4(),
        }
    }
}

/// What claiming an incoming object's ingest found. One upload key (one presigned policy) is
/// ingested once: the first version claimed binds the key to its ETag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestClaim {
    /// This run ingests it.
    Ours,
    /// Another run is ingesting this very version (claimed less than `CLAIM_STALE_AFTER` ago).
    Running,
    /// This key was ingested (published or refused) already.
    Done,
    /// The key was claimed at another ETag: the client posted again to the same policy.
    Replaced,
}

/// What claiming a name found.
#[derive(Debug, Clone)]
pub enum NameClaim {
    Claimed(Claim),
    /// A skin of that name is stored (confirmed).
    Stored,
    /// Another upload holds the name, unconfirmed: in flight, or one whose outcome was lost.
    Held,
    /// The operator keeps the name from uploads: reserved, or its skin removed
    /// (`NameState::kept_by_operator`).
    Kept,
}

#[async_trait]
pub trait SkinRegistry: Send + Sync {
    /// Claims `name` unless a name folding alike is stored, held, removed or reserved (a stale
    /// claim is taken over, and renamed to this spelling). A reservation made while an upload
    /// holds its claim does not stop that upload: its skin is then stored and reserved.
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
    /// Where `name` (folded) stands, without claiming it.
    async fn state(&self, name: &SkinName) -> Result<NameState, StoreError>;
    /// The stored skins' names after `after` (exclusive) in byte order, at most `limit`: one
    /// page of the listing, by the registry's index. Names as registered: a legacy name,
    /// stored untrimmed, may have surrounding spaces.
    async fn list(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError>;
    /// Claims the ingest of the ticket's key at `etag` (see `IngestClaim`); a claim whose run released it
    /// or died (older than `CLAIM_STALE_AFTER`) is taken over, at the same ETag only.
    async fn claim_ingest(
        &self,
        ticket: &IngestTicket,
        etag: &str,
    ) -> Result<IngestClaim, StoreError>;
    /// The ingest decided (published or refused): the key is done for good.
    async fn finish_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError>;
    /// The ingest failed (Postgres, S3): the next delivery of that version may run it at once.
    async fn release_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError>;
    /// Forgets ingests claimed longer ago than `older_than` (past any retry of their S3 event;
    /// their objects are gone), at most `limit` of them: how many.
    async fn prune_ingests(&self, older_than: Duration, limit: u64) -> Result<u64, StoreError>;
    /// The operator's `skins reserve`: no upload claims `name` (folded) from now on. Whether it
    /// was not reserved before.
    async fn reserve(&self, name: &SkinName) -> Result<bool, StoreError>;
    /// The operator's `skins unreserve`: whether it was reserved. A removed name stays kept.
    async fn unreserve(&self, name: &SkinName) -> Result<bool, StoreError>;
    /// The operator's `skins remove`: the stored skins of `name` (folded) are no longer listed,
    /// renderable or claimable. Their objects are not touched.
    async fn remove(&self, name: &SkinName) -> Result<Removal, StoreError>;
    /// The operator's `skins free`, its first step: whether the removed skins of `name`
    /// (folded) may be forgotten (`Freeing`), `settle` after their removal at the earliest.
    async fn freeable(&self, name: &SkinName, settle: Duration) -> Result<Freeing, StoreError>;
    /// `skins free`, its last step, once the removed skins' objects are deleted: forgets the
    /// removed skins of `name` (folded), so an upload may claim it again (unless it is
    /// reserved). How many were forgotten.
    async fn forget_removed(&self, name: &SkinName) -> Result<u64, StoreError>;
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
        let incoming = incoming_key(&name);
        assert!(incoming.starts_with(INCOMING_PREFIX));
        assert_eq!(name_of_incoming_key(&incoming), Some(name));
        for foreign in [
            "incoming/not-a-uuid/a.osk",
            "incoming/a.osk",
            "incoming/0123456789abcdef0123456789abcdef/../a.osk",
            "incoming/0123456789abcdef0123456789abcdef/ a.osk",
            "skins/a.osk",
        ] {
            assert_eq!(name_of_incoming_key(foreign), None, "{foreign}");
        }
    }
}
