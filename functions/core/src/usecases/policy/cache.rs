//! The policy cache of one instance: the pause and the bans, read at most once per
//! `POLICY_CACHE_TTL`, single-flight, keeping the last good policy when a read fails, and
//! none before the first read succeeds (mod.rs).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::domain::policy::Policy;
use crate::ports::policy::{PolicyStore, MAX_BANS};

/// How soon a failed read is tried again: a blip should not leave an old policy in place for a
/// whole TTL, nor an outage cost a read per request.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The policy of one instance: the store, behind the cache.
pub struct PolicyCache {
    store: Arc<dyn PolicyStore>,
    ttl: Duration,
    current: Mutex<Cached>,
    /// Held by the one request refreshing the policy.
    refresh: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Cached {
    /// The last policy read; `None` until a read succeeds.
    policy: Option<Arc<Policy>>,
    /// When to read again; `None` before the first read.
    stale_at: Option<Instant>,
}

impl PolicyCache {
    pub fn new(store: Arc<dyn PolicyStore>, ttl: Duration) -> Self {
        Self {
            store,
            ttl,
            current: Mutex::default(),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// The policy, at most `ttl` old (plus one refresh) unless reads are failing; `None` while
    /// no read has succeeded yet.
    pub async fn current(&self) -> Option<Arc<Policy>> {
        let (policy, fresh) = self.snapshot();
        if fresh {
            return policy;
        }
        let _refreshing = match self.refresh.try_lock() {
            Ok(guard) => guard,
            // Someone is refreshing: the stale policy will do meanwhile; none yet, wait for it.
            Err(_) if policy.is_some() => return policy,
            Err(_) => self.refresh.lock().await,
        };
        // A refresh may have finished (or failed) while this request waited for the lock.
        let (policy, fresh) = self.snapshot();
        if fresh {
            return policy;
        }
        let asked_at = Instant::now();
        let mut cached = match self.store.read(MAX_BANS).await {
            Ok(read) => {
                if read.bans.len() >= MAX_BANS {
                    tracing::warn!(
                        limit = MAX_BANS,
                        "the bans in force reached the policy's limit; those ending soonest \
                         are not enforced"
                    );
                }
                // Counted from before the read: the policy is the table's at or after then.
                Cached {
                    policy: Some(Arc::new(read)),
                    stale_at: Some(asked_at + self.ttl),
                }
            }
            Err(error) => {
                tracing::error!(%error, "reading the operator's policy failed; keeping the last one");
                let mut kept = self.lock();
                kept.stale_at = Some(asked_at + RETRY_AFTER_FAILURE);
                return kept.policy.clone();
            }
        };
        let policy = cached.policy.clone();
        std::mem::swap(&mut *self.lock(), &mut cached);
        policy
    }

    /// The cached policy, if any, and whether it is time to read it again.
    fn snapshot(&self) -> (Option<Arc<Policy>>, bool) {
        let cached = self.lock();
        let fresh = cached
            .stale_at
            .is_some_and(|stale_at| Instant::now() < stale_at);
        (cached.policy.clone(), fresh)
    }

    fn lock(&self) -> MutexGuard<'_, Cached> {
        // Every critical section is an assignment that cannot be left half-done.
        self.current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
