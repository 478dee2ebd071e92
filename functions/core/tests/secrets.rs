//! `RotatingSecret` (secrets.rs) on the in-memory secret store, on tokio's paused clock: values
//! from the environment, a rotation learned on a miss once the refresh interval has passed, one
//! read for a flood of misses, and an unreadable secret unavailable until a read succeeds.

use std::sync::Arc;
use std::time::Duration;

use osurender_core::adapters::memory::MemorySecrets;
use osurender_core::support::config::SecretSource;
use osurender_core::usecases::secrets::{RotatingSecret, SecretUnavailable, RETRY_FAILED_READ};

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
