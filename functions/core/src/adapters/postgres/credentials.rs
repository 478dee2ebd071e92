//! Database credentials that rotate. On AWS the functions read the database secret
//! (`DB_SECRET_ARN`) once, at start; a rotation (an RDS-managed secret rotates every 7 days)
//! then makes every new connection of a warm instance fail authentication (28P01) until Lambda
//! recycles it. So a connection refused for its credentials re-reads the secret and tries what
//! it holds: its current version, the one a rotation is installing, and the one it replaced (a
//! proxy may still be on it), and the first that is accepted becomes the instance's. A flood of
//! refusals costs one read per `REREAD_INTERVAL`, one read at a time: the connections refused
//! meanwhile try what that read found.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Connect;
use tokio_postgres::error::SqlState;

use crate::ports::StoreError;
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading};

/// The secret is read again on a refusal at most this often.
pub const REREAD_INTERVAL: Duration = Duration::from_secs(10);

/// A user name and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: Vec<u8>,
}

/// Never prints the password: connection settings may be logged.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// Where credentials that may have changed are read from (the database secret,
/// adapters/secrets.rs `DatabaseSecret`).
#[async_trait]
pub trait CredentialSource: Send + Sync {
    /// The credentials that may be valid now, the likeliest first.
    async fn candidates(&self) -> Result<Vec<Credentials>, StoreError>;
}

/// The credentials new connections use, shared by the pool's connections (cheap to clone).
#[derive(Clone)]
pub struct RotatingCredentials(Arc<Inner>);

struct Inner {
    current: RwLock<(u64, Credentials)>,
    source: Arc<dyn CredentialSource>,
    /// What the last read of the source found.
    found: Refreshed<Vec<Credentials>>,
}

/// Did the server refuse these credentials (rather than fail otherwise)? `28P01` a wrong
/// password, `28000` a role that cannot log in or does not exist (a rotation that alternates
/// users).
pub fn refused(error: &tokio_postgres::Error) -> bool {
    matches!(
        error.code(),
        Some(code) if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    )
}

impl RotatingCredentials {
    /// `initial` (what the start read), re-read from `source` on a refusal, at most once per
    /// `reread_every`.
    pub fn new(
        initial: Credentials,
        source: Arc<dyn CredentialSource>,
        reread_every: Duration,
    ) -> Self {
        Self(Arc::new(Inner {
            current: RwLock::new((0, initial)),
            source,
            found: Refreshed::new(Refresh {
                ttl: reread_every,
                retry_after_failure: reread_every,
                while_loading: WhileLoading::Wait,
            }),
        }))
    }

    /// The credentials new connections use now.
    pub fn current(&self) -> Credentials {
        self.generation().1
    }

    fn generation(&self) -> (u64, Credentials) {
        self.0
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// `attempt` with the current credentials; if `is_refusal` says the server refused them,
    /// with each candidate a re-read (or the last one, within the interval) found, until one is
    /// accepted, which is kept. Any other failure is returned as it is; with no candidate
    /// accepted, the first refusal.
    pub async fn connect<T, E, F, Fut>(
        &self,
        attempt: F,
        is_refusal: impl Fn(&E) -> bool,
    ) -> Result<T, E>
    where
        F: Fn(Credentials) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (generation, tried) = self.generation();
        let refusal = match attempt(tried.clone()).await {
            Err(error) if is_refusal(&error) => error,
            other => return other,
        };
        for candidate in self.candidates_after(generation, &tried).await {
            match attempt(candidate.clone()).await {
                Ok(connection) => {
                    self.accept(candidate);
                    return Ok(connection);
                }
                Err(error) if is_refusal(&error) => continue,
                Err(error) => return Err(error),
            }
        }
        tracing::warn!(
            user = %tried.user,
            "the database refused the credentials, and no version of the secret was accepted"
        );
        Err(refusal)
    }

    /// What to try after `tried` (of `generation`) was refused: the current credentials if
    /// another connection has changed them meanwhile; else what a read of the source finds,
    /// or, within `reread_every` of the last read, what that one found.
    async fn candidates_after(&self, generation: u64, tried: &Credentials) -> Vec<Credentials> {
        let (now_generation, now) = self.generation();
        if now_generation != generation {
            return vec![now].into_iter().filter(|c| c != tried).collect();
        }
        let found = self
            .0
            .found
            .get(|| async {
                // A failed read finds nothing to try until the next one: the last read's
                // candidates were refused already.
                let found = self.0.source.candidates().await;
                let found = found.inspect_err(|error| {
                    tracing::error!(%error, "could not re-read the database secret");
                });
                Ok::<_, Infallible>(found.unwrap_or_default())
            })
            .await
            .unwrap_or_default();
        let mut candidates: Vec<Credentials> = Vec::new();
        for candidate in found {
            if candidate != *tried && !candidates.contains(&candidate) {
                candidates.push(candidate);
            }
        }
        candidates
    }

    fn accept(&self, accepted: Credentials) {
        let mut current = self
            .0
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if current.1 != accepted {
            tracing::info!(
                user = %accepted.user,
                "database credentials re-read from the secret and accepted: a rotation learned"
            );
            *current = (current.0 + 1, accepted);
        }
    }
}

/// The pool's connector: each new connection made with the current credentials, and re-made
/// with the secret's on a refusal (`RotatingCredentials::connect`).
pub(super) struct RotatingConnect {
    pub(super) inner: Box<dyn Connect>,
    pub(super) credentials: RotatingCredentials,
}

type Connected = (tokio_postgres::Client, tokio::task::JoinHandle<()>);

impl Connect for RotatingConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> Pin<Box<dyn Future<Output = Result<Connected, tokio_postgres::Error>> + Send + '_>> {
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let attempt = |credentials: Credentials| {
                let mut pg = pg_config.clone();
                pg.user(&credentials.user).password(&credentials.password);
                // The inner connector's future owns its copy of the settings.
                self.inner.connect(&pg)
            };
            self.credentials.connect(attempt, refused).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex as StdMutex;

    fn credentials(user: &str, password: &str) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
        }
    }

    /// A secret whose versions the test sets, counting its reads.
    #[derive(Default)]
    struct Secret {
        versions: StdMutex<Vec<Credentials>>,
        reads: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl Secret {
        fn set(&self, versions: &[Credentials]) {
            *self.versions.lock().unwrap() = versions.to_vec();
        }
        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl CredentialSource for Secret {
        async fn candidates(&self) -> Result<Vec<Credentials>, StoreError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::new("Secrets Manager is down"));
            }
            Ok(self.versions.lock().unwrap().clone())
        }
    }

    /// A server that takes `accepted` only; every attempt counted.
    #[derive(Default)]
    struct Server {
        accepted: StdMutex<Option<Credentials>>,
        attempts: AtomicUsize,
    }

    #[derive(Debug, PartialEq)]
    enum Failure {
        Refused,
        Down,
    }

    impl Server {
        fn accept_only(&self, credentials: &Credentials) {
            *self.accepted.lock().unwrap() = Some(credentials.clone());
        }

        async fn attempt(&self, credentials: Credentials) -> Result<String, Failure> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            match &*self.accepted.lock().unwrap() {
                None => Err(Failure::Down),
                Some(accepted) if *accepted == credentials => Ok(credentials.user.clone()),
                Some(_) => Err(Failure::Refused),
            }
        }
    }

    fn is_refusal(failure: &Failure) -> bool {
        *failure == Failure::Refused
    }

    fn setup(interval: Duration) -> (Arc<Secret>, Arc<Server>, RotatingCredentials) {
        let secret = Arc::new(Secret::default());
        let old = credentials("app", "old");
        secret.set(std::slice::from_ref(&old));
        let server = Arc::new(Server::default());
        server.accept_only(&old);
        let rotating = RotatingCredentials::new(old, secret.clone(), interval);
        (secret, server, rotating)
    }

    async fn connect(
        rotating: &RotatingCredentials,
        server: &Arc<Server>,
    ) -> Result<String, Failure> {
        rotating.connect(|c| server.attempt(c), is_refusal).await
    }

    #[tokio::test]
    async fn a_rotation_is_learned_from_the_secret_on_the_first_refusal() {
        let (secret, server, rotating) = setup(REREAD_INTERVAL);
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(secret.reads(), 0, "accepted: nothing re-read");

        let new = credentials("app", "new");
        server.accept_only(&new);
        secret.set(&[new.clone(), credentials("app", "old")]);
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(secret.reads(), 1);
        assert_eq!(rotating.current(), new);
        // Learned: the next connection goes straight in.
        let attempts = server.attempts.load(Ordering::SeqCst);
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(server.attempts.load(Ordering::SeqCst), attempts + 1);
        assert_eq!(secret.reads(), 1);
    }

    /// Mid-rotation (the password changed, the secret's current version not yet moved), the
    /// pending version is accepted; a proxy still on the previous one, that one.
    #[tokio::test]
    async fn each_version_of_the_secret_is_tried_in_order() {
        let (secret, server, rotating) = setup(Duration::ZERO);
        let (old, pending) = (credentials("app", "old"), credentials("app", "pending"));
        server.accept_only(&pending);
        secret.set(&[old.clone(), pending.clone()]);
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(rotating.current(), pending);

        // Another user too (a rotation that alternates users).
        let clone = credentials("app_clone", "x");
        server.accept_only(&old);
        secret.set(&[clone.clone(), old.clone(), pending.clone()]);
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(rotating.current(), old);
    }

    /// Twenty connections refused at once: one read, and each tries what it found.
    #[tokio::test]
    async fn concurrent_refusals_share_one_read() {
        let (secret, server, rotating) = setup(REREAD_INTERVAL);
        let new = credentials("app", "new");
        server.accept_only(&new);
        secret.set(std::slice::from_ref(&new));
        let connections = (0..20).map(|_| {
            let (rotating, server) = (rotating.clone(), server.clone());
            tokio::spawn(async move { connect(&rotating, &server).await })
        });
        for connection in connections {
            assert_eq!(connection.await.unwrap(), Ok("app".into()));
        }
        assert_eq!(secret.reads(), 1);
    }

    /// Within the interval no second read, whatever is refused; after it, one more.
    #[tokio::test(start_paused = true)]
    async fn refusals_read_the_secret_at_most_once_per_interval() {
        let (secret, server, rotating) = setup(REREAD_INTERVAL);
        let wrong = credentials("app", "unknown to the secret");
        server.accept_only(&wrong);
        for _ in 0..5 {
            assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        }
        assert_eq!(secret.reads(), 1);
        tokio::time::advance(REREAD_INTERVAL).await;
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        assert_eq!(secret.reads(), 2);
        // The secret now has them: learned at the next read, not before.
        secret.set(std::slice::from_ref(&wrong));
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        tokio::time::advance(REREAD_INTERVAL).await;
        assert_eq!(connect(&rotating, &server).await, Ok("app".into()));
        assert_eq!(secret.reads(), 3);
    }

    /// A failure that is no refusal re-reads nothing; a read that fails leaves the refusal.
    #[tokio::test]
    async fn other_failures_are_answered_as_they_are() {
        let (secret, server, rotating) = setup(Duration::ZERO);
        *server.accepted.lock().unwrap() = None;
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Down));
        assert_eq!(secret.reads(), 0);
        server.accept_only(&credentials("app", "new"));
        secret.down.store(true, Ordering::SeqCst);
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        assert_eq!(secret.reads(), 1);
        assert_eq!(rotating.current(), credentials("app", "old"));
    }

    /// A re-read that fails finds nothing to try: the candidates of the read before it are not
    /// tried again until the next read.
    #[tokio::test(start_paused = true)]
    async fn a_failed_reread_tries_nothing_until_the_next() {
        let (secret, server, rotating) = setup(REREAD_INTERVAL);
        let (old, new) = (credentials("app", "old"), credentials("app", "new"));
        secret.set(&[old.clone(), new.clone()]);
        server.accept_only(&credentials("app", "unknown to the secret"));
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        let attempts = server.attempts.load(Ordering::SeqCst);
        assert_eq!(
            (secret.reads(), attempts),
            (1, 2),
            "old, then new from the read"
        );

        tokio::time::advance(REREAD_INTERVAL).await;
        secret.down.store(true, Ordering::SeqCst);
        assert_eq!(connect(&rotating, &server).await, Err(Failure::Refused));
        assert_eq!(secret.reads(), 2);
        assert_eq!(
            server.attempts.load(Ordering::SeqCst),
            attempts + 1,
            "only the current credentials: the failed read found nothing to try"
        );
    }

    #[test]
    fn the_password_is_never_printed() {
        let debug = format!("{:?}", credentials("app", "hunter2-secret"));
        assert!(
            debug.contains("app") && !debug.contains("hunter2"),
            "{debug}"
        );
    }
}
