//! The idempotency store's guarantees (`IdempotencyStore`).

use std::time::Duration;

use axum::http::HeaderValue;

use super::fresh_client;
use crate::domain::client::ClientKey;
use crate::domain::hash::RequestHash;
use crate::ports::idempotency::{Claim, Held, IdempotencyKey, IdempotencyStore, StoredResponse};

fn claim(client: &ClientKey, endpoint: &'static str, key: &str) -> Claim {
    let key =
        IdempotencyKey::parse(&HeaderValue::from_str(key).expect("a header value")).expect("a key");
    Claim::new(client, endpoint, key, Duration::from_secs(10))
}

pub async fn suite(store: &dyn IdempotencyStore) {
    let held_is = async |claim: &Claim, expected: Option<Held>, why: &str| {
        assert_eq!(
            store.held(claim).await.expect("answered"),
            expected,
            "{why}"
        );
    };
    let claim_is = async |claim: &Claim, hash: &RequestHash, expected, why: &str| {
        let claimed = store.claim(claim, hash).await.expect("answered");
        assert_eq!(claimed, expected, "{why}");
    };
    let complete = async |claim: &Claim, status: u16| {
        store
            .complete(claim, &response(status))
            .await
            .expect("answered");
    };
    let claimed = async |claim: &Claim, hash: &RequestHash| {
        store
            .claim(claim, hash)
            .await
            .expect("answered")
            .expect("claimed");
    };
    let client = fresh_client();
    let (first_hash, other_hash) = (RequestHash::of(&[b"first"]), RequestHash::of(&[b"other"]));
    let first = claim(&client, "contract", "key-1");
    claim_is(&first, &first_hash, Ok(()), "a free key is claimed").await;
    let retry = claim(&client, "contract", "key-1");
    let in_progress = held_by(first_hash);
    claim_is(
        &retry,
        &other_hash,
        Err(in_progress.clone()),
        "a held key reports its holder's request",
    )
    .await;
    held_is(&retry, in_progress.clone(), "held: in progress").await;

    let stranger = claim(&client, "contract", "key-1");
    store.release(&stranger).await.expect("answered");
    complete(&stranger, 409).await;
    held_is(
        &retry,
        in_progress,
        "only the claim's owner (its token) releases or completes it",
    )
    .await;

    complete(&first, 202).await;
    let completed = Some(Held::Completed {
        request_hash: first_hash,
        response: response(202),
    });
    held_is(
        &retry,
        completed.clone(),
        "held: completed, with the response",
    )
    .await;
    claim_is(
        &retry,
        &first_hash,
        Err(completed),
        "a completed key answers with its first response",
    )
    .await;
    store.release(&first).await.expect("answered");
    assert!(
        matches!(
            store.held(&retry).await.expect("answered"),
            Some(Held::Completed { .. })
        ),
        "a completed key is not released"
    );

    for (other, what) in [
        (
            claim(&fresh_client(), "contract", "key-1"),
            "another client",
        ),
        (
            claim(&client, "contract-other", "key-1"),
            "another endpoint",
        ),
    ] {
        assert_eq!(
            store.claim(&other, &first_hash).await.expect("answered"),
            Ok(()),
            "{what}'s key is its own"
        );
    }

    let released = claim(&client, "contract", "key-2");
    claimed(&released, &first_hash).await;
    store.release(&released).await.expect("answered");
    let again = claim(&client, "contract", "key-2");
    held_is(&again, None, "a released key is free").await;
    claim_is(&again, &other_hash, Ok(()), "and is claimed afresh").await;

    let mut stale = claim(&client, "contract", "key-3");
    stale.stale_after = Duration::ZERO;
    claimed(&stale, &first_hash).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut takeover = claim(&client, "contract", "key-3");
    takeover.stale_after = Duration::ZERO;
    held_is(
        &takeover,
        None,
        "a claim in progress past its staleness reads as free",
    )
    .await;
    held_is(
        &claim(&client, "contract", "key-3"),
        held_by(first_hash),
        "and as held while it is not",
    )
    .await;
    claim_is(
        &takeover,
        &other_hash,
        Ok(()),
        "a claim in progress past its staleness is taken over",
    )
    .await;
    complete(&stale, 202).await;
    held_is(
        &claim(&client, "contract", "key-3"),
        held_by(other_hash),
        "the claim taken over is no longer the old owner's to complete",
    )
    .await;
}

/// A key held by the request in progress whose hash is `request_hash`.
fn held_by(request_hash: RequestHash) -> Option<Held> {
    Some(Held::InProgress { request_hash })
}

fn response(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        location: Some("/v1/jobs/x".into()),
        body: serde_json::json!({ "status": status }),
    }
}
