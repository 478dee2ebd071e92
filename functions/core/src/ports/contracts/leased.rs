//! The leased queue's guarantees (`LeasedQueue`), for the render events and the callbacks alike:
//! a claimed item is leased (not claimed again until its lease ends), a delivered one is never
//! claimed again, a retry waits its delay, and attempts run out into `failed`.

use std::collections::HashMap;
use std::time::Duration;

use super::fresh_caller;
use super::jobs::{new_job, ROOMY};
use crate::ports::jobs::{Admission, JobAdmission};
use crate::ports::leased::{LeaseClaim, Leased, LeasedQueue, Retry};

const ATTEMPTS: i32 = 10;
const MINUTE: Duration = Duration::from_secs(60);

/// `seed` makes a pending item and returns its id, due or not (the suite's retry makes it due);
/// `claim_of` makes the queue's claim of a `LeaseClaim`. The queue must be its own (a fresh
/// database): `next_due` answers for every item in it.
pub async fn suite<Q, C, S>(queue: &Q, claim_of: C, seed: S)
where
    Q: LeasedQueue + ?Sized,
    C: Fn(LeaseClaim) -> Q::Claim,
    S: AsyncFn() -> i64,
{
    // Claimed: the items' attempts, by id, among everything due.
    let claim = async |lease: Duration, max_attempts: i32| -> HashMap<i64, i32> {
        let claim = claim_of(LeaseClaim {
            limit: 10_000,
            lease,
            max_attempts,
        });
        let items = queue.claim(claim).await.expect("answered");
        items.iter().map(Leased::lease).collect()
    };
    let retry = async |ids: &[i64], delay: Duration, max_attempts: i32| -> u64 {
        let retries: Vec<Retry> = ids
            .iter()
            .map(|&id| Retry {
                id,
                delay,
                error: "contract".into(),
            })
            .collect();
        queue
            .mark_retry(&retries, max_attempts)
            .await
            .expect("answered")
    };

    let (a, b) = (seed().await, seed().await);
    assert_eq!(
        retry(&[a, b], Duration::ZERO, ATTEMPTS).await,
        0,
        "a retry with attempts left fails nothing"
    );
    assert_eq!(
        queue.next_due(ATTEMPTS).await.expect("answered"),
        Some(Duration::ZERO),
        "an item that just fell due is due now (a sweep that claimed before may have missed it)"
    );
    let first = claim(MINUTE, ATTEMPTS).await;
    assert!(
        first.contains_key(&a) && first.contains_key(&b),
        "due items are claimed"
    );
    let lease_ends = queue.next_due(ATTEMPTS).await.expect("answered");
    assert!(
        lease_ends.is_some_and(|left| left > Duration::ZERO && left <= MINUTE),
        "a leased item falls due again when its lease ends: {lease_ends:?}"
    );
    let again = claim(MINUTE, ATTEMPTS).await;
    assert!(
        !again.contains_key(&a) && !again.contains_key(&b),
        "a leased item is not claimed again while its lease runs"
    );

    queue.mark_dispatched(&[a]).await.expect("answered");
    // With one attempt allowed, a pending item's retry would fail it: a delivered one's is ignored.
    assert_eq!(
        retry(&[a], Duration::ZERO, 1).await,
        0,
        "a delivered item is not retried"
    );
    retry(&[b], Duration::ZERO, ATTEMPTS).await;
    let retried = claim(MINUTE, ATTEMPTS).await;
    assert!(
        !retried.contains_key(&a),
        "a delivered item is never claimed again"
    );
    assert_eq!(
        retried.get(&b),
        Some(&(first[&b] + 1)),
        "a retried item is claimed again once due, its attempt counted"
    );
    let spent = retried[&b];
    assert_eq!(
        retry(&[b], Duration::ZERO, spent).await,
        1,
        "an item out of attempts fails on its retry"
    );
    assert!(
        !claim(Duration::ZERO, ATTEMPTS * 10).await.contains_key(&b),
        "a failed item is never claimed again"
    );

    let held = seed().await;
    let hour = Duration::from_secs(3600);
    retry(&[held], hour, ATTEMPTS).await;
    assert!(
        !claim(MINUTE, ATTEMPTS).await.contains_key(&held),
        "a retry waits its delay"
    );
    let backoff_ends = queue.next_due(ATTEMPTS).await.expect("answered");
    assert!(
        backoff_ends.is_some_and(|left| left > hour - MINUTE && left <= hour),
        "the next item due is the one backing off, when its delay ends: {backoff_ends:?}"
    );

    let abandoned = seed().await;
    retry(&[abandoned], Duration::ZERO, ATTEMPTS).await;
    // Leased for no time: due again at once, as if its sender died.
    let attempts = claim(Duration::ZERO, ATTEMPTS).await[&abandoned];
    assert_eq!(
        queue.next_due(attempts + 1).await.expect("answered"),
        Some(Duration::ZERO),
        "it is due now for a sender that may try it once more"
    );
    assert_ne!(
        queue.next_due(attempts).await.expect("answered"),
        Some(Duration::ZERO),
        "an item with no attempts left is not waited for"
    );
    assert!(
        !claim(MINUTE, attempts).await.contains_key(&abandoned),
        "an item with no attempts left is not claimed"
    );
    assert!(
        queue.fail_exhausted(attempts).await.expect("answered") >= 1,
        "a due item with no attempts left is given up"
    );
    assert!(
        !claim(MINUTE, ATTEMPTS * 10).await.contains_key(&abandoned),
        "a given-up item is never claimed again"
    );
}

/// A render event to lease, made as admission makes it: with a job of its own.
pub async fn seed_event(jobs: &dyn JobAdmission) -> i64 {
    let job = new_job(&fresh_caller(), &uuid::Uuid::new_v4().to_string());
    match jobs.admit(&job, &ROOMY).await.expect("answered") {
        Admission::Admitted(events) => match events.iter().find(|e| e.job_id == job.id) {
            Some(event) => event.id,
            None => panic!("a job with room is released with its event, got {events:?}"),
        },
        other => panic!("a job with room is admitted with its event, got {other:?}"),
    }
}
