//! The queue of record's release to the farm and the farm's reads (sql/functions/:
//! release_jobs.sql, farm_state.sql, queue_place.sql).

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_postgres::Row;

use crate::domain::client::advisory_lock_id;
use crate::domain::job::JobId;
use crate::ports::jobs::FarmRoom;
use crate::ports::outbox::OutboxEvent;
use crate::ports::StoreError;

/// Serializes the global capacity re-check of all admissions (held for one insert) and the
/// farm's releases.
pub(super) fn global_capacity_lock() -> i64 {
    advisory_lock_id("osurender:global-capacity")
}

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

/// release_jobs' argument.
#[derive(Debug, Serialize)]
pub(super) struct ReleaseArgs {
    global_lock: i64,
    lock_timeout_ms: i64,
    render_slots: i64,
    release_ahead: i64,
    event_lease_ms: i64,
    /// The release pipelined behind an admission runs only if this job was admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    after_admission_of: Option<JobId>,
}

impl ReleaseArgs {
    pub(super) fn new(room: FarmRoom, lock_timeout_ms: i64, event_lease_ms: i64) -> Self {
        Self {
            after_admission_of: None,
            global_lock: global_capacity_lock(),
            lock_timeout_ms,
            render_slots: room.render_slots,
            release_ahead: room.release_ahead,
            event_lease_ms,
        }
    }

    /// Only behind this job's admission.
    pub(super) fn after_admission_of(self, job: JobId) -> Self {
        Self {
            after_admission_of: Some(job),
            ..self
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

/// The farm; the client's (`$1`), its network's (`$2`) and its wide network's (`$3`) active work:
/// the renders a worker has and the place of the first still queued, from the active jobs'
/// indexes (at most their caps' rows).
pub(super) const LOAD_SQL: &str = concat!(
    "\
SELECT farm_state(),
       ",
    in_flight_sql!("f.client_ip = $1"),
    ",
       ",
    first_queued_sql!("q.client_ip = $1"),
    ",
       ",
    in_flight_sql!("f.client_network = $2"),
    ",
       ",
    first_queued_sql!("q.client_network = $2"),
    ",
       ",
    in_flight_sql!("f.client_wide_network = $3"),
    ",
       ",
    first_queued_sql!("q.client_wide_network = $3"),
);

/// The global counts, the farm and the place of a job a new client submits now (its start tag
/// is the clock); the oldest queued job's age of anonymous clients and of keys
/// (jobs_queued_by_age, from its oldest end).
pub(super) const OVERVIEW_SQL: &str = "\
SELECT c.queued, c.rendering, c.anonymous_queued, farm_state(),
       queue_place(NULL, (SELECT virtual_time FROM fair_clock)),
       (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM jobs
         WHERE status = 'queued' AND client_ip NOT LIKE 'key:%'),
       (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM jobs
         WHERE status = 'queued' AND client_ip LIKE 'key:%')
  FROM job_counts c";

/// The farm and the place the next job of fair client `$1` (an anonymous client's network, or
/// the key) would take: after the clock and the client's last finish (admit_job's start).
pub(super) const NEXT_WAIT_SQL: &str = "\
SELECT farm_state(),
       queue_place(NULL, greatest(
           (SELECT virtual_time FROM fair_clock),
           (SELECT finish FROM fair_clients WHERE client = $1)))";
