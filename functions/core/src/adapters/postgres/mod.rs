//! The Postgres pool, built the RDS-Proxy-safe way (the migrations are in `migrations.rs`).

pub mod callbacks;
pub mod credentials;
pub mod farm;
pub mod idempotency;
pub mod jobs;
pub mod keys;
pub mod migrations;
pub mod outbox;
pub mod policy;
pub mod pushes;
pub mod skins;
pub mod tls;

use std::str::FromStr;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{
    ConfigConnectImpl, Connect, Hook, HookError, Manager, ManagerConfig, Metrics, Object, Pool,
    RecyclingMethod, Runtime,
};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row};

use crate::domain::deadline;
use crate::ports::health::Dependency;
use crate::ports::StoreError;
use crate::support::config;
use credentials::{RotatingConnect, RotatingCredentials};
pub use tls::Tls;

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        // The server's message ("canceling statement due to lock timeout", …) is in the source.
        match error.as_db_error() {
            Some(db) => Self::new(format!("{}: {}", db.code().code(), db.message())),
            // Closed, I/O, or an answer that could not be read: the statement may have run.
            None => Self::unknown(error.to_string()),
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    /// Checking a connection out sends no statement. Why a connection failed is in the
    /// sources ("error performing TLS handshake": "invalid peer certificate: UnknownIssuer").
    fn from(error: deadpool_postgres::PoolError) -> Self {
        Self::new(chain(&error))
    }
}

/// An error and its sources, `: `-separated (pool and refinery errors keep the cause there).
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // The server's own words ("relation \"jobs\" already exists"), with their SQLSTATE.
        let server = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error);
        if let Some(db) = server {
            // The last word: what lies below repeats it.
            return format!("{text}: {}: {}", db.code().code(), db.message());
        }
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    match tls_hint(error.source()) {
        Some(hint) => format!("{text}; {hint}"),
        None => text,
    }
}

/// What to set when a connection failed TLS as `DB_SSLMODE` asked for it (`verify-full` by
/// default), from an error's causes (`source`): rustls' `UnknownIssuer` alone names no setting,
/// and a local server is the usual case. tokio-postgres keeps the handshake's `io::Error` as a cause, and that error holds
/// rustls' own (`get_ref`, which `source` skips).
fn tls_hint(mut source: Option<&(dyn std::error::Error + 'static)>) -> Option<&'static str> {
    use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
    while let Some(cause) = source {
        let rustls_error = cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match rustls_error {
            Some(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => {
                return Some(
                    "the server's certificate does not name the host connected to: connect by a \
                     name it carries, or set DB_SSLMODE=require (TLS without verification), or \
                     DB_SSLMODE=disable for a local server",
                )
            }
            Some(rustls::Error::InvalidCertificate(_)) => {
                return Some(
                    "the server's certificate could not be verified (DB_SSLMODE=verify-full, \
                     the default, trusts the AWS roots): for a private CA set DB_SSLROOTCERT to \
                     its certificate (PEM); for a local server set DB_SSLMODE=disable (or \
                     require: TLS without verification)",
                )
            }
            _ => {}
        }
        if cause.to_string() == NO_TLS {
            return Some(
                "the server does not accept TLS, which DB_SSLMODE (verify-full by default) \
                 requires: for a local server set DB_SSLMODE=disable",
            );
        }
        source = cause.source();
    }
    None
}

/// tokio-postgres' error when the server refuses TLS and the mode requires it.
const NO_TLS: &str = "server does not support TLS";

/// `DATABASE_URL`'s connection settings but its `sslmode`, which `Database::sslmode` has
/// already read (and which tokio-postgres could not: it knows no `verify-full`).
pub fn parse_url(database_url: &str) -> Result<tokio_postgres::Config, StoreError> {
    let (settings, _) = config::split_sslmode(database_url);
    tokio_postgres::Config::from_str(&settings)
        .map_err(|e| StoreError::new(format!("DATABASE_URL: {e}")))
}

/// The longest a pooled connection is reused after its last checkout. RDS Proxy closes a
/// client connection idle for its `IdleClientTimeout` (30 minutes by default), and a warm
/// function may learn of that only from its next statement's failure (the close arrived
/// while it was frozen): a connection idle longer than this is dropped at checkout and a
/// new one made instead, well inside the proxy's timeout.
pub const MAX_IDLE: Duration = Duration::from_secs(20 * 60);

/// The `pre_recycle` check: a connection idle past `MAX_IDLE` is not handed out again.
fn fresh_enough(metrics: &Metrics) -> Result<(), HookError> {
    if metrics.last_used() > MAX_IDLE {
        return Err(HookError::message("idle past MAX_IDLE: closed, not reused"));
    }
    Ok(())
}

/// A small pool: no startup `options` and fast recycling (no round trip on checkout), as
/// RDS Proxy multiplexing wants; statements are sent unnamed (`query_typed`) by the stores.
/// Its connections are made as `tls` says (`Database::sslmode`), whatever `pg`'s `sslmode` was.
pub fn pool(
    pg: tokio_postgres::Config,
    tls: &Tls,
    size: usize,
    timeout: Duration,
) -> Result<Pool, StoreError> {
    rotating_pool(pg, tls, size, timeout, None)
}

/// `pool`, whose new connections use `credentials` (not `pg`'s user and password) when given:
/// re-read from the database secret when the server refuses them (credentials.rs). Making a
/// connection, re-read and retries included, stays within the pool's create timeout.
pub fn rotating_pool(
    mut pg: tokio_postgres::Config,
    tls: &Tls,
    size: usize,
    timeout: Duration,
    credentials: Option<RotatingCredentials>,
) -> Result<Pool, StoreError> {
    pg.connect_timeout(timeout);
    pg.ssl_mode(tls.ssl_mode());
    let recycling = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match (tls.connector(), credentials) {
        (Some(connector), None) => Manager::from_config(pg, connector.clone(), recycling),
        (None, None) => Manager::from_config(pg, NoTls, recycling),
        (connector, Some(credentials)) => {
            let inner: Box<dyn Connect> = match connector {
                Some(connector) => Box::new(ConfigConnectImpl {
                    tls: connector.clone(),
                }),
                None => Box::new(ConfigConnectImpl { tls: NoTls }),
            };
            let connect = RotatingConnect { inner, credentials };
            Manager::from_connect(pg, connect, recycling)
        }
    };
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .pre_recycle(Hook::sync_fn(|_, metrics| fresh_enough(metrics)))
        .build()
        .map_err(|e| StoreError::new(e.to_string()))
}

/// A pooled connection whose every statement is answered within the pool's timeout
/// (`DB_TIMEOUT_MS`, less if the request's deadline comes sooner) or abandoned. Postgres' own
/// `statement_timeout` would need a startup option or a session `SET`, which RDS Proxy pins;
/// so the bound is kept here, client side. A connection that missed it is in an unknown state
/// (the link may be dead, or the statement still running), so it is closed rather than
/// returned to the pool. Closing does not undo the statement: one the server has received may
/// still commit (Postgres notices a vanished client only when it next writes to it), so a
/// missed answer is an unknown outcome (`Outcome::Unknown`), never a refusal.
pub struct Conn {
    object: Option<Object>,
    limit: Duration,
    timed_out: AtomicBool,
}

/// One statement on a connection of `pool`: its rows.
pub async fn query(
    pool: &Pool,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, StoreError> {
    checkout(pool).await?.query_typed(sql, params).await
}

/// Checks a connection out of `pool` (within its wait and create timeouts).
pub async fn checkout(pool: &Pool) -> Result<Conn, StoreError> {
    let object = deadline::within(pool.get())
        .await
        .map_err(|expired| StoreError::new(expired.to_string()))??;
    let limit = pool.timeouts().wait.unwrap_or(DEFAULT_STATEMENT_LIMIT);
    Ok(Conn {
        object: Some(object),
        limit,
        timed_out: AtomicBool::new(false),
    })
}

/// Only for a pool built without a wait timeout, which `pool` never does.
const DEFAULT_STATEMENT_LIMIT: Duration = Duration::from_secs(5);

impl Conn {
    fn client(&self) -> &Object {
        self.object.as_ref().expect("present until dropped")
    }

    async fn bounded<T>(
        &self,
        statement: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        let limit = deadline::limit(self.limit);
        match tokio::time::timeout(limit, statement).await {
            Ok(result) => result.map_err(StoreError::from),
            Err(_) => {
                self.timed_out.store(true, Ordering::Relaxed);
                Err(StoreError::unknown(format!(
                    "no answer within {} ms",
                    limit.as_millis()
                )))
            }
        }
    }

    pub async fn query_typed(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, StoreError> {
        self.bounded(self.client().query_typed(sql, params)).await
    }

    /// A statement that answers one row (a function's verdict, a count, an insert's id). No row
    /// is a server that did not do what it was asked: unknown, as a lost answer is.
    pub async fn query_row(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        statement: &str,
    ) -> Result<Row, StoreError> {
        let mut rows = self.query_typed(sql, params).await?;
        rows.pop()
            .ok_or_else(|| StoreError::unknown(format!("{statement} returned no row")))
    }

    pub async fn execute_typed(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64, StoreError> {
        self.bounded(self.client().execute_typed(sql, params)).await
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.timed_out.load(Ordering::Relaxed) {
            if let Some(object) = self.object.take() {
                // Detached from the pool and dropped: the connection closes.
                drop(Object::take(object));
            }
        }
    }
}

/// `/health`: a connection from the pool answers `SELECT 1`.
pub struct PostgresCheck {
    pool: Pool,
}

impl PostgresCheck {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }
}

#[async_trait::async_trait]
impl Dependency for PostgresCheck {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn check(&self) -> Result<(), String> {
        let conn = checkout(&self.pool).await.map_err(|e| e.to_string())?;
        conn.query_typed("SELECT 1", &[])
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

/// A duration as the whole milliseconds the statements take (saturating).
fn millis(duration: std::time::Duration) -> i64 {
    duration.as_millis().try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn used_ago(idle: Duration) -> Metrics {
        let at = Instant::now()
            .checked_sub(idle)
            .expect("the clock is past `idle`");
        Metrics {
            created: at,
            recycled: Some(at),
            recycle_count: 1,
        }
    }

    #[test]
    fn a_connection_idle_past_the_proxy_timeout_is_not_reused() {
        assert!(fresh_enough(&used_ago(Duration::from_secs(5))).is_ok());
        assert!(fresh_enough(&used_ago(MAX_IDLE - Duration::from_secs(1))).is_ok());
        // A quiet night, or just past RDS Proxy's 30-minute IdleClientTimeout.
        assert!(fresh_enough(&used_ago(MAX_IDLE + Duration::from_secs(1))).is_err());
        assert!(fresh_enough(&used_ago(Duration::from_secs(31 * 60))).is_err());
        // Never checked out since it was made counts from its creation.
        let made = Instant::now()
            .checked_sub(Duration::from_secs(40 * 60))
            .unwrap();
        let never = Metrics {
            created: made,
            recycled: None,
            recycle_count: 0,
        };
        assert!(fresh_enough(&never).is_err());
        assert!(
            MAX_IDLE < Duration::from_secs(30 * 60),
            "inside the proxy's idle timeout"
        );
    }

    /// A connection error as the pool reports it: a failed handshake's `io::Error` as a cause.
    #[derive(Debug)]
    struct Connecting(std::io::Error);

    impl std::fmt::Display for Connecting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("error performing TLS handshake")
        }
    }

    impl std::error::Error for Connecting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn failed_with(error: rustls::Error) -> String {
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, error);
        chain(&Connecting(io))
    }

    #[test]
    fn a_failed_verification_says_what_to_set() {
        let unknown = failed_with(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        assert!(unknown.contains("UnknownIssuer"), "{unknown}");
        for setting in ["DB_SSLROOTCERT", "DB_SSLMODE=disable"] {
            assert!(unknown.contains(setting), "{unknown}");
        }
        let named = failed_with(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName,
        ));
        assert!(named.contains("does not name the host"), "{named}");
        assert!(named.contains("DB_SSLMODE=disable"), "{named}");
        let other = failed_with(rustls::Error::HandshakeNotComplete);
        assert!(!other.contains("DB_SSLMODE"), "{other}");
    }
}
