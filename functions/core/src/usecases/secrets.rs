//! Shared secrets that rotate: the origin secret our edge sends (http.rs) and the webhook key
//! render workers sign with (lifecycle.rs). A request is checked against the secret's current
//! and previous values. One kept in Secrets Manager is read at cold start and read again when
//! a request presents a value neither known one accepts, so a warm instance learns a rotation
//! from the first request that needs it; at most once per `SECRET_REFRESH_INTERVAL` and one
//! read at a time, so a flood of wrong values cannot become a flood of Secrets Manager calls.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::deadline;
use crate::ports::secrets::{SecretStore, SecretVersions};
use crate::support::config::{SecretSource, MIN_SECRET_BYTES};
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading};

/// After a failed read, the next may come this soon (or at the refresh interval if sooner):
/// an instance that could not read its secret answers 503 until it can.
pub const RETRY_FAILED_READ: Duration = Duration::from_secs(5);

/// No value of the secret is known: it is stored, and no read has succeeded yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the secret could not be read")]
pub struct SecretUnavailable;

/// A secret's accepted values, shared by every request of the instance (cheap to clone).
#[derive(Clone)]
pub struct RotatingSecret(Arc<Values>);

/// The values accepted now: the current one, and the previous one if any.
type Accepted = Arc<Vec<Vec<u8>>>;

enum Values {
    /// From the environment, checked by the configuration.
    Fixed(Accepted),
    /// In Secrets Manager: read again on a value neither known one accepts, at most once per
    /// refresh interval.
    Stored {
        id: String,
        store: Arc<dyn SecretStore>,
        read: Refreshed<Accepted>,
    },
}

impl RotatingSecret {
    /// The secret `source` names, read from `store` when it is stored there.
    pub fn new(
        source: &SecretSource,
        store: Arc<dyn SecretStore>,
        refresh_every: Duration,
    ) -> Self {
        Self(Arc::new(match source {
            SecretSource::Fixed { current, previous } => Values::Fixed(Arc::new(
                std::iter::once(current)
                    .chain(previous)
                    .map(|value| value.as_bytes().to_vec())
                    .collect(),
            )),
            SecretSource::Stored(id) => Values::Stored {
                id: id.clone(),
                store,
                read: Refreshed::new(Refresh {
                    ttl: refresh_every,
                    retry_after_failure: refresh_every.min(RETRY_FAILED_READ),
                    while_loading: WhileLoading::Wait,
                }),
            },
        }))
    }

    /// Reads a stored secret now (at cold start, before the first request needs it). A failure
    /// is logged, and the first request that needs the secret tries again.
    pub async fn read(&self) {
        self.accepted().await;
    }

    /// Whether `accepts` holds for the current or the previous value. When neither does and
    /// the secret is stored, it is read again first if that is due. `SecretUnavailable` when no
    /// value is known.
    pub async fn check(&self, accepts: impl Fn(&[u8]) -> bool) -> Result<bool, SecretUnavailable> {
        let accepted_by = |values: &Accepted| values.iter().any(|value| accepts(value));
        let last = match &*self.0 {
            Values::Fixed(values) => return Ok(accepted_by(values)),
            Values::Stored { read, .. } => read.last(),
        };
        if last.as_ref().is_some_and(accepted_by) {
            return Ok(true);
        }
        self.accepted()
            .await
            .map(|values| accepted_by(&values))
            .ok_or(SecretUnavailable)
    }

    /// Whether `presented` is the current or the previous value, compared in constant time.
    pub async fn matches(&self, presented: &[u8]) -> Result<bool, SecretUnavailable> {
        // Digests of equal length: the comparison's time depends on neither value's length.
        let presented = Sha256::digest(presented);
        self.check(|value| bool::from(Sha256::digest(value).ct_eq(&presented)))
            .await
    }

    /// The values accepted now, read again if that is due; `None` while no read has succeeded.
    /// A read that outlives the request's deadline ends as a failed one (`deadline::within`), so
    /// the next waits `RETRY_FAILED_READ`; only a caller dropped mid-read (a client gone from the
    /// dev server) leaves the next caller to read at once.
    async fn accepted(&self) -> Option<Accepted> {
        let (id, store, read) = match &*self.0 {
            Values::Fixed(values) => return Some(values.clone()),
            Values::Stored { id, store, read } => (id, store, read),
        };
        read.get(|| async {
            let versions = deadline::within(store.versions(id))
                .await
                .map_err(|expired| expired.to_string())
                .and_then(|read| read.map_err(|error| error.message().to_owned()))
                .and_then(usable);
            match versions {
                Ok(values) => {
                    tracing::info!(secret = %id, "secret read");
                    Ok(Arc::new(values))
                }
                Err(error) => {
                    tracing::error!(secret = %id, %error, "reading a secret failed");
                    Err(error)
                }
            }
        })
        .await
    }
}

/// The values to accept: the current one, which must be long enough to be a secret (the message
/// never quotes it), and the previous one unless it is too short (a mistake since corrected).
fn usable(versions: SecretVersions) -> Result<Vec<Vec<u8>>, String> {
    if versions.current.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "the current version is shorter than {MIN_SECRET_BYTES} bytes"
        ));
    }
    let previous = versions
        .previous
        .filter(|value| value.len() >= MIN_SECRET_BYTES);
    Ok(std::iter::once(versions.current)
        .chain(previous)
        .map(String::into_bytes)
        .collect())
}
