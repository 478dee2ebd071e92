//! Which key a request carries: `Authorization: Bearer <key>` checked for form (no store
//! access for a malformed one), then looked up by its SHA-256, through a small per-instance
//! cache so that a busy client's requests do not each cost a database read.
//!
//! The cache keeps an answer for `API_KEY_CACHE_TTL` (30 s by default, at most 60 s) counted
//! from before the read that produced it, so a revocation is honoured by every instance within
//! that long of its commit. It is bounded: at most `MAX_KNOWN` keys found and `MAX_UNKNOWN` hashes
//! found to be no key; when a side is full of live entries, new answers are served but not
//! kept. The unknown side makes a client that repeats a wrong key cost one read per TTL; a
//! flood of *different* random keys would cost one indexed point read each (there is nothing
//! to remember about a key never seen), and cannot grow memory past the bound.
//!
//! Such a flood is held back by the caller's `before_read` gate (usecases/keys/caller.rs: the
//! per-address `RATE_LIMIT_KEY_LOOKUP` and per-network `RATE_LIMIT_KEY_LOOKUP_NETWORK`),
//! spent before the read, so a burst of made-up keys costs at most about the limit in reads
//! however they race. Only a refused gate consults the instance's list of the hashes of every
//! key not revoked (loaded then if it is older than `LIVE_KEYS_REFRESH`, one load at a time):
//! a key on it is read anyway, so a real key is never refused for its address's junk, unless
//! it is younger than the list. Normal traffic, whose gate is not spent, never loads the list:
//! a miss costs one point read, not a listing of the table. Failed lookups are never kept:
//! the next request asks again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::key::{ApiKey, KeyHash, MalformedKey};
use crate::ports::keys::{KeyRecord, KeyStore, MAX_LIVE_HASHES};
use crate::ports::StoreError;
use crate::support::problem::Rejection;
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading, RETRY_AFTER_FAILURE};

/// Keys found, kept per instance: far more than one instance serves within a cache TTL (`API_KEY_CACHE_TTL`).
pub const MAX_KNOWN: usize = 10_000;
/// Hashes of no key, kept per instance.
pub const MAX_UNKNOWN: usize = 1_000;
/// How old the instance's list of live keys may be when a refused gate consults it: one
/// listing of the table per this long per instance at most, whatever the flood.
pub const LIVE_KEYS_REFRESH: Duration = Duration::from_secs(10);

/// Why a request's key is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyRefusal {
    /// Not `Bearer osr_live_…`/`osr_test_…` with a well-formed key: refused before any lookup.
    #[error(transparent)]
    Malformed(#[from] MalformedKey),
    #[error("unknown API key")]
    Unknown,
    #[error("the API key has been revoked")]
    Revoked,
    /// The lookup failed: neither yes nor no.
    #[error("looking the API key up failed: {0}")]
    Unavailable(StoreError),
    /// The gate before a database read refused it (the address's or network's lookup limit)
    /// and the key was not on the list of live keys.
    #[error("the key lookup was held back: {}", .0.code())]
    Held(Rejection),
}

/// The key lookup of one instance: the store, behind the cache.
pub struct KeyLookup {
    store: Arc<dyn KeyStore>,
    ttl: Duration,
    known: Mutex<HashMap<KeyHash, (KeyRecord, Instant)>>,
    unknown: Mutex<HashMap<KeyHash, Instant>>,
    /// The hashes of the keys not revoked, as of the last successful load: the lookups that
    /// find the list stale wait for one reload, not one each.
    live: Refreshed<Arc<HashSet<KeyHash>>>,
}

impl KeyLookup {
    /// Answers are kept `ttl` (`API_KEY_CACHE_TTL`).
    pub fn new(store: Arc<dyn KeyStore>, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            known: Mutex::default(),
            unknown: Mutex::default(),
            live: Refreshed::new(Refresh {
                ttl: LIVE_KEYS_REFRESH,
                retry_after_failure: RETRY_AFTER_FAILURE,
                while_loading: WhileLoading::Wait,
            }),
        }
    }

    /// The key record of an `Authorization` header's value, if it names a key that counts.
    /// `before_read` runs only when the cache cannot answer, before the read; only when it
    /// refuses is the key looked for on the list of live keys, and read anyway if there.
    pub async fn authenticate(
        &self,
        authorization: &str,
        before_read: impl Future<Output = Result<(), Rejection>>,
    ) -> Result<KeyRecord, KeyRefusal> {
        let key = ApiKey::from_bearer(authorization)?;
        let found = match self.cached(&key) {
            Some(found) => found,
            None => {
                if let Err(refused) = before_read.await {
                    if !self.is_live(&key.hash()).await {
                        return Err(KeyRefusal::Held(refused));
                    }
                }
                self.find(&key).await.map_err(KeyRefusal::Unavailable)?
            }
        };
        match found {
            None => Err(KeyRefusal::Unknown),
            Some(record) if record.is_revoked() => Err(KeyRefusal::Revoked),
            Some(record) => Ok(record),
        }
    }

    /// The cache's live answer for `key`, if it has one: its record, or `None` for no key.
    pub fn cached(&self, key: &ApiKey) -> Option<Option<KeyRecord>> {
        let hash = key.hash();
        let now = Instant::now();
        if let Some((record, until)) = lock(&self.known).get(&hash) {
            if now < *until {
                return Some(Some(record.clone()));
            }
        }
        match lock(&self.unknown).get(&hash) {
            Some(until) if now < *until => Some(None),
            _ => None,
        }
    }

    /// The record of `key`, revoked or not; `None` when no key has its hash. At most the TTL
    /// old.
    pub async fn find(&self, key: &ApiKey) -> Result<Option<KeyRecord>, StoreError> {
        if let Some(found) = self.cached(key) {
            return Ok(found);
        }
        let hash = key.hash();
        let asked_at = Instant::now();
        let found = self.store.find_by_hash(&hash).await?;
        // Counted from before the read: the answer reflects the table at or after then.
        let until = asked_at + self.ttl;
        match &found {
            Some(record) => {
                keep(&self.known, hash, (record.clone(), until), MAX_KNOWN, |e| {
                    e.1
                });
                lock(&self.unknown).remove(&hash);
            }
            None => keep(&self.unknown, hash, until, MAX_UNKNOWN, |until| *until),
        }
        Ok(found)
    }

    /// Whether `hash` was a key not revoked at the list's last load, reloading a stale list
    /// first. A failed load keeps the old list for `RETRY_AFTER_FAILURE`: the keys it misses
    /// are refused with their gate meanwhile.
    async fn is_live(&self, hash: &KeyHash) -> bool {
        let live = self.live.get(|| async {
            let hashes =
                self.store.live_hashes(MAX_LIVE_HASHES).await.inspect_err(
                    |error| tracing::warn!(%error, "listing the live API keys failed"),
                )?;
            if hashes.len() >= MAX_LIVE_HASHES {
                // The keys left out are refused with their gate like unknown ones: whoever
                // operates this many keys should raise the bound.
                tracing::warn!(
                    limit = MAX_LIVE_HASHES,
                    "the list of live API keys reached its limit; the keys beyond it are \
                     refused when their address's or network's lookups are spent"
                );
            }
            Ok::<_, StoreError>(Arc::new(hashes.into_iter().collect()))
        });
        live.await.is_some_and(|hashes| hashes.contains(hash))
    }
}

/// Inserts `entry` unless the map is full of entries still live (expired ones go first).
fn keep<V>(
    map: &Mutex<HashMap<KeyHash, V>>,
    hash: KeyHash,
    entry: V,
    capacity: usize,
    until: impl Fn(&V) -> Instant,
) {
    let mut map = lock(map);
    if map.len() >= capacity && !map.contains_key(&hash) {
        let now = Instant::now();
        map.retain(|_, entry| now < until(entry));
        if map.len() >= capacity {
            return;
        }
    }
    map.insert(hash, entry);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a map operation that cannot leave the map half-done.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
