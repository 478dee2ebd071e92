//! Steps 5–9 against Postgres: global capacity, the per-client lock and limit, and the job +
//! outbox insert.

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::types::{ToSql, Type};

use crate::db::DbError;
use crate::domain::{client::advisory_lock_id, ClientKey, JobId, RenderOptions};

/// The caps admission enforces (DESIGN.md invariants 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityLimits {
    pub max_queued: i64,
    pub max_rendering: i64,
    pub max_active_per_client: i64,
}

/// Why there is no room, in the order the checks are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    QueueFull,
    RenderCapacity,
    TooManyActiveJobs,
}

/// Active job counts: globally and of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    pub queued: i64,
    pub rendering: i64,
    pub active_for_client: i64,
}

impl Occupancy {
    pub fn check(&self, limits: &CapacityLimits) -> Result<(), NoRoom> {
        if self.queued >= limits.max_queued {
            Err(NoRoom::QueueFull)
        } else if self.rendering >= limits.max_rendering {
            Err(NoRoom::RenderCapacity)
        } else if self.active_for_client >= limits.max_active_per_client {
            Err(NoRoom::TooManyActiveJobs)
        } else {
            Ok(())
        }
    }
}

/// A job about to be admitted; its replay is already stored under `replay_key`.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: JobId,
    pub client: ClientKey,
    pub options: RenderOptions,
    pub replay_key: String,
}

#[async_trait]
pub trait JobStore: Send + Sync {
    /// An unlocked look at occupancy, to refuse early before anything is stored.
    async fn occupancy(&self, client: &ClientKey) -> Result<Occupancy, DbError>;

    /// Locks, re-checks `limits` and inserts the job with its outbox event, atomically.
    async fn admit(
        &self,
        job: &NewJob,
        limits: &CapacityLimits,
    ) -> Result<Result<(), NoRoom>, DbError>;
}

pub struct PgJobStore {
    pool: Pool,
    lock_timeout_ms: i64,
}

impl PgJobStore {
    pub fn new(pool: Pool, lock_timeout: std::time::Duration) -> Self {
        Self {
            pool,
            lock_timeout_ms: lock_timeout.as_millis().try_into().unwrap_or(i64::MAX),
        }
    }
}

/// Serializes the global capacity re-check of all admissions (held for one insert).
fn global_capacity_lock() -> i64 {
    advisory_lock_id("osurender:global-capacity")
}

const OCCUPANCY_SQL: &str = "\
SELECT count(*) FILTER (WHERE status = 'queued'),
       count(*) FILTER (WHERE status IN ('downloading', 'rendering')),
       count(*) FILTER (WHERE client_ip = $1)
  FROM jobs
 WHERE status IN ('queued', 'downloading', 'rendering')";

const ADMIT_SQL: &str = "SELECT admit_job($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

#[async_trait]
impl JobStore for PgJobStore {
    async fn occupancy(&self, client: &ClientKey) -> Result<Occupancy, DbError> {
        let conn = self.pool.get().await?;
        let row = conn
            .query_typed(OCCUPANCY_SQL, &[(&client.as_str(), Type::TEXT)])
            .await?
            .pop()
            .ok_or_else(|| DbError("occupancy returned no row".into()))?;
        Ok(Occupancy {
            queued: row.get(0),
            rendering: row.get(1),
            active_for_client: row.get(2),
        })
    }

    async fn admit(
        &self,
        job: &NewJob,
        limits: &CapacityLimits,
    ) -> Result<Result<(), NoRoom>, DbError> {
        let config = serde_json::to_value(&job.options).expect("options serialize");
        let id = job.id.as_uuid();
        let client = job.client.as_str();
        let params: [(&(dyn ToSql + Sync), Type); 11] = [
            (&id, Type::UUID),
            (&client, Type::TEXT),
            (&job.client.lock_id(), Type::INT8),
            (&global_capacity_lock(), Type::INT8),
            (&job.options.skin.as_str(), Type::TEXT),
            (&config, Type::JSONB),
            (&job.replay_key, Type::TEXT),
            (&limits.max_queued, Type::INT8),
            (&limits.max_rendering, Type::INT8),
            (&limits.max_active_per_client, Type::INT8),
            (&self.lock_timeout_ms, Type::INT8),
        ];
        let conn = self.pool.get().await?;
        let verdict: String = conn
            .query_typed(ADMIT_SQL, &params)
            .await?
            .pop()
            .ok_or_else(|| DbError("admit_job returned no row".into()))?
            .get(0);
        match verdict.as_str() {
            "admitted" => Ok(Ok(())),
            "queue_full" => Ok(Err(NoRoom::QueueFull)),
            "render_capacity" => Ok(Err(NoRoom::RenderCapacity)),
            "too_many_active_jobs" => Ok(Err(NoRoom::TooManyActiveJobs)),
            other => Err(DbError(format!("admit_job answered `{other}`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_checks_in_admission_order() {
        let limits = CapacityLimits {
            max_queued: 2,
            max_rendering: 1,
            max_active_per_client: 1,
        };
        let at = |queued, rendering, active_for_client| Occupancy {
            queued,
            rendering,
            active_for_client,
        };
        assert_eq!(at(1, 0, 0).check(&limits), Ok(()));
        assert_eq!(at(2, 1, 1).check(&limits), Err(NoRoom::QueueFull));
        assert_eq!(at(1, 1, 1).check(&limits), Err(NoRoom::RenderCapacity));
        assert_eq!(at(1, 0, 1).check(&limits), Err(NoRoom::TooManyActiveJobs));
    }
}
