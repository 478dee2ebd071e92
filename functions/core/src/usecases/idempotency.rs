//! `Idempotency-Key` on `POST /v1/render` and the multipart skin uploads: a retry with the same
//! key and the same request within 24 h gets the original response (marked
//! `Idempotent-Replayed: true`) without spending rate-limit quota or a slot; the same key with
//! a different request is a 422. Keys are scoped per client key and endpoint.
//!
//! Before the rate limit the key is only read (`answered`, `look_up`): a completed key's
//! response is a retry's answer at no quota, and a key in progress is waited for (bounded); a
//! malformed request is refused before that (no database access). The claim is written only
//! after the rate limit passed (`claim`), so the limit bounds the writes a client can cause:
//! one statement claims the key (`INSERT … ON CONFLICT`), so of concurrent requests with one key
//! exactly one runs; the others wait a bounded time for its outcome and answer with it. Only
//! successes are kept: every refusal after the claim is transient (capacity, a duplicate, an
//! outage), so it releases the key and a retry runs afresh.

use std::time::Duration;

use tokio::time::Instant;

use crate::domain::deadline;
use crate::domain::hash::RequestHash;
use crate::ports::idempotency::Claim;
use crate::ports::idempotency::Held;
use crate::ports::idempotency::StoredResponse;
// What an idempotent submission answers, and the header that names it: part of this use case's API.
pub use crate::ports::idempotency::{Reply, KEY_HEADER};
use crate::support::problem::Rejection;
use crate::usecases::app::App;
/// How long a request waits for the outcome of another one holding its key: an admission takes
/// well under a second; past this (or close to the request's own deadline) it is told to come
/// back (409, `Retry-After: 1`).
const IN_PROGRESS_WAIT: Duration = Duration::from_secs(10);
/// Kept of the request's deadline after its wait, for the last look and the answer.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How a keyed request goes on once the rate limit has passed.
#[derive(Debug)]
pub enum Begin {
    /// Run the request; complete or release the claim (`None` without a key) when it is done.
    Run(Option<Claim>),
    /// Answer with the first request's response.
    Replay(StoredResponse),
}

/// Before the rate limit: the first response to `claim`'s key, if `held` (its holder, as read)
/// has one for this request; a holder still in progress is waited for, reading only. `None`:
/// the key is free (or came free), and the request goes on to the rate limit.
pub async fn answered(
    app: &App,
    claim: &Claim,
    request_hash: &RequestHash,
    held: Option<Held>,
) -> Result<Option<StoredResponse>, Rejection> {
    await_holder(app, claim, request_hash, held, wait_deadline()).await
}

/// `answered`, with the key's holder read first (no key, no database access): for a request
/// that has no other read to send it with.
pub async fn look_up(
    app: &App,
    claim: Option<&Claim>,
    request_hash: &RequestHash,
) -> Result<Option<StoredResponse>, Rejection> {
    let Some(claim) = claim else {
        return Ok(None);
    };
    let held = app
        .idempotency
        .held(claim)
        .await
        .map_err(|error| error.into_rejection("idempotency key lookup"))?;
    answered(app, claim, request_hash, held).await
}

/// After the rate limit: claims the key for this request (no key, no database access), or,
/// when another request holds it, waits (bounded) for that one's outcome: its response, or —
/// when it freed the key (it was refused) — this request's claim.
pub async fn claim(
    app: &App,
    claim: Option<Claim>,
    request_hash: &RequestHash,
) -> Result<Begin, Rejection> {
    let Some(claim) = claim else {
        return Ok(Begin::Run(None));
    };
    let deadline = wait_deadline();
    loop {
        let held = match app.idempotency.claim(&claim, request_hash).await {
            Ok(Ok(())) => return Ok(Begin::Run(Some(claim))),
            Ok(Err(held)) => held,
            Err(error) => {
                // The claim may have been made: free it (a no-op if it was not, or not yet).
                if error.outcome_unknown() {
                    release(app, &claim).await;
                }
                return Err(error.into_rejection("idempotency key lookup"));
            }
        };
        if let Some(response) = await_holder(app, &claim, request_hash, held, deadline).await? {
            return Ok(Begin::Replay(response));
        }
        if Instant::now() >= deadline {
            return Err(Rejection::IdempotencyInProgress);
        }
    }
}

/// The latest a request waits for another one's outcome.
fn wait_deadline() -> Instant {
    Instant::now() + deadline::limit(IN_PROGRESS_WAIT).saturating_sub(ANSWER_MARGIN)
}

/// The response of the request holding the key (`held`, as last read), once it has one; `None`
/// once the key is free: released (its request was refused), expired or stale.
async fn await_holder(
    app: &App,
    claim: &Claim,
    request_hash: &RequestHash,
    mut held: Option<Held>,
    deadline: Instant,
) -> Result<Option<StoredResponse>, Rejection> {
    loop {
        match held {
            Some(
                Held::InProgress { request_hash: h }
                | Held::Completed {
                    request_hash: h, ..
                },
            ) if &h != request_hash => {
                return Err(Rejection::IdempotencyKeyReused(
                    "this Idempotency-Key was used with a different request; use a new key".into(),
                ))
            }
            Some(Held::Completed { response, .. }) => return Ok(Some(response)),
            Some(Held::InProgress { .. }) if Instant::now() >= deadline => {
                return Err(Rejection::IdempotencyInProgress)
            }
            Some(Held::InProgress { .. }) => {
                tokio::time::sleep(POLL_INTERVAL).await;
                held = app
                    .idempotency
                    .held(claim)
                    .await
                    .map_err(|error| error.into_rejection("idempotency key lookup"))?;
            }
            None => return Ok(None),
        }
    }
}

/// Releases the claim of a refused request, so a retry runs afresh. Best effort: a claim left
/// behind goes stale and is taken over.
pub async fn release(app: &App, claim: &Claim) {
    if let Err(error) = app.idempotency.release(claim).await {
        tracing::warn!(%error, "could not release an idempotency key");
    }
}

/// Records a success for the claim's retries, trying twice (the statement is idempotent, and
/// the second try gets a fresh connection). Best effort: a claim left in progress goes stale
/// and a retry then runs afresh (and meets the duplicate or name checks).
pub async fn complete(app: &App, claim: &Claim, response: &StoredResponse) {
    for attempt in 1..=COMPLETE_ATTEMPTS {
        match app.idempotency.complete(claim, response).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, attempt, "could not record an idempotent response")
            }
        }
    }
}

const COMPLETE_ATTEMPTS: u32 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::idempotency::IdempotencyKey;
    use axum::http::HeaderValue;

    fn key(value: &[u8]) -> Result<IdempotencyKey, Rejection> {
        IdempotencyKey::parse(&HeaderValue::from_bytes(value).unwrap())
    }

    #[test]
    fn keys_are_short_printable_ascii() {
        assert_eq!(key(b"a").unwrap().as_str(), "a");
        assert!(key(b"9b2f0c4e-6f1a-4b7e-9d3c-2a1b0c9d8e7f").is_ok());
        assert!(key(b"with spaces and ~!").is_ok());
        assert!(key(&[b'k'; 255]).is_ok());
        for bad in [&b""[..], &[b'k'; 256], b"tab\there", b"caf\xc3\xa9"] {
            assert_eq!(key(bad).unwrap_err().code(), "invalid_idempotency_key");
        }
    }
}
