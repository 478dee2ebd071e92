use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Refresh, Refreshed, WhileLoading};

const TTL: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(1);

fn refreshed(while_loading: WhileLoading) -> Refreshed<u32> {
    Refreshed::new(Refresh {
        ttl: TTL,
        retry_after_failure: RETRY,
        while_loading,
    })
}

/// A load that counts its calls and answers `answer` after `takes`.
async fn load(
    calls: &AtomicUsize,
    takes: Duration,
    answer: Result<u32, &'static str>,
) -> Result<u32, &'static str> {
    calls.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(takes).await;
    answer
}

#[tokio::test(start_paused = true)]
async fn a_value_is_loaded_once_per_ttl_counted_from_before_the_load() {
    let cache = refreshed(WhileLoading::Wait);
    let calls = AtomicUsize::new(0);
    let takes = Duration::from_secs(2);
    assert_eq!(cache.get(|| load(&calls, takes, Ok(1))).await, Some(1));
    // 2 s went by loading: fresh for 8 s more.
    tokio::time::advance(TTL - takes - Duration::from_millis(1)).await;
    assert_eq!(cache.get(|| load(&calls, takes, Ok(2))).await, Some(1));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(cache.get(|| load(&calls, takes, Ok(2))).await, Some(2));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_load_keeps_the_last_value_and_is_retried_after_its_delay() {
    let cache = refreshed(WhileLoading::Wait);
    let calls = AtomicUsize::new(0);
    assert_eq!(
        cache.get(|| load(&calls, Duration::ZERO, Ok(1))).await,
        Some(1)
    );
    tokio::time::advance(TTL).await;
    assert_eq!(
        cache
            .get(|| load(&calls, Duration::ZERO, Err("down")))
            .await,
        Some(1)
    );
    // Within the retry delay nobody loads: the outage costs one load per delay.
    for _ in 0..5 {
        assert_eq!(
            cache.get(|| load(&calls, Duration::ZERO, Ok(9))).await,
            Some(1)
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    tokio::time::advance(RETRY).await;
    assert_eq!(
        cache.get(|| load(&calls, Duration::ZERO, Ok(3))).await,
        Some(3)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_known_until_a_load_succeeds() {
    let cache = refreshed(WhileLoading::ServeStale);
    let calls = AtomicUsize::new(0);
    assert_eq!(cache.last(), None);
    assert_eq!(
        cache
            .get(|| load(&calls, Duration::ZERO, Err("down")))
            .await,
        None
    );
    assert_eq!(
        cache.get(|| load(&calls, Duration::ZERO, Ok(1))).await,
        None
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(RETRY).await;
    assert_eq!(
        cache.get(|| load(&calls, Duration::ZERO, Ok(1))).await,
        Some(1)
    );
    assert_eq!(cache.last(), Some(1));
}

/// Ten callers find the value stale at once: `Wait` makes all of them take the new value,
/// `ServeStale` only the loader (and everyone when there is no value yet); one load either way.
#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_load() {
    for (while_loading, see_new) in [(WhileLoading::Wait, 10), (WhileLoading::ServeStale, 1)] {
        let cache = Arc::new(refreshed(while_loading));
        let calls = Arc::new(AtomicUsize::new(0));
        let first = join_gets(&cache, &calls, 1).await;
        assert_eq!(
            first,
            vec![Some(1); 10],
            "{while_loading:?}: the first load is waited for"
        );
        tokio::time::advance(TTL).await;
        let seen = join_gets(&cache, &calls, 2).await;
        let new = seen.iter().filter(|v| **v == Some(2)).count();
        assert_eq!(new, see_new, "{while_loading:?}: {seen:?}");
        assert!(seen.iter().all(|v| *v == Some(1) || *v == Some(2)));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{while_loading:?}");
    }
}

async fn join_gets(
    cache: &Arc<Refreshed<u32>>,
    calls: &Arc<AtomicUsize>,
    answer: u32,
) -> Vec<Option<u32>> {
    let gets = (0..10).map(|_| {
        let (cache, calls) = (cache.clone(), calls.clone());
        tokio::spawn(async move {
            cache
                .get(|| load(&calls, Duration::from_millis(100), Ok(answer)))
                .await
        })
    });
    let mut seen = Vec::new();
    for get in gets.collect::<Vec<_>>() {
        seen.push(get.await.expect("no panic"));
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_load_leaves_the_next_caller_to_load() {
    let cache = refreshed(WhileLoading::Wait);
    let calls = AtomicUsize::new(0);
    let cancelled = tokio::time::timeout(
        Duration::from_millis(10),
        cache.get(|| load(&calls, Duration::from_secs(1), Ok(1))),
    )
    .await;
    assert!(cancelled.is_err());
    assert_eq!(
        cache.get(|| load(&calls, Duration::ZERO, Ok(2))).await,
        Some(2)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
