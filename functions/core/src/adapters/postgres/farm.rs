//! The queue of record's release to the farm and the farm's reads (migrations/V18;
//! sql/functions/release_jobs.sql, farm_state.sql, queue_place.sql).

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::jobs::{global_capacity_lock, PgJobStore};
use crate::adapters::postgres as db;
use crate::domain::job::JobId;
use crate::ports::jobs::{FarmRoom, JobRelease};
use crate::ports::outbox::OutboxEvent;
use crate::ports::StoreError;

pub(super) const RELEASE_SQL: &str =
    "SELECT event_id, job_id, payload, attempts, fair_client FROM release_jobs($1::jsonb)";

/// A job a worker has, as `farm_state`'s `in_flight` spells it (domain/farm.rs `InFlight`):
/// its cost and how long since a worker first reported it.
macro_rules! in_flight_sql {
    ($where:literal) => {
        concat!(
            "(SELECT coalesce(jsonb_agg(jsonb_build_object('cost', f.render_cost, 'elapsed_secs',
               extract(epoch FROM now() - coalesce(f.started_at, f.released_at, f.updated_at))
                   ::float8)), '[]'::jsonb)
               FROM jobs f WHERE f.status IN ('downloading', 'rendering') AND ",
            $where,
            ")"
        )
    };
}
pub(super) use in_flight_sql;

/// The place of the first of these queued jobs to go: released ones first, then fair order.
macro_rules! first_queued_sql {
    ($where:literal) => {
        concat!(
            "(SELECT queue_place(q.id, NULL) FROM jobs q WHERE q.status = 'queued' AND ",
            $where,
            " ORDER BY q.released_at NULLS LAST, q.fair_start, q.id LIMIT 1)"
        )
    };
}
pub(super) use first_queued_sql;

/// release_jobs' argument.
#[derive(Debug, Serialize)]
pub(super) struct ReleaseArgs {
    global_lock: i64,
    lock_timeout_ms: i64,
    render_slots: i64,
    release_ahead: i64,
    event_lease_ms: i64,
}

impl ReleaseArgs {
    pub(super) fn new(store: &PgJobStore, room: FarmRoom) -> Self {
        Self {
            global_lock: global_capacity_lock(),
            lock_timeout_ms: store.lock_timeout_ms,
            render_slots: room.render_slots,
            release_ahead: room.release_ahead,
            event_lease_ms: store.event_lease_ms,
        }
    }

    pub(super) fn to_json(&self) -> Result<serde_json::Value, StoreError> {
        serde_json::to_value(self)
            .map_err(|e| StoreError::new(format!("release_jobs' argument: {e}")))
    }
}

/// release_jobs' rows: the released jobs' events, leased to the caller.
pub(super) fn released_events(rows: &[Row]) -> Vec<OutboxEvent> {
    rows.iter()
        .map(|row| OutboxEvent {
            id: row.get(0),
            job_id: JobId::from(row.get::<_, uuid::Uuid>(1)),
            event_type: crate::ports::outbox::RENDER_JOB_CREATED.to_owned(),
            payload: row.get(2),
            attempts: row.get(3),
            group: row.get(4),
        })
        .collect()
}

/// A jsonb column as `T` (a shape this code reads from its own SQL functions).
pub(super) fn from_json<T: DeserializeOwned>(
    row: &Row,
    column: usize,
) -> Result<Option<T>, StoreError> {
    row.get::<_, Option<serde_json::Value>>(column)
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| StoreError::unknown(format!("an estimate's input did not read: {e}")))
}

#[async_trait]
impl JobRelease for PgJobStore {
    async fn release(&self, room: FarmRoom) -> Result<Vec<OutboxEvent>, StoreError> {
        let args = ReleaseArgs::new(self, room).to_json()?;
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(RELEASE_SQL, &[(&args, Type::JSONB)])
            .await?;
        Ok(released_events(&rows))
    }
}
