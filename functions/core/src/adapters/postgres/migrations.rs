//! The schema migrations (`migrations/`, embedded at build time), the SQL functions
//! (`sql/functions/`, embedded too: [`FUNCTIONS`]) and how they are applied so that a deploy, a
//! rollback and two runners at once are all safe:
//!
//! - one runner at a time: a session advisory lock, waited for at most a bounded time;
//! - refinery's history table is read and checked here first, because refinery itself panics on
//!   a row it cannot read (a NULL, an `applied_on` that is not RFC 3339, a checksum that is not
//!   a number) — and a panic in the `migrate` function would leave CloudFormation unanswered;
//! - a schema that has migrations this code does not know (a rollback, or an older release
//!   deployed again) is left as it is: the migrations are forward-only and expand-first, so the
//!   older code runs on the newer schema;
//! - the pending migrations run in one transaction (refinery's grouped mode, on a transaction
//!   this runner opens), and then, in that same transaction, every SQL function's file with its
//!   `CREATE OR REPLACE FUNCTION`: the versioned migrations carry the DDL, each function's
//!   current body lives in one file only. A failure leaves the schema as it was, and the next
//!   run retries it all. The functions are applied on every run that applies (also when no
//!   migration is pending), so an existing database gets a changed function's body; an
//!   unchanged one is replaced by itself;
//! - every statement of a run waits for a table's lock at most `lock_timeout`: behind a long
//!   transaction, a migration fails (and is retried by the next run) rather than waiting
//!   forever while the requests queued behind its own lock wait with it.

use std::time::Duration;

use deadpool_postgres::Pool;
use refinery::Migration;
use refinery_core::traits::r#async::{AsyncQuery, AsyncTransaction};
use refinery_core::AsyncMigrate;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Transaction};

use crate::adapters::postgres::{self as db};
use crate::domain::client::advisory_lock_id;
use crate::ports::StoreError;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// One SQL function's source: `sql/functions/<file>.sql`, a `CREATE OR REPLACE FUNCTION` with
/// its explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlFunction {
    /// The file's name without `.sql`: the function's name (`admit_job`), or that name and a
    /// suffix for a second function of that name (`admit_job_v4`).
    pub file: &'static str,
    pub sql: &'static str,
}

macro_rules! sql_function {
    ($file:literal) => {
        SqlFunction {
            file: $file,
            sql: include_str!(concat!("../../../../../sql/functions/", $file, ".sql")),
        }
    };
}

/// Every SQL function of the schema, in the order they are applied: a function before those
/// that call it. A new file in `sql/functions/` is added here too (a test in
/// functions/migrate/tests/sql_functions.rs checks both ways).
pub const FUNCTIONS: &[SqlFunction] = &[
    sql_function!("job_callback_body"),
    sql_function!("count_job_changes"),
    sql_function!("reset_job_counts"),
    sql_function!("job_callback_client"),
    sql_function!("callback_backlog_full"),
    sql_function!("queue_job_callback"),
    sql_function!("count_job_event"),
    sql_function!("queue_job_push"),
    sql_function!("resolve_admission"),
    sql_function!("release_jobs"),
    sql_function!("farm_state"),
    sql_function!("queue_place"),
    sql_function!("admit_job_v4"),
    sql_function!("admit_job"),
];

/// refinery's history table (its default name).
const HISTORY_TABLE: &str = "refinery_schema_history";
/// How long a runner waits for another's lock: far beyond a run of these migrations (well
/// under a second), and short enough for `migrate` to answer CloudFormation within a minute.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// How often a runner that waits for the lock asks again.
const LOCK_POLL: Duration = Duration::from_millis(250);

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// These migrations (`V3__skins`), oldest first; none when the schema was up to date.
    Applied(Vec<String>),
    /// The database did not exist: it was created, and these migrations applied.
    CreatedAndApplied(Vec<String>),
    /// The schema has migrations this code does not know (named here): nothing was changed.
    SchemaNewer(Vec<String>),
}

impl Outcome {
    /// The migrations this run applied.
    pub fn applied(&self) -> &[String] {
        match self {
            Self::Applied(applied) | Self::CreatedAndApplied(applied) => applied,
            Self::SchemaNewer(_) => &[],
        }
    }

    /// One line for logs and CloudFormation's `Reason`.
    pub fn summary(&self) -> String {
        match self {
            Self::Applied(applied) if applied.is_empty() => "the schema is up to date".into(),
            Self::Applied(applied) => format!(
                "{} migration(s) applied: {}",
                applied.len(),
                applied.join(", ")
            ),
            Self::CreatedAndApplied(applied) => format!(
                "database created; {}",
                Self::Applied(applied.clone()).summary()
            ),
            Self::SchemaNewer(unknown) => format!(
                "the schema is newer than this code (it has {}): nothing applied",
                unknown.join(", ")
            ),
        }
    }
}

/// Applies the pending migrations on a connection of `pool` (the dev server's start).
pub async fn migrate(pool: &Pool, lock_timeout: Duration) -> Result<Outcome, StoreError> {
    let mut conn = pool.get().await?;
    apply(&mut conn, lock_timeout).await
}

/// Connects with `pg` and applies the pending migrations; when the database does not exist,
/// creates it first (connected to the `postgres` database with the same credentials) or says
/// exactly what to run.
///
/// With `app_role`, the application role is then made or brought up to date (`grant_app_role`).
pub async fn connect_and_apply(
    pg: tokio_postgres::Config,
    tls: &db::Tls,
    timeout: Duration,
    lock_timeout: Duration,
    app_role: Option<&AppRole>,
) -> Result<Outcome, StoreError> {
    let pool = db::pool(pg.clone(), tls, 1, timeout)?;
    let (mut conn, created) = match pool.get().await {
        Ok(conn) => (conn, false),
        Err(error) if names_missing_database(&error) => {
            create_database(&pg, tls, timeout).await?;
            (pool.get().await.map_err(connecting)?, true)
        }
        Err(error) => return Err(connecting(error)),
    };
    let outcome = match apply(&mut conn, lock_timeout).await? {
        Outcome::Applied(applied) if created => Outcome::CreatedAndApplied(applied),
        outcome => outcome,
    };
    // A schema newer than this code is a newer release's: its migrate made the role.
    if let (Some(role), false) = (app_role, matches!(outcome, Outcome::SchemaNewer(_))) {
        grant_app_role(&conn, role).await?;
    }
    Ok(outcome)
}

/// The login the functions connect as (`DB_APP_SECRET_ARN`): it may read and change rows and
/// call the SQL functions, never change the schema, so stolen function credentials cannot.
pub struct AppRole {
    pub username: String,
    pub password: String,
}

/// What the application role may do, in this database (`%1$I`) as this role (`%2$I`).
const APP_ROLE_GRANTS: &str = "\
GRANT CONNECT ON DATABASE %1$I TO %2$I;
GRANT USAGE ON SCHEMA public TO %2$I;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO %2$I;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO %2$I;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO %2$I;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %2$I;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO %2$I;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO %2$I;";

/// Makes the application role, or sets its password to the secret's (a rotation), and grants
/// it `APP_ROLE_GRANTS` on everything the migrations made; idempotent, so every migrate run
/// (each deploy that changes `MigrateVersion`, or one by hand) makes it so. It runs after the
/// migrations' transaction, and a second runner's role made meanwhile is altered instead. The
/// password goes out hashed (a SCRAM-SHA-256 verifier), never in clear text in a statement.
pub async fn grant_app_role(client: &Client, role: &AppRole) -> Result<(), StoreError> {
    let failed = |e: tokio_postgres::Error| {
        StoreError::new(format!(
            "making the application role `{}` failed: {}",
            role.username,
            db::chain(&e)
        ))
    };
    let verifier = postgres_protocol::password::scram_sha_256(role.password.as_bytes());
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)",
            &[&role.username],
        )
        .await
        .map_err(failed)?
        .get(0);
    match role_statements(client, role, &verifier, exists).await {
        // Another runner created it since the look: set its password instead.
        Err(error) if !exists && error.code() == Some(&SqlState::DUPLICATE_OBJECT) => {
            role_statements(client, role, &verifier, true).await
        }
        done => done,
    }
    .map_err(failed)
}

/// `CREATE` (or, if it `exists`, `ALTER`) the role with `verifier`, then the grants.
async fn role_statements(
    client: &Client,
    role: &AppRole,
    verifier: &str,
    exists: bool,
) -> Result<(), tokio_postgres::Error> {
    let verb = if exists { "ALTER" } else { "CREATE" };
    // format() quotes the names (%I) and the verifier (%L): nothing of the secret is spliced.
    let template = format!("{verb} ROLE %2$I WITH LOGIN PASSWORD %3$L;\n{APP_ROLE_GRANTS}");
    let statements: String = client
        .query_one(
            "SELECT format($1, current_database(), $2::text, $3::text)",
            &[&template, &role.username, &verifier],
        )
        .await?
        .get(0);
    client.batch_execute(&statements).await
}

fn connecting(error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::new(format!("connecting: {}", db::chain(&error)))
}

fn names_missing_database(error: &deadpool_postgres::PoolError) -> bool {
    matches!(error, deadpool_postgres::PoolError::Backend(e)
        if e.code() == Some(&SqlState::INVALID_CATALOG_NAME))
}

async fn create_database(
    pg: &tokio_postgres::Config,
    tls: &db::Tls,
    timeout: Duration,
) -> Result<(), StoreError> {
    let name = pg.get_dbname().unwrap_or_default().to_owned();
    let quoted = |identifier: &str| format!("\"{}\"", identifier.replace('"', "\"\""));
    // Created by this user it is theirs; created by someone else for them, it must be made
    // theirs, since from PostgreSQL 15 only a database's owner may create in its `public`.
    let statement = format!("CREATE DATABASE {}", quoted(&name));
    let for_user = match pg.get_user() {
        Some(user) => format!("{statement} OWNER {}", quoted(user)),
        None => statement.clone(),
    };
    let cannot = |error: StoreError| {
        StoreError::new(format!(
            "database `{name}` does not exist and could not be created ({}); \
             run `{for_user}` as a user with CREATEDB",
            error.message()
        ))
    };
    let mut maintenance = pg.clone();
    maintenance.dbname("postgres");
    let pool = db::pool(maintenance, tls, 1, timeout).map_err(cannot)?;
    let conn = pool.get().await.map_err(|e| cannot(e.into()))?;
    match conn.batch_execute(&statement).await {
        Ok(()) => {
            tracing::info!(database = name, "database created");
            Ok(())
        }
        // Another runner created it meanwhile.
        Err(error) if error.code() == Some(&SqlState::DUPLICATE_DATABASE) => Ok(()),
        Err(error) => Err(cannot(error.into())),
    }
}

/// Applies the pending migrations under the migration lock, after checking the history table;
/// each statement waits for a lock at most `lock_timeout`.
pub async fn apply(client: &mut Client, lock_timeout: Duration) -> Result<Outcome, StoreError> {
    let lock = advisory_lock_id("osurender:migrations");
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        let row = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&lock])
            .await?;
        if row.try_get::<_, bool>(0)? {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::new(format!(
                "another run has held the migration lock for over {} s; try again when it is done",
                LOCK_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(LOCK_POLL).await;
    }
    // A session setting (refinery opens the transaction), reset below: the dev server's
    // connection goes back to its pool.
    let outcome = match client
        .batch_execute(&format!("SET lock_timeout = {}", lock_timeout.as_millis()))
        .await
    {
        Ok(()) => apply_locked(client, lock_timeout).await,
        Err(error) => Err(error.into()),
    };
    // Also on failure; a connection that is gone has released the lock with its session.
    if let Err(error) = client
        .batch_execute(&format!(
            "RESET lock_timeout; SELECT pg_advisory_unlock({lock})"
        ))
        .await
    {
        tracing::warn!(%error, "releasing the migration lock failed");
    }
    outcome
}

async fn apply_locked(client: &mut Client, lock_timeout: Duration) -> Result<Outcome, StoreError> {
    let runner = embedded::migrations::runner();
    let known = runner.get_migrations();
    let mut unknown = Vec::new();
    for row in read_history(client).await? {
        match known.iter().find(|m| i64::from(m.version()) == row.version) {
            None => unknown.push(format!("V{}__{}", row.version, row.name)),
            Some(m) if m.name() != row.name || m.checksum() != row.checksum => {
                return Err(StoreError::new(format!(
                    "migration V{} was applied as `{}` (checksum {}), but this code's is `{}` \
                     (checksum {}): an applied migration was edited",
                    row.version,
                    row.name,
                    row.checksum,
                    m.name(),
                    m.checksum()
                )));
            }
            Some(_) => {}
        }
    }
    if !unknown.is_empty() {
        return Ok(Outcome::SchemaNewer(unknown));
    }
    let failed = |what: String, why: String| {
        let hint = if why.contains(SqlState::LOCK_NOT_AVAILABLE.code()) {
            format!(
                " (a lock stayed held by another transaction for over {} ms, \
                 MIGRATE_LOCK_TIMEOUT; run again once it has ended)",
                lock_timeout.as_millis()
            )
        } else {
            String::new()
        };
        StoreError::new(format!("{what} failed, nothing applied: {why}{hint}"))
    };
    // The history table first, committed on its own, as refinery's driver does it: a run that
    // fails below leaves it (empty) as before.
    client
        .batch_execute(&<Client as AsyncMigrate>::assert_migrations_table_query(
            HISTORY_TABLE,
        ))
        .await
        .map_err(|e| failed("migration".into(), db::chain(&e)))?;
    // Dropped without a commit (an error below), it rolls back.
    let transaction = client
        .transaction()
        .await
        .map_err(|e| failed("migration".into(), db::chain(&e)))?;
    let report = runner
        .set_grouped(true)
        .run_async(&mut InTransaction(&transaction))
        .await
        .map_err(|e| failed("migration".into(), db::chain(&e)))?;
    for function in FUNCTIONS {
        transaction.batch_execute(function.sql).await.map_err(|e| {
            failed(
                format!("sql/functions/{}.sql", function.file),
                db::chain(&e),
            )
        })?;
    }
    transaction
        .commit()
        .await
        .map_err(|e| failed("migration".into(), db::chain(&e)))?;
    Ok(Outcome::Applied(
        report
            .applied_migrations()
            .iter()
            .map(ToString::to_string)
            .collect(),
    ))
}

/// refinery's statements on a transaction the runner opened and commits, so that the SQL
/// functions are applied in it too (refinery's own driver commits a transaction per call).
struct InTransaction<'a, 'c>(&'a Transaction<'c>);

impl AsyncTransaction for InTransaction<'_, '_> {
    type Error = tokio_postgres::Error;

    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        let mut count = 0;
        for query in queries {
            self.0.batch_execute(query).await?;
            count += 1;
        }
        Ok(count)
    }
}

impl AsyncQuery<Vec<Migration>> for InTransaction<'_, '_> {
    /// As refinery's driver reads its history rows (which `read_history` checked already).
    async fn query<'a>(&'a mut self, query: &'a str) -> Result<Vec<Migration>, Self::Error> {
        let rows = self.0.query(query, &[]).await?;
        let mut applied = Vec::with_capacity(rows.len());
        for row in rows {
            let applied_on: String = row.try_get(2)?;
            let checksum: String = row.try_get(3)?;
            applied.push(Migration::applied(
                row.try_get(0)?,
                row.try_get(1)?,
                // Only shown, never compared; read_history refused a row that is not RFC 3339.
                OffsetDateTime::parse(&applied_on, &Rfc3339).unwrap_or(OffsetDateTime::UNIX_EPOCH),
                checksum.parse().unwrap_or_default(),
            ));
        }
        Ok(applied)
    }
}

impl AsyncMigrate for InTransaction<'_, '_> {}

/// One row of refinery's history, as refinery will read it.
#[derive(Debug)]
struct HistoryRow {
    version: i64,
    name: String,
    checksum: u64,
}

/// The history rows, each checked to be readable by refinery without a panic: version an
/// `integer`, the other columns text, not NULL, `applied_on` RFC 3339, `checksum` a u64.
/// No table yet: no rows.
async fn read_history(client: &Client) -> Result<Vec<HistoryRow>, StoreError> {
    let exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY_TABLE])
        .await?;
    if !exists.try_get::<_, bool>(0)? {
        return Ok(Vec::new());
    }
    let rows = client
        .query(
            &format!(
                "SELECT version::text, name::text, applied_on::text, checksum::text, \
                        concat_ws(',', pg_typeof(version), pg_typeof(name), \
                                  pg_typeof(applied_on), pg_typeof(checksum)) \
                 FROM {HISTORY_TABLE} ORDER BY version"
            ),
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let text = |i: usize| row.try_get::<_, Option<String>>(i).ok().flatten();
            let version = text(0).unwrap_or_default();
            let malformed = |what: &str| {
                StoreError::new(format!(
                    "{HISTORY_TABLE} row with version `{version}` is malformed ({what}); \
                     refinery cannot read it: repair or delete the row"
                ))
            };
            let types = text(4).unwrap_or_default();
            let text_type = |t: &str| t == "character varying" || t == "text";
            match types.split(',').collect::<Vec<_>>().as_slice() {
                ["integer", name, applied_on, checksum]
                    if text_type(name) && text_type(applied_on) && text_type(checksum) => {}
                _ => return Err(malformed(&format!("column types {types}"))),
            }
            let name = text(1).ok_or_else(|| malformed("name is NULL"))?;
            let applied_on = text(2).ok_or_else(|| malformed("applied_on is NULL"))?;
            OffsetDateTime::parse(&applied_on, &Rfc3339)
                .map_err(|_| malformed(&format!("applied_on `{applied_on}` is not RFC 3339")))?;
            let checksum = text(3)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| malformed("checksum is not an unsigned 64-bit number"))?;
            Ok(HistoryRow {
                version: version.parse().map_err(|_| malformed("version"))?,
                name,
                checksum,
            })
        })
        .collect()
}
