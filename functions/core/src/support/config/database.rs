//! Postgres: the connection, its pool and bounds, and the migrations' bounds.

use std::path::PathBuf;
use std::time::Duration;

use super::{ensure, resolve_sslmode, split_sslmode, ConfigError, DbSslMode, Env};

#[derive(Debug, Clone)]
pub struct Database {
    /// `DATABASE_URL`; empty counts as unset.
    pub url: String,
    /// Connections per instance (`DB_POOL_SIZE`): 1–2 behind RDS Proxy on Lambda, more for the
    /// dev server.
    pub pool_size: usize,
    /// Bound on connecting and on each statement (`DB_TIMEOUT_MS`), below the function's
    /// timeout.
    pub timeout: Duration,
    /// TLS to Postgres: `DB_SSLMODE` or `DATABASE_URL`'s `sslmode` (which must agree when both
    /// are set), else the caller's default (`resolve_sslmode`).
    pub sslmode: DbSslMode,
    /// `DB_SSLROOTCERT`: a PEM file of CAs trusted besides the compiled-in AWS ones
    /// (verify-full only).
    pub sslrootcert: Option<PathBuf>,
    /// Postgres' `lock_timeout` for the migrations (`MIGRATE_LOCK_TIMEOUT`): a migration waiting
    /// behind a long transaction fails instead of holding the deploy (and the table) forever.
    pub migrate_lock_timeout: Duration,
    /// `migrate` gives a run up after this (`MIGRATE_DEADLINE`), and earlier if the invocation
    /// would otherwise end before CloudFormation is answered.
    pub migrate_deadline: Duration,
}

impl Database {
    pub(super) fn read(env: &Env, default_sslmode: DbSslMode) -> Result<Self, ConfigError> {
        // `sam local` passes the template's declared-but-empty `DATABASE_URL`.
        let url = env
            .non_empty("DATABASE_URL")
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/osurender".into());
        let sslmode = resolve_sslmode(
            env.get("DB_SSLMODE").as_deref(),
            &split_sslmode(&url).1,
            default_sslmode,
        )?;
        // Zero is Postgres' "wait forever" for lock_timeout, and no time at all for a run.
        let at_least_1s = |bound: &Duration| !bound.is_zero();
        let migrate_lock_timeout = env.secs_where(
            "MIGRATE_LOCK_TIMEOUT",
            10,
            at_least_1s,
            "must be at least 1s",
        )?;
        let migrate_deadline =
            env.secs_where("MIGRATE_DEADLINE", 40, at_least_1s, "must be at least 1s")?;
        let sslrootcert = env.non_empty("DB_SSLROOTCERT").map(PathBuf::from);
        // libpq would verify the chain under `require` then; here it would do nothing.
        ensure(
            sslrootcert.is_none() || sslmode == DbSslMode::VerifyFull,
            "DB_SSLROOTCERT",
            "is only read with verify-full",
        )?;
        Ok(Self {
            url,
            pool_size: env.parse("DB_POOL_SIZE", 2)?,
            timeout: env.millis("DB_TIMEOUT_MS", 5_000)?,
            sslmode,
            sslrootcert,
            migrate_lock_timeout,
            migrate_deadline,
        })
    }
}
