//! Shared secrets that rotate: the origin secret our edge sends (http.rs) and the webhook key
//! render workers sign with (lifecycle.rs). A request is checked against the secret's current
//! and previous values. One kept in Secrets Manager is read at cold start and read again when
//! a request presents a value neither known one accepts, so a warm instance learns a rotation
//! from the first request that needs it; at most once per `SECRET_REFRESH_INTERVAL` and one
//! read at a time, so a flood of wrong values cannot become a flood of Secrets Manager calls.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::domain::deadline;
use crate::ports::secrets::{SecretStore, SecretVersions};
use crate::support::config::{SecretSource, MIN_SECRET_BYTES};

/// After a failed read, the next may come this soon (or at the refresh interval if sooner):
/// an instance that could not read its secret answers 503 until it can.
pub const RETRY_FAILED_READ: Duration = Duration::from_secs(5);

/// No value of the secret is known: it is stored, and no read has succeeded yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the secret could not be read")]
pub struct SecretUnavailable;

/// A secret's accepted values, shared by every request of the instance (cheap to clone).
#[derive(Clone)]
pub struct RotatingSecret(Arc<Inner>);

struct Inner {
    known: RwLock<Arc<Known>>,
    stored: Option<Stored>,
}

/// The values accepted now; `generation` counts the reads that installed them.
#[derive(Default)]
struct Known {
    generation: u64,
    values: Vec<Vec<u8>>,
}

struct Stored {
    id: String,
    store: Arc<dyn SecretStore>,
    refresh_every: Duration,
    /// When the next read may start; the lock makes reads single-flight.
    next_read: Mutex<Option<Instant>>,
}

impl RotatingSecret {
    /// The secret `source` names, read from `store` when it is stored there. Values from the
    /// environment were checked by the configuration.
    pub fn new(
        source: &SecretSource,
        store: Arc<dyn SecretStore>,
        refresh_every: Duration,
    ) -> Self {
        let (known, stored) = match source {
            SecretSource::Fixed { current, previous } => {
                let values = std::iter::once(current)
                    .chain(previous)
                    .map(|value| value.as_bytes().to_vec())
                    .collect();
                (
                    Known {
                        generation: 0,
                        values,
                    },
                    None,
                )
            }
            SecretSource::Stored(id) => (
                Known::default(),
                Some(Stored {
                    id: id.clone(),
                    store,
                    refresh_every,
                    next_read: Mutex::new(None),
                }),
            ),
        };
        Self(Arc::new(Inner {
            known: RwLock::new(Arc::new(known)),
            stored,
        }))
    }

    /// Reads a stored secret now (at cold start, before the first request needs it). A failure
    /// is logged, and the first request that needs the secret tries again.
    pub async fn read(&self) {
        self.refresh(self.known().generation).await;
    }

    /// Whether `accepts` holds for the current or the previous value. When neither does and
    /// the secret is stored, it is read again first if that is due. `SecretUnavailable` when no
    /// value is known.
    pub async fn check(&self, accepts: impl Fn(&[u8]) -> bool) -> Result<bool, SecretUnavailable> {
        let known = self.known();
        if known.values.iter().any(|value| accepts(value)) {
            return Ok(true);
        }
        if self.0.stored.is_some() && self.refresh(known.generation).await {
            return Ok(self.known().values.iter().any(|value| accepts(value)));
        }
        if known.values.is_empty() {
            Err(SecretUnavailable)
        } else {
            Ok(false)
        }
    }

    /// Whether `presented` is the current or the previous value, compared in constant time.
    pub async fn matches(&self, presented: &[u8]) -> Result<bool, SecretUnavailable> {
        // Digests of equal length: the comparison's time depends on neither value's length.
        let presented = Sha256::digest(presented);
        self.check(|value| bool::from(Sha256::digest(value).ct_eq(&presented)))
            .await
    }

    fn known(&self) -> Arc<Known> {
        self.0
            .known
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Reads the stored secret again unless another read got newer values since `seen` (then
    /// those are the answer) or one started less than the refresh interval ago. Whether the
    /// values changed since `seen`. Waiters queue behind the read in progress, so concurrent
    /// misses cost one read.
    async fn refresh(&self, seen: u64) -> bool {
        let Some(stored) = &self.0.stored else {
            return false;
        };
        let mut next_read = stored.next_read.lock().await;
        if self.known().generation != seen {
            return true;
        }
        let now = Instant::now();
        if next_read.is_some_and(|at| now < at) {
            return false;
        }
        // Counted before it starts: a read cut short by the request's deadline still waits its turn.
        *next_read = Some(now + stored.refresh_every);
        let read = deadline::within(stored.store.versions(&stored.id)).await;
        match read
            .map_err(|expired| expired.to_string())
            .and_then(|read| {
                read.map_err(|error| error.message().to_owned())
                    .and_then(usable)
            }) {
            Ok(values) => {
                let mut known = self
                    .0
                    .known
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                *known = Arc::new(Known {
                    generation: known.generation + 1,
                    values,
                });
                tracing::info!(secret = %stored.id, "secret read");
                true
            }
            Err(error) => {
                *next_read = Some(now + stored.refresh_every.min(RETRY_FAILED_READ));
                tracing::error!(secret = %stored.id, %error, "reading a secret failed");
                false
            }
        }
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
