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
    let client = fresh_client();
    let (first_hash, other_hash) = (RequestHash::of(&[b"first"]), RequestHash::of(&[b"other"]));
    let first = claim(&client, "contract", "key-1");
    assert_eq!(
        store.claim(&first, &first_hash).await.expect("answered"),
        Ok(()),
        "a free key is claimed"
    );
    let retry = claim(&client, "contract", "key-1");
    let in_progress = Some(Held::InProgress {
        request_hash: first_hash,
    });
    assert_eq!(
        store.claim(&retry, &other_hash).await.expect("answered"),
        Err(in_progress.clone()),
        "a held key reports its holder's request"
    );
    assert_eq!(
        store.held(&retry).await.expect("answered"),
        in_progress,
        "held: in progress"
    );

    let stranger = claim(&client, "contract", "key-1");
    store.release(&stranger).await.expect("answered");
    store
        .complete(&stranger, &response(409))
        .await
        .expect("answered");
    assert_eq!(
        store.held(&retry).await.expect("answered"),
        in_progress,
        "only the claim's owner (its token) releases or completes it"
    );

    store
        .complete(&first, &response(202))
        .await
        .expect("answered");
    let completed = Some(Held::Completed {
        request_hash: first_hash,
        response: response(202),
    });
    assert_eq!(
        store.held(&retry).await.expect("answered"),
        completed,
        "held: completed, with the response"
    );
    assert_eq!(
        store.claim(&retry, &first_hash).await.expect("answered"),
        Err(completed),
        "a completed key answers with its first response"
    );
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
    store
        .claim(&released, &first_hash)
        .await
        .expect("answered")
        .expect("claimed");
    store.release(&released).await.expect("answered");
    let again = claim(&client, "contract", "key-2");
    assert_eq!(
        store.held(&again).await.expect("answered"),
        None,
        "a released key is free"
    );
    assert_eq!(
        store.claim(&again, &other_hash).await.expect("answered"),
        Ok(()),
        "and is claimed afresh"
    );

    let mut stale = claim(&client, "contract", "key-3");
    stale.stale_after = Duration::ZERO;
    store
        .claim(&stale, &first_hash)
        .await
        .expect("answered")
        .expect("claimed");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut takeover = claim(&client, "contract", "key-3");
    takeover.stale_after = Duration::ZERO;
    assert_eq!(
        store.claim(&takeover, &other_hash).await.expect("answered"),
        Ok(()),
        "a claim in progress past its staleness is taken over"
    );
    store
        .complete(&stale, &response(202))
        .await
        .expect("answered");
    assert_eq!(
        store.held(&takeover).await.expect("answered"),
        Some(Held::InProgress {
            request_hash: other_hash
        }),
        "the claim taken over is no longer the old owner's to complete"
    );
}

fn response(status: u16) -> StoredResponse {
    StoredResponse {
        status,
        location: Some("/v1/jobs/x".into()),
        body: serde_json::json!({ "status": status }),
    }
}
