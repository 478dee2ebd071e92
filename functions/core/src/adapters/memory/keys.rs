//! The API-key store.

use super::*;
use crate::domain::key::{KeyHash, KeyId, LimitsChange};
use crate::ports::keys::{
    KeyRecord, KeyStore, KeySummary, LimitsUpdate, NewKey, Revocation, MAX_LIST, MAX_LIVE_HASHES,
};

/// The `api_keys` table: keys by hash, as `PgKeyStore` keeps them. Counts its lookups (what
/// the lookup cache saves) and can be told to fail.
#[derive(Default)]
pub struct MemoryKeys {
    rows: Mutex<Vec<(KeyHash, KeyRecord)>>,
    lookups: std::sync::atomic::AtomicUsize,
    live_lists: std::sync::atomic::AtomicUsize,
    down: Outage,
}

impl MemoryKeys {
    /// How many `find_by_hash` calls reached the table.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }

    /// How many `live_hashes` calls reached the table.
    pub fn live_lists(&self) -> usize {
        self.live_lists.load(Ordering::SeqCst)
    }

    /// Every call fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }

    /// Applies `change` to key `id` unless it is revoked: `None` without such a key, else what
    /// the change made, or when the key was revoked.
    fn change_live<T>(
        &self,
        id: KeyId,
        change: impl FnOnce(&mut KeySummary) -> T,
    ) -> Result<Option<Result<T, DateTime<Utc>>>, StoreError> {
        self.down.check("the key table is down")?;
        let mut rows = lock(&self.rows);
        let Some((_, row)) = rows.iter_mut().find(|(_, row)| row.summary.id == id) else {
            return Ok(None);
        };
        Ok(Some(match row.summary.revoked_at {
            Some(at) => Err(at),
            None => Ok(change(&mut row.summary)),
        }))
    }
}

#[async_trait]
impl KeyStore for MemoryKeys {
    async fn create(&self, key: &NewKey) -> Result<DateTime<Utc>, StoreError> {
        self.down.check("the key table is down")?;
        let mut rows = lock(&self.rows);
        if rows
            .iter()
            .any(|(hash, row)| *hash == key.hash || row.summary.id == key.id)
        {
            return Err(StoreError::new("23505: duplicate key"));
        }
        let created_at = Utc::now();
        rows.push((
            key.hash,
            KeyRecord {
                summary: KeySummary {
                    id: key.id,
                    name: key.name.clone(),
                    kind: key.kind,
                    limits: key.limits,
                    created_at,
                    revoked_at: None,
                },
                signing_secret: key.signing_secret.clone(),
            },
        ));
        Ok(created_at)
    }

    async fn list(&self, limit: usize) -> Result<Vec<KeySummary>, StoreError> {
        self.down.check("the key table is down")?;
        let mut keys: Vec<KeySummary> = lock(&self.rows)
            .iter()
            .map(|(_, row)| row.summary.clone())
            .collect();
        keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        keys.truncate(limit.min(MAX_LIST));
        Ok(keys)
    }

    async fn revoke(&self, id: KeyId) -> Result<Revocation, StoreError> {
        let revoked = self.change_live(id, |summary| {
            let now = Utc::now();
            summary.revoked_at = Some(now);
            now
        })?;
        Ok(match revoked {
            None => Revocation::NoSuchKey,
            Some(Err(at)) => Revocation::AlreadyRevoked(at),
            Some(Ok(now)) => Revocation::Revoked(now),
        })
    }

    async fn change_limits(
        &self,
        id: KeyId,
        change: LimitsChange,
    ) -> Result<LimitsUpdate, StoreError> {
        let changed = self.change_live(id, |summary| {
            summary.limits = change.apply(summary.limits);
            summary.clone()
        })?;
        Ok(match changed {
            None => LimitsUpdate::NoSuchKey,
            Some(Err(at)) => LimitsUpdate::Revoked(at),
            Some(Ok(summary)) => LimitsUpdate::Changed(summary),
        })
    }

    async fn find_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.down.check("the key table is down")?;
        Ok(lock(&self.rows)
            .iter()
            .find(|(stored, _)| stored == hash)
            .map(|(_, row)| row.clone()))
    }

    async fn live_hashes(&self, limit: usize) -> Result<Vec<KeyHash>, StoreError> {
        self.live_lists.fetch_add(1, Ordering::SeqCst);
        self.down.check("the key table is down")?;
        Ok(lock(&self.rows)
            .iter()
            .filter(|(_, row)| !row.is_revoked())
            .map(|(hash, _)| *hash)
            .take(limit.min(MAX_LIVE_HASHES))
            .collect())
    }
}
