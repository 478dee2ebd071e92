//! The API key port: the `api_keys` table (adapters/postgres/keys.rs).
//! Only a key's SHA-256 crosses it; the key itself is shown once, at creation, and never stored.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::key::{
    KeyHash, KeyId, KeyKind, KeyLimits, KeyName, LimitsChange, SigningSecret,
};
use crate::ports::StoreError;

/// A key to store: everything but the key, which only its hash stands for.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub id: KeyId,
    pub name: KeyName,
    pub hash: KeyHash,
    pub kind: KeyKind,
    pub limits: KeyLimits,
    pub signing_secret: SigningSecret,
}

/// A stored key as an administrator sees it: no hash, no signing secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySummary {
    pub id: KeyId,
    pub name: KeyName,
    pub kind: KeyKind,
    pub limits: KeyLimits,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A stored key as a request needs it: who the client is, what it may do, how to sign its
/// callbacks, and whether it still counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub summary: KeySummary,
    pub signing_secret: SigningSecret,
}

impl KeyRecord {
    pub fn is_revoked(&self) -> bool {
        self.summary.revoked_at.is_some()
    }
}

/// What revoking an id found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revocation {
    /// Revoked now, at this time.
    Revoked(DateTime<Utc>),
    /// It had been revoked before, at this time (revoking is idempotent).
    AlreadyRevoked(DateTime<Utc>),
    /// No key has this id.
    NoSuchKey,
}

/// What changing a key's limits found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsUpdate {
    /// Changed: the key as it is now.
    Changed(KeySummary),
    /// Unchanged: the key was revoked, at this time.
    Revoked(DateTime<Utc>),
    /// No key has this id.
    NoSuchKey,
}

/// The most keys one `list` returns.
pub const MAX_LIST: usize = 1_000;
/// The most hashes one `live_hashes` returns: what an instance's list of existing keys holds
/// at most (32 bytes each, about 5 MB with the set around them). Past it the list is an
/// arbitrary subset, and the lookup logs a warning at each load that reaches it.
pub const MAX_LIVE_HASHES: usize = 100_000;

#[async_trait]
pub trait KeyStore: Send + Sync {
    /// Stores `key`; its creation time as stored.
    async fn create(&self, key: &NewKey) -> Result<DateTime<Utc>, StoreError>;
    /// The newest keys first (then by id), at most `limit` (≤ `MAX_LIST`), revoked ones too.
    async fn list(&self, limit: usize) -> Result<Vec<KeySummary>, StoreError>;
    async fn revoke(&self, id: KeyId) -> Result<Revocation, StoreError>;
    /// Makes `change` to the limits of the key `id`, unless it is revoked.
    async fn change_limits(
        &self,
        id: KeyId,
        change: LimitsChange,
    ) -> Result<LimitsUpdate, StoreError>;
    /// The key whose hash is `hash`, revoked or not; `None` when no key has it.
    async fn find_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError>;
    /// The hashes of the keys not revoked, at most `limit` (≤ `MAX_LIVE_HASHES`), in no order.
    async fn live_hashes(&self, limit: usize) -> Result<Vec<KeyHash>, StoreError>;
}
