use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::cache::PolicyCache;
use crate::adapters::memory::MemoryPolicy;
use crate::domain::policy::{BanTarget, PlayerName, Policy};
use crate::ports::policy::{NewBan, PolicyStore};
use crate::support::refreshed::RETRY_AFTER_FAILURE;

const TTL: Duration = Duration::from_secs(30);

fn cache() -> (PolicyCache, Arc<MemoryPolicy>) {
    let store = Arc::new(MemoryPolicy::default());
    (PolicyCache::new(store.clone(), TTL), store)
}

/// The policy the cache answers with; every test but the cold one has read it once.
async fn read(cache: &PolicyCache) -> Arc<Policy> {
    cache.current().await.expect("a policy was read")
}

async fn ban_player(store: &MemoryPolicy, name: &str) {
    let ban = NewBan {
        target: BanTarget::Player(PlayerName::parse(name).unwrap()),
        reason: None,
        until: None,
    };
    store.add_ban(&ban).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn requests_within_one_ttl_share_one_read() {
    let (cache, store) = cache();
    let policies = join_all((0..50).map(|_| read(&cache))).await;
    assert_eq!(store.reads(), 1, "fifty concurrent requests, one read");
    assert!(policies.iter().all(|p| p.bans.is_empty()));
    ban_player(&store, "late").await;
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    for _ in 0..50 {
        assert!(
            read(&cache).await.bans.is_empty(),
            "still the cached policy"
        );
    }
    assert_eq!(store.reads(), 1, "no read within the TTL");
    tokio::time::advance(Duration::from_millis(1)).await;
    let policies = join_all((0..50).map(|_| read(&cache))).await;
    assert_eq!(store.reads(), 2, "one refresh once the TTL has passed");
    assert!(
        policies.iter().any(|p| p.bans.len() == 1),
        "the refresh sees the ban"
    );
    assert_eq!(read(&cache).await.bans.len(), 1, "and keeps it");
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_keeps_the_last_policy_and_is_retried_soon() {
    let (cache, store) = cache();
    ban_player(&store, "kept").await;
    assert_eq!(read(&cache).await.bans.len(), 1);
    store.set_down(true);
    tokio::time::advance(TTL).await;
    assert_eq!(
        read(&cache).await.bans.len(),
        1,
        "the last good policy (fail-open on a stale policy)"
    );
    assert_eq!(store.reads(), 2);
    for _ in 0..10 {
        cache.current().await;
    }
    assert_eq!(
        store.reads(),
        2,
        "a failure is not retried at every request"
    );
    store.set_down(false);
    store.remove_ban(1).await.unwrap();
    tokio::time::advance(RETRY_AFTER_FAILURE).await;
    assert!(read(&cache).await.bans.is_empty(), "retried after a second");
    assert_eq!(store.reads(), 3);
}

#[tokio::test(start_paused = true)]
async fn without_any_successful_read_there_is_no_policy() {
    let (cache, store) = cache();
    ban_player(&store, "banned").await;
    store.set_down(true);
    let policies = join_all((0..20).map(|_| cache.current())).await;
    assert!(
        policies.iter().all(Option::is_none),
        "no policy, not an empty one that lets the banned through"
    );
    assert_eq!(
        store.reads(),
        1,
        "the waiting requests share the failed read"
    );
    for _ in 0..10 {
        assert!(cache.current().await.is_none());
    }
    assert_eq!(
        store.reads(),
        1,
        "a failure is not retried at every request"
    );
    store.set_down(false);
    tokio::time::advance(RETRY_AFTER_FAILURE).await;
    assert_eq!(read(&cache).await.bans.len(), 1, "read once it answers");
}
