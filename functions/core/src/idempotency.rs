//! `Idempotency-Key` on `POST /v1/render` and the multipart skin uploads: a retry with the same
//! key and the same request within 24 h gets the original response (marked
//! `Idempotent-Replayed: true`) without spending rate-limit quota or a slot; the same key with
//! a different request is a 422. Keys are scoped per client key and endpoint.
//!
//! The check runs right after the stateless steps (a malformed request is refused before any
//! database access) and before the rate limit (a retry costs no quota). One statement claims
//! the key (`INSERT … ON CONFLICT`), so of concurrent requests with one key exactly one runs;
//! the others wait a bounded time for its outcome and answer with it. Only successes are kept:
//! every refusal after the claim is transient (rate limit, capacity, a duplicate, an outage), so
//! it releases the key and a retry runs afresh.

use std::time::Duration;

use async_trait::async_trait;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use deadpool_postgres::Pool;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_postgres::types::{ToSql, Type};

use crate::app::App;
use crate::db::{self, DbError};
use crate::deadline;
use crate::domain::ClientKey;
use crate::problem::Rejection;

pub const KEY_HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// How long a key answers with its first response.
pub const KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// A claim whose request never finished (its process died) may be taken over once it is this
/// many request deadlines old: its request has been answered or abandoned long before. Taking
/// it over is safe even if its statement is still in flight: admit_job completes only a claim
/// that is still its own (`claim_lost`).
const CLAIM_STALE_AFTER_DEADLINES: u32 = 2;
/// How long a concurrent retry waits for the first request's outcome: an admission takes well
/// under a second; past this (or close to the retry's own deadline) the retry is told to come
/// back (409, `Retry-After: 1`).
const IN_PROGRESS_WAIT: Duration = Duration::from_secs(10);
/// Kept of the retry's deadline after its wait, for the last look and the answer.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
const MAX_KEY_LEN: usize = 255;

/// A valid key: 1..=255 printable ASCII characters (a UUID is the usual choice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The `Idempotency-Key` header's value; a malformed one is a 400.
    pub fn parse(value: &HeaderValue) -> Result<Self, Rejection> {
        let bytes = value.as_bytes();
        if (1..=MAX_KEY_LEN).contains(&bytes.len())
            && bytes.iter().all(|b| (0x20..0x7f).contains(b))
        {
            // Printable ASCII is valid UTF-8.
            Ok(Self(String::from_utf8_lossy(bytes).into_owned()))
        } else {
            Err(Rejection::InvalidIdempotencyKey(format!(
                "Idempotency-Key must be 1 to {MAX_KEY_LEN} printable ASCII characters"
            )))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// SHA-256 over the request's parts, each length-prefixed so no two splits hash alike. Callers
/// pass the file's bytes and the parsed (normalized) fields, so the multipart framing — the
/// boundary, the part order, the file name — does not make two equal requests differ.
pub fn request_hash(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// A success as it was answered, to answer a retry with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub body: serde_json::Value,
}

impl StoredResponse {
    /// The response; `replayed` marks an answer to a retry.
    pub fn respond(self, replayed: bool) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        let mut response = (status, axum::Json(self.body)).into_response();
        let headers = response.headers_mut();
        if let Some(location) = self.location.and_then(|l| HeaderValue::try_from(l).ok()) {
            headers.insert(header::LOCATION, location);
        }
        if replayed {
            headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}

/// What a request made, or the first response to its key.
#[derive(Debug)]
pub enum Reply<T> {
    Fresh(T),
    Replayed(StoredResponse),
}

/// This request's hold on its key: the owner completes or releases it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub client: ClientKey,
    pub endpoint: &'static str,
    pub key: IdempotencyKey,
    pub token: uuid::Uuid,
    /// When another request may take the claim over if it is still in progress.
    pub stale_after: Duration,
}

/// The state of a key someone else holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    InProgress {
        request_hash: Vec<u8>,
    },
    Completed {
        request_hash: Vec<u8>,
        response: StoredResponse,
    },
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims the key for `request_hash`, or reports who holds it (`None`: nobody any more —
    /// it was released between the attempts; claim again).
    async fn claim(
        &self,
        claim: &Claim,
        request_hash: &[u8; 32],
    ) -> Result<Result<(), Option<Held>>, DbError>;

    /// The current holder of the key, if any (and not expired).
    async fn held(&self, claim: &Claim) -> Result<Option<Held>, DbError>;

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), DbError>;

    async fn release(&self, claim: &Claim) -> Result<(), DbError>;

    /// Deletes expired keys. Returns how many.
    async fn prune(&self) -> Result<u64, DbError>;
}

pub struct PgIdempotencyStore {
    pool: Pool,
}

impl PgIdempotencyStore {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

/// A free key is inserted; an expired row, or a claim whose owner died, is taken over. Postgres
/// serializes the conflicting inserts on the key: a second one waits for the first to commit and
/// then sees its row, so exactly one request owns a key.
const CLAIM_SQL: &str = "\
INSERT INTO idempotency_keys (client_ip, endpoint, key, request_hash, token, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
ON CONFLICT (client_ip, endpoint, key) DO UPDATE
   SET request_hash = EXCLUDED.request_hash, token = EXCLUDED.token, status = 'in_progress',
       response = NULL, job_id = NULL, created_at = now(), expires_at = EXCLUDED.expires_at
 WHERE idempotency_keys.expires_at <= now()
    OR (idempotency_keys.status = 'in_progress'
        AND idempotency_keys.created_at < now() - $7 * interval '1 millisecond')
RETURNING true";

const HELD_SQL: &str = "\
SELECT status, request_hash, response FROM idempotency_keys
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND expires_at > now()";

const COMPLETE_SQL: &str = "\
UPDATE idempotency_keys SET status = 'completed', response = $5
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND token = $4";

const RELEASE_SQL: &str = "\
DELETE FROM idempotency_keys
 WHERE client_ip = $1 AND endpoint = $2 AND key = $3 AND token = $4 AND status = 'in_progress'";

const PRUNE_SQL: &str = "DELETE FROM idempotency_keys WHERE expires_at <= now()";

fn millis(duration: Duration) -> i64 {
    duration.as_millis().try_into().unwrap_or(i64::MAX)
}

/// Tries to claim the key on `conn`: whether it did. Shared with the job store, which sends it
/// pipelined with its occupancy read so a keyed render pays no extra round trip for it.
pub(crate) async fn try_claim(
    conn: &db::Conn,
    claim: &Claim,
    request_hash: &[u8; 32],
) -> Result<bool, DbError> {
    let hash = request_hash.as_slice();
    let params: [(&(dyn ToSql + Sync), Type); 7] = [
        (&claim.client.as_str(), Type::TEXT),
        (&claim.endpoint, Type::TEXT),
        (&claim.key.as_str(), Type::TEXT),
        (&hash, Type::BYTEA),
        (&claim.token, Type::UUID),
        (&millis(KEY_TTL), Type::INT8),
        (&millis(claim.stale_after), Type::INT8),
    ];
    Ok(!conn.query_typed(CLAIM_SQL, &params).await?.is_empty())
}

#[async_trait]
impl IdempotencyStore for PgIdempotencyStore {
    async fn claim(
        &self,
        claim: &Claim,
        request_hash: &[u8; 32],
    ) -> Result<Result<(), Option<Held>>, DbError> {
        let conn = db::checkout(&self.pool).await?;
        if try_claim(&conn, claim, request_hash).await? {
            Ok(Ok(()))
        } else {
            drop(conn);
            Ok(Err(self.held(claim).await?))
        }
    }

    async fn held(&self, claim: &Claim) -> Result<Option<Held>, DbError> {
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&claim.client.as_str(), Type::TEXT),
            (&claim.endpoint, Type::TEXT),
            (&claim.key.as_str(), Type::TEXT),
        ];
        let conn = db::checkout(&self.pool).await?;
        let Some(row) = conn.query_typed(HELD_SQL, &params).await?.pop() else {
            return Ok(None);
        };
        let status: &str = row.get(0);
        let request_hash: Vec<u8> = row.get(1);
        let response: Option<serde_json::Value> = row.get(2);
        Ok(Some(match (status, response) {
            ("completed", Some(response)) => Held::Completed {
                request_hash,
                response: serde_json::from_value(response)
                    .map_err(|e| DbError::new(format!("stored response: {e}")))?,
            },
            _ => Held::InProgress { request_hash },
        }))
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), DbError> {
        let response = serde_json::to_value(response).expect("responses serialize");
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&claim.client.as_str(), Type::TEXT),
            (&claim.endpoint, Type::TEXT),
            (&claim.key.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
            (&response, Type::JSONB),
        ];
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(COMPLETE_SQL, &params).await?;
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), DbError> {
        let params: [(&(dyn ToSql + Sync), Type); 4] = [
            (&claim.client.as_str(), Type::TEXT),
            (&claim.endpoint, Type::TEXT),
            (&claim.key.as_str(), Type::TEXT),
            (&claim.token, Type::UUID),
        ];
        let conn = db::checkout(&self.pool).await?;
        conn.execute_typed(RELEASE_SQL, &params).await?;
        Ok(())
    }

    async fn prune(&self) -> Result<u64, DbError> {
        let conn = db::checkout(&self.pool).await?;
        Ok(conn.execute_typed(PRUNE_SQL, &[]).await?)
    }
}

/// How a keyed request goes on.
#[derive(Debug)]
pub enum Begin {
    /// Run the request; complete or release the claim (`None` without a key) when it is done.
    Run(Option<Claim>),
    /// Answer with the first request's response.
    Replay(StoredResponse),
}

impl Claim {
    /// A fresh claim on `key`, not yet made, by a request answered within `request_deadline`.
    pub fn new(
        client: &ClientKey,
        endpoint: &'static str,
        key: IdempotencyKey,
        request_deadline: Duration,
    ) -> Self {
        Self {
            client: client.clone(),
            endpoint,
            key,
            token: uuid::Uuid::new_v4(),
            stale_after: request_deadline * CLAIM_STALE_AFTER_DEADLINES,
        }
    }
}

/// The idempotency step: claims `key` for this request, or waits (bounded) for the request
/// holding it and answers with its response. No key, no database access.
pub async fn begin(
    app: &App,
    client: &ClientKey,
    endpoint: &'static str,
    key: Option<IdempotencyKey>,
    request_hash: &[u8; 32],
) -> Result<Begin, Rejection> {
    let Some(key) = key else {
        return Ok(Begin::Run(None));
    };
    let claim = Claim::new(client, endpoint, key, app.config.request_deadline);
    match app.idempotency.claim(&claim, request_hash).await {
        Ok(Ok(())) => Ok(Begin::Run(Some(claim))),
        Ok(Err(held)) => settle(app, claim, request_hash, held).await,
        Err(error) => {
            // The claim may have been made: free it (a no-op if it was not, or not yet).
            if error.outcome_unknown() {
                release(app, &claim).await;
            }
            Err(unavailable(error))
        }
    }
}

/// The rest of the step once a claim found the key `held`: the first request's response, a
/// refusal, or — when the key came free (the first request was refused) — this request's claim.
pub async fn settle(
    app: &App,
    claim: Claim,
    request_hash: &[u8; 32],
    mut held: Option<Held>,
) -> Result<Begin, Rejection> {
    let wait = deadline::limit(IN_PROGRESS_WAIT).saturating_sub(ANSWER_MARGIN);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match held {
            Some(
                Held::InProgress { request_hash: h }
                | Held::Completed {
                    request_hash: h, ..
                },
            ) if h != request_hash => {
                return Err(Rejection::IdempotencyKeyReused(
                    "this Idempotency-Key was used with a different request; use a new key".into(),
                ))
            }
            Some(Held::Completed { response, .. }) => return Ok(Begin::Replay(response)),
            Some(Held::InProgress { .. }) if tokio::time::Instant::now() >= deadline => {
                return Err(Rejection::IdempotencyInProgress)
            }
            Some(Held::InProgress { .. }) => {
                tokio::time::sleep(POLL_INTERVAL).await;
                held = app.idempotency.held(&claim).await.map_err(unavailable)?;
            }
            // Released (the first attempt was refused) or expired: this request runs instead.
            None => match app.idempotency.claim(&claim, request_hash).await {
                Ok(Ok(())) => return Ok(Begin::Run(Some(claim))),
                Ok(Err(now_held)) if tokio::time::Instant::now() < deadline => held = now_held,
                Ok(Err(_)) => return Err(Rejection::IdempotencyInProgress),
                Err(error) => return Err(unavailable(error)),
            },
        }
    }
}

pub(crate) fn unavailable(error: DbError) -> Rejection {
    tracing::error!(%error, "idempotency key lookup failed");
    Rejection::DatabaseUnavailable
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

    #[test]
    fn request_hashes_separate_their_parts() {
        assert_ne!(request_hash(&[b"ab", b"c"]), request_hash(&[b"a", b"bc"]));
        assert_eq!(request_hash(&[b"ab", b"c"]), request_hash(&[b"ab", b"c"]));
    }
}
