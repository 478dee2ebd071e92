//! The rate limiter's guarantees (`RateLimiter`).

use super::fresh_client;
use crate::domain::client::ClientKey;
use crate::domain::rate::{RateDecision, RateLimit};
use crate::ports::limiter::{Hit, RateLimiter};

async fn hit(
    limiter: &dyn RateLimiter,
    endpoint: &'static str,
    client: &ClientKey,
    now: u64,
) -> RateDecision {
    let limit: RateLimit = "3/minute".parse().expect("a limit");
    let hit = Hit {
        endpoint,
        client,
        limit,
        now,
    };
    limiter.hit(hit).await.expect("the limiter answers")
}

pub async fn suite(limiter: &dyn RateLimiter) {
    let client = fresh_client();
    // The middle of a window, so the hits below fall in one.
    let now = 1_800_000_030;
    let first = hit(limiter, "contract", &client, now).await;
    assert!(first.allowed, "the first hit of a window is allowed");
    assert_eq!(
        (first.policy, first.limit, first.remaining, first.window),
        ("contract", 3, 2, 60),
        "the first hit's decision"
    );
    assert_eq!(
        first.reset, 1_800_000_060,
        "the window ends on its boundary"
    );
    assert_eq!(first.retry_after, 30, "retry after: until the window ends");
    for remaining in [1, 0] {
        let again = hit(limiter, "contract", &client, now + 1).await;
        assert!(
            again.allowed && again.remaining == remaining,
            "hit within the limit: {again:?}"
        );
    }
    let over = hit(limiter, "contract", &client, now + 2).await;
    assert!(
        !over.allowed && over.remaining == 0,
        "the hit past the limit is refused: {over:?}"
    );
    let still = hit(limiter, "contract", &client, now + 3).await;
    assert!(
        !still.allowed,
        "a refused hit is not counted back in: {still:?}"
    );

    let other_client = hit(limiter, "contract", &fresh_client(), now).await;
    assert!(
        other_client.allowed,
        "another client has a window of its own"
    );
    let other_endpoint = hit(limiter, "contract-other", &client, now).await;
    assert!(
        other_endpoint.allowed,
        "another endpoint has a window of its own"
    );
    let next_window = hit(limiter, "contract", &client, now + 60).await;
    assert!(
        next_window.allowed && next_window.remaining == 2,
        "the next window starts afresh: {next_window:?}"
    );

    // A hit given back is as if never counted: the window full again has room for one.
    let limit: RateLimit = "3/minute".parse().expect("a limit");
    let counted = |now| Hit {
        endpoint: "contract",
        client: &client,
        limit,
        now,
    };
    limiter.give_back(counted(now + 4)).await.expect("answers");
    let back = hit(limiter, "contract", &client, now + 5).await;
    assert!(back.allowed && back.remaining == 0, "given back: {back:?}");
    assert!(!hit(limiter, "contract", &client, now + 6).await.allowed);
    // Never below zero, and a window never counted is not made.
    let fresh = fresh_client();
    let never = Hit {
        client: &fresh,
        ..counted(now)
    };
    for _ in 0..3 {
        limiter.give_back(never).await.expect("answers");
    }
    for remaining in [2, 1, 0] {
        let first = hit(limiter, "contract", &fresh, now).await;
        assert!(first.allowed && first.remaining == remaining, "{first:?}");
    }
    assert!(!hit(limiter, "contract", &fresh, now).await.allowed);
}
