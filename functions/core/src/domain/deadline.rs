//! The request deadline. A request makes several backing calls in a row, each bounded on its
//! own (`DB_TIMEOUT_MS`, `AWS_TIMEOUT_MS`); their sum could pass the function's timeout, and
//! the platform would then end the request mid-way (a crash point) and answer a gateway error.
//! So each request runs under one deadline below that timeout (`REQUEST_DEADLINE_MS`, and on
//! Lambda never past the invocation's own deadline less a margin); every call is bounded by
//! what is left of it, and a request that runs out answers 503 with `Retry-After`.
//!
//! The deadline is task-local: code outside a request (the sweep, the janitor, the tests'
//! direct calls) runs with its calls' own bounds only.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// The deadline ran out before the call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request's deadline passed")]
pub struct Expired;

/// Runs `request` with `deadline` as its deadline (an earlier one already set is kept).
pub async fn run<F: Future>(deadline: Instant, request: F) -> F::Output {
    let deadline = current().map_or(deadline, |outer| outer.min(deadline));
    DEADLINE.scope(deadline, request).await
}

/// Runs `work` with a deadline `reserve` earlier than the current one, so that what follows it
/// (resolving an unknown outcome) still has `reserve` left. Outside a request: unchanged.
pub async fn reserving<F: Future>(reserve: Duration, work: F) -> F::Output {
    match current() {
        Some(deadline) => {
            let earlier = deadline.checked_sub(reserve).unwrap_or_else(Instant::now);
            DEADLINE.scope(earlier, work).await
        }
        None => work.await,
    }
}

fn current() -> Option<Instant> {
    DEADLINE.try_with(|deadline| *deadline).ok()
}

/// What is left of the current request's deadline; `None` outside a request.
pub fn remaining() -> Option<Duration> {
    current().map(|deadline| deadline.saturating_duration_since(Instant::now()))
}

/// `limit`, or less if the request's deadline comes sooner.
pub fn limit(limit: Duration) -> Duration {
    remaining().map_or(limit, |left| left.min(limit))
}

/// `call`, abandoned when the request's deadline passes (its own timeout bounds it otherwise).
pub async fn within<F: Future>(call: F) -> Result<F::Output, Expired> {
    match current() {
        Some(deadline) => tokio::time::timeout_at(deadline, call)
            .await
            .map_err(|_| Expired),
        None => Ok(call.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_are_cut_at_the_deadline_and_unbounded_outside_one() {
        let slow = || tokio::time::sleep(Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(1);
        assert_eq!(run(deadline, within(slow())).await, Err(Expired));
        assert_eq!(within(slow()).await, Ok(()));
        assert_eq!(remaining(), None);
        assert_eq!(limit(Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn limits_shrink_to_what_is_left_and_a_reserve_is_kept() {
        let deadline = Instant::now() + Duration::from_secs(4);
        run(deadline, async {
            assert_eq!(limit(Duration::from_secs(10)), Duration::from_secs(4));
            assert_eq!(limit(Duration::from_secs(1)), Duration::from_secs(1));
            reserving(Duration::from_secs(3), async {
                assert_eq!(remaining(), Some(Duration::from_secs(1)));
                // A later deadline set inside does not extend the outer one.
                run(Instant::now() + Duration::from_secs(60), async {
                    assert_eq!(remaining(), Some(Duration::from_secs(1)));
                })
                .await;
            })
            .await;
            assert_eq!(remaining(), Some(Duration::from_secs(4)));
        })
        .await;
    }
}
