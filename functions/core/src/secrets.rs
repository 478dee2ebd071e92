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

use crate::config::{SecretSource, MIN_SECRET_BYTES};
use crate::deadline;
use crate::ports::secrets::{SecretStore, SecretVersions};

/// After a failed read, the next may come this soon (or at the refresh interval if sooner):
/// an instance that could not read its secret answers 503 until it can.
const RETRY_FAILED_READ: Duration = Duration::from_secs(5);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemorySecrets;

    const ID: &str = "arn:aws:secretsmanager:us-east-1:1:secret:origin";
    const OLD: &str = "the-old-origin-secret";
    const NEW: &str = "the-new-origin-secret";
    const EVERY: Duration = Duration::from_secs(30);

    fn stored(secrets: &Arc<MemorySecrets>) -> RotatingSecret {
        RotatingSecret::new(&SecretSource::Stored(ID.into()), secrets.clone(), EVERY)
    }

    #[tokio::test]
    async fn fixed_values_are_both_accepted_and_nothing_else() {
        let source = SecretSource::Fixed {
            current: NEW.into(),
            previous: Some(OLD.into()),
        };
        let secrets = Arc::new(MemorySecrets::default());
        let secret = RotatingSecret::new(&source, secrets.clone(), EVERY);
        assert_eq!(secret.matches(NEW.as_bytes()).await, Ok(true));
        assert_eq!(secret.matches(OLD.as_bytes()).await, Ok(true));
        assert_eq!(secret.matches(b"the-new-origin-secreT").await, Ok(false));
        assert_eq!(secret.matches(b"").await, Ok(false));
        assert_eq!(secrets.reads(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotation_is_learned_on_a_miss_at_most_once_per_interval() {
        let secrets = Arc::new(MemorySecrets::default());
        secrets.put(ID, OLD);
        let secret = stored(&secrets);
        secret.read().await;
        assert_eq!(secrets.reads(), 1);
        assert_eq!(secret.matches(OLD.as_bytes()).await, Ok(true));

        secrets.put(ID, NEW);
        // Within the interval of the last read: the new value is not known yet.
        assert_eq!(secret.matches(NEW.as_bytes()).await, Ok(false));
        assert_eq!(secrets.reads(), 1);
        tokio::time::advance(EVERY).await;
        assert_eq!(secret.matches(NEW.as_bytes()).await, Ok(true));
        assert_eq!(secret.matches(OLD.as_bytes()).await, Ok(true), "previous");
        assert_eq!(secrets.reads(), 2);

        // A flood of wrong values: one read per interval, however many at once.
        tokio::time::advance(EVERY).await;
        let wrong = (0..100).map(|_| secret.matches(b"a-wrong-value-of-some-length"));
        let answers = futures_util::future::join_all(wrong).await;
        assert!(answers.iter().all(|answer| *answer == Ok(false)));
        assert_eq!(secrets.reads(), 3);
        assert_eq!(
            secret.matches(b"another-wrong-value-entirely").await,
            Ok(false)
        );
        assert_eq!(secrets.reads(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_secret_is_unavailable_until_a_read_succeeds() {
        let secrets = Arc::new(MemorySecrets::default());
        let secret = stored(&secrets);
        secret.read().await;
        assert_eq!(secret.matches(OLD.as_bytes()).await, Err(SecretUnavailable));
        assert_eq!(secrets.reads(), 1, "the retry waits");
        secrets.put(ID, "too-short");
        tokio::time::advance(RETRY_FAILED_READ).await;
        assert_eq!(secret.matches(b"too-short").await, Err(SecretUnavailable));
        secrets.put(ID, OLD);
        tokio::time::advance(RETRY_FAILED_READ).await;
        assert_eq!(secret.matches(OLD.as_bytes()).await, Ok(true));
        assert_eq!(
            secret.matches(b"too-short").await,
            Ok(false),
            "never accepted"
        );
        assert_eq!(secrets.reads(), 3);
    }
}
