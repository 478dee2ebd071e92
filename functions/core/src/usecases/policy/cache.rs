//! The policy of one instance: the pause and the bans, read at most once per
//! `POLICY_CACHE_TTL`; while one request reads it again, the others use the last one (mod.rs).

use std::sync::Arc;
use std::time::Duration;

use crate::domain::policy::Policy;
use crate::ports::policy::{PolicyStore, MAX_BANS};
use crate::ports::StoreError;
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading, RETRY_AFTER_FAILURE};

/// The policy of one instance: the store, behind the cache.
pub struct PolicyCache {
    store: Arc<dyn PolicyStore>,
    policy: Refreshed<Arc<Policy>>,
}

impl PolicyCache {
    pub fn new(store: Arc<dyn PolicyStore>, ttl: Duration) -> Self {
        let refresh = Refresh {
            ttl,
            retry_after_failure: RETRY_AFTER_FAILURE,
            while_loading: WhileLoading::ServeStale,
        };
        Self {
            store,
            policy: Refreshed::new(refresh),
        }
    }

    /// The policy, at most `ttl` old (plus one read) unless reads are failing, when it is the
    /// last one read; `None` while no read has succeeded yet.
    pub async fn current(&self) -> Option<Arc<Policy>> {
        self.policy
            .get(|| async {
                let read = self.store.read(MAX_BANS).await.inspect_err(|error| {
                    tracing::error!(%error, "reading the operator's policy failed; keeping the last one");
                })?;
                if read.bans.len() >= MAX_BANS {
                    tracing::warn!(
                        limit = MAX_BANS,
                        "the bans in force reached the policy's limit; those ending soonest \
                         are not enforced"
                    );
                }
                Ok::<_, StoreError>(Arc::new(read))
            })
            .await
    }
}
