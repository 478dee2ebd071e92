//! The `Idempotency-Key` port: keys, claims and the responses their retries get, and the store
//! that holds them (adapters/postgres/idempotency.rs). The use case is idempotency.rs.

use crate::domain::client::ClientKey;
use crate::domain::hash::RequestHash;
use crate::ports::StoreError;
use crate::support::problem::Rejection;
use async_trait::async_trait;

use crate::support::metrics;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub const KEY_HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// How long a key answers with its first response.
pub const KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// A claim whose request never finished (its process died) may be taken over once it is this
/// many request deadlines old: its request has been answered or abandoned long before. Taking
/// it over is safe even if its statement is still in flight: admit_job completes only a claim
/// that is still its own (`claim_lost`).
const CLAIM_STALE_AFTER_DEADLINES: u32 = 2;
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

/// The state of a key someone else holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    InProgress {
        request_hash: RequestHash,
    },
    Completed {
        request_hash: RequestHash,
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
        request_hash: &RequestHash,
    ) -> Result<Result<(), Option<Held>>, StoreError>;

    /// The current holder of the key, if any: not expired, nor a claim in progress past its
    /// staleness (`Claim::stale_after`), which a claim takes over. Only reads.
    async fn held(&self, claim: &Claim) -> Result<Option<Held>, StoreError>;

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), StoreError>;

    async fn release(&self, claim: &Claim) -> Result<(), StoreError>;

    /// Deletes up to `batch` expired keys. Returns how many.
    async fn prune(&self, batch: i64) -> Result<u64, StoreError>;
}

impl<T> metrics::Accepted for Reply<T> {
    fn decision(&self) -> &'static str {
        match self {
            Reply::Fresh(_) => "admitted",
            Reply::Replayed(_) => "replayed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::metrics::Accepted;

    #[test]
    fn a_replayed_retry_is_not_counted_as_admitted() {
        let replayed = Reply::<()>::Replayed(StoredResponse {
            status: 202,
            location: None,
            body: serde_json::json!({}),
        });
        assert_eq!(Reply::Fresh(()).decision(), "admitted");
        assert_eq!(replayed.decision(), "replayed");
    }
}
