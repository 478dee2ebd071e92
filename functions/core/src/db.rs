//! The Postgres pool, built the RDS-Proxy-safe way, and the embedded migrations.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

#[derive(Debug, thiserror::Error)]
#[error("database unavailable: {0}")]
pub struct DbError(pub String);

impl From<tokio_postgres::Error> for DbError {
    fn from(error: tokio_postgres::Error) -> Self {
        // The server's message ("canceling statement due to lock timeout", …) is in the source.
        match error.as_db_error() {
            Some(db) => Self(format!("{}: {}", db.code().code(), db.message())),
            None => Self(error.to_string()),
        }
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        Self(error.to_string())
    }
}

/// A small pool: no startup `options` and fast recycling (no round trip on checkout), as
/// RDS Proxy multiplexing wants; statements are sent unnamed (`query_typed`) by the stores.
pub fn pool(database_url: &str, size: usize, timeout: Duration) -> Result<Pool, DbError> {
    let mut pg = tokio_postgres::Config::from_str(database_url)
        .map_err(|e| DbError(format!("DATABASE_URL: {e}")))?;
    pg.connect_timeout(timeout);
    let manager = Manager::from_config(
        pg,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .build()
        .map_err(|e| DbError(e.to_string()))
}

/// Applies `migrations/` (refinery keeps its history table, so this is idempotent).
pub async fn migrate(pool: &Pool) -> Result<(), DbError> {
    let mut conn = pool.get().await?;
    let client: &mut tokio_postgres::Client = &mut conn;
    embedded::migrations::runner()
        .run_async(client)
        .await
        .map(drop)
        .map_err(|e| DbError(format!("migration failed: {e}")))
}
