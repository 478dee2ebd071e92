//! The `jobs` table: admission in one `admit_job` statement, its resolution and the reads here;
//! the listing's statements (page.rs), the workers' transitions (transitions.rs) and the
//! janitor's (housekeeping.rs) beside it. The global counts are read from `job_counts`, which
//! triggers keep in step with every change of a job, so no admission counts the queue.

mod housekeeping;
mod page;
mod transitions;

pub use page::PageStatement;

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use serde::de::IntoDeserializer;
use serde::{Deserialize, Serialize};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::farm::{
    from_json, global_capacity_lock, released_events, ReleaseArgs, LOAD_SQL, NEXT_WAIT_SQL,
    OVERVIEW_SQL, RELEASE_SQL,
};
use super::idempotency;
use crate::adapters::postgres::{self as db, millis};
use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::failure::FailureCode;
use crate::domain::job::{ClientReference, JobId, JobStatus};
use crate::domain::render::RenderOptions;
use crate::domain::replay::ReplayInfo;
use crate::domain::sandbox;
use crate::ports::idempotency::StoredResponse;
use crate::ports::jobs::{
    ActiveWork, Admission, Capacity, CapacityLimits, FarmRoom, JobAdmission, JobPage, JobQuery,
    JobReads, JobRecord, JobRelease, Load, NewJob, NoRoom, Occupancy, OccupancyFound,
    OccupancyLook, Overview, QueueAges, QueueWait, Resolved,
};
use crate::ports::outbox::OutboxEvent;
use crate::ports::StoreError;

pub struct PgJobStore {
    pool: Pool,
    lock_timeout_ms: i64,
    event_lease_ms: i64,
}

impl PgJobStore {
    /// `event_lease`: how long a fresh admission's own fast path owns its outbox event.
    pub fn new(pool: Pool, lock_timeout: Duration, event_lease: Duration) -> Self {
        Self {
            pool,
            lock_timeout_ms: millis(lock_timeout),
            event_lease_ms: millis(event_lease),
        }
    }
}

/// What is left, in seconds, of the failure cooldown (`$4` ms) of the replay `$2`: its latest
/// real render that failed for a reason that is the replay's own (`FailureCode::THE_REPLAYS`;
/// a failure without a code does not count) within the cooldown, one row of
/// `jobs_failed_by_replay`.
macro_rules! failed_recently_sql {
    () => {
        "(SELECT extract(epoch FROM f.updated_at + $4 * interval '1 millisecond' - now())::float8
           FROM jobs f
          WHERE f.replay_sha256 = $2 AND f.status = 'failed' AND NOT f.sandbox
            AND f.error_code IN ('beatmap_not_found', 'replay_unrenderable')
            AND f.updated_at > now() - $4 * interval '1 millisecond'
          ORDER BY f.updated_at DESC LIMIT 1)"
    };
}

/// The global counts (one row), then the client's, its network's (`$3`) and its wide network's
/// (`$5`; both NULL for a key's client) active jobs: each at most its cap of rows, by an index
/// on the active jobs.
const OCCUPANCY_SQL: &str = concat!(
    "\
SELECT c.queued, c.rendering, c.anonymous_queued,
       (SELECT count(*) FROM jobs
         WHERE client_ip = $1 AND status IN ('queued', 'downloading', 'rendering')),
       (SELECT id FROM jobs
         WHERE client_ip = $1 AND replay_sha256 = $2
           AND status IN ('queued', 'downloading', 'rendering')
         LIMIT 1),
       (SELECT count(*) FROM jobs
         WHERE client_network = $3 AND client_network IS NOT NULL
           AND status IN ('queued', 'downloading', 'rendering')),
       (SELECT count(*) FROM jobs
         WHERE client_wide_network = $5 AND client_wide_network IS NOT NULL
           AND status IN ('queued', 'downloading', 'rendering')),
       ",
    failed_recently_sql!(),
    "
  FROM job_counts c"
);

/// A sandbox client's occupancy: no global counts, and its sandbox jobs younger than `$3` ms
/// (`jobs_sandbox_by_client_age`).
const SANDBOX_OCCUPANCY_SQL: &str = concat!(
    "\
SELECT 0::bigint, 0::bigint, 0::bigint, count(*),
       (array_agg(id) FILTER (WHERE replay_sha256 = $2))[1], 0::bigint, 0::bigint,
       ",
    failed_recently_sql!(),
    "
  FROM jobs
 WHERE client_ip = $1 AND sandbox AND created_at > now() - $3 * interval '1 millisecond'"
);

/// admit_job's argument, one jsonb object: the one place its keys are spelled
/// (sql/functions/admit_job.sql lists them too, and refuses a required key missing or null and
/// a key it does not know). `None` is sent as null: an optional key's "none".
#[derive(Debug, Serialize)]
struct AdmitArgs<'a> {
    id: JobId,
    client_ip: &'a str,
    client_addr: Option<&'a str>,
    client_network: Option<&'a str>,
    client_wide_network: Option<&'a str>,
    client_lock: i64,
    global_lock: i64,
    skin: &'a str,
    config: &'a RenderOptions,
    replay_key: &'a str,
    /// Hex.
    replay_sha256: String,
    max_queued: i64,
    max_anonymous_queued: Option<i64>,
    max_rendering: i64,
    max_active_per_client: i64,
    max_active_per_network: Option<i64>,
    max_active_per_wide_network: Option<i64>,
    lock_timeout_ms: i64,
    event_payload: serde_json::Value,
    replay: &'a ReplayInfo,
    event_lease_ms: i64,
    idem_endpoint: Option<&'static str>,
    idem_key: Option<&'a str>,
    idem_token: Option<uuid::Uuid>,
    idem_response: Option<&'a StoredResponse>,
    render_cost: f64,
    fair_weight: u32,
    sandbox: bool,
    sandbox_active_ms: i64,
    sandbox_video_key: Option<&'static str>,
    sandbox_thumb_key: Option<&'static str>,
    sandbox_failure: Option<SandboxFailure>,
    callback_url: Option<&'a str>,
    callbacks: Vec<AdmitCallback>,
    client_reference: Option<&'a str>,
}

/// How a sandbox job with `sandbox_outcome=failed` failed (domain/sandbox.rs' sample).
#[derive(Debug, Serialize)]
struct SandboxFailure {
    error: String,
    error_code: &'static str,
    retryable: bool,
}

/// One callback admit_job queues with the job.
#[derive(Debug, Serialize)]
struct AdmitCallback {
    delay_ms: i64,
    status: JobStatus,
    progress: f32,
}

impl<'a> AdmitArgs<'a> {
    fn new(
        job: &'a NewJob,
        limits: &CapacityLimits,
        lock_timeout_ms: i64,
        event_lease_ms: i64,
    ) -> Self {
        let (claim, response) = job.completes.as_ref().map(|(c, r)| (c, r)).unzip();
        let (artifacts, failure) = job
            .sandbox_final()
            .map_or((false, None), |(_, _, artifacts, failure)| {
                (artifacts, failure)
            });
        Self {
            id: job.id,
            client_ip: job.client.as_str(),
            client_addr: job.address.as_ref().map(ClientKey::as_str),
            client_network: job.network.as_ref().map(ClientKey::as_str),
            client_wide_network: job.wide_network.as_ref().map(ClientKey::as_str),
            client_lock: job.client.lock_id(),
            global_lock: global_capacity_lock(),
            skin: job.options.skin.as_str(),
            config: &job.options,
            replay_key: &job.replay_key,
            replay_sha256: hex::encode(job.replay_sha256.as_bytes()),
            max_queued: limits.max_queued,
            max_anonymous_queued: limits.max_anonymous_queued,
            max_rendering: limits.max_rendering,
            max_active_per_client: limits.max_active_per_client,
            max_active_per_network: limits.max_active_per_network,
            max_active_per_wide_network: limits.max_active_per_wide_network,
            lock_timeout_ms,
            event_payload: job.event_payload(),
            replay: &job.replay,
            event_lease_ms,
            idem_endpoint: claim.map(|c| c.endpoint),
            idem_key: claim.map(|c| c.key.as_str()),
            idem_token: claim.map(|c| c.token),
            idem_response: response,
            render_cost: job.cost.secs(),
            fair_weight: job.weight.get(),
            sandbox: job.sandbox.is_some(),
            sandbox_active_ms: millis(sandbox::ACTIVE_FOR),
            sandbox_video_key: artifacts.then_some(sandbox::SAMPLE_VIDEO_KEY),
            sandbox_thumb_key: artifacts.then_some(sandbox::SAMPLE_THUMB_KEY),
            sandbox_failure: failure.map(|code| SandboxFailure {
                error: sandbox::sample_failure(code),
                error_code: code.as_str(),
                retryable: code.retryable(),
            }),
            callback_url: job.callback.as_ref().map(|url| url.as_str()),
            callbacks: job
                .first_callbacks()
                .into_iter()
                .map(|(delay, status, progress)| AdmitCallback {
                    delay_ms: millis(delay),
                    status,
                    progress,
                })
                .collect(),
            client_reference: job.client_reference.as_ref().map(ClientReference::as_str),
        }
    }
}

/// admit_job's verdict (its first column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AdmitVerdict {
    Admitted,
    Duplicate,
    QueueFull,
    AnonymousQueueFull,
    RenderCapacity,
    TooManyActiveJobs,
    TooManyNetworkJobs,
    TooManyWideNetworkJobs,
    ClaimLost,
    Abandoned,
}

/// resolve_admission's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ResolveVerdict {
    Admitted,
    Abandoned,
}

const ADMIT_SQL: &str = "SELECT verdict, event_id, existing_job FROM admit_job($1::jsonb)";

const RESOLVE_SQL: &str = "SELECT v.verdict FROM resolve_admission($1, $2, $3) AS v(verdict)";

/// The API's view of a job. A queued job comes with its place in the release order and the
/// farm's state (queue_place, farm_state: its estimate's inputs; the farm read once per
/// statement). A sandbox job comes with its age, which its shown state is derived from
/// (`job_record`).
const JOB_SELECT: &str = "\
SELECT j.id, j.status::text, j.progress, j.created_at, j.updated_at, j.error, j.config,
       j.video_key, j.thumb_key,
       CASE WHEN j.status = 'queued' THEN queue_place(j.id, NULL)
            -- A sandbox job young enough to show queued (sandbox::QUEUED_FOR): the place a
            -- real job of a new client submitted now would have.
            WHEN j.sandbox AND j.created_at > now() - interval '2000 milliseconds' THEN
            queue_place(NULL, (SELECT virtual_time FROM fair_clock))
       END,
       CASE WHEN j.status = 'queued'
              OR (j.sandbox AND j.created_at > now() - interval '2000 milliseconds') THEN
            (SELECT farm_state())
       END,
       j.sandbox,
       CASE WHEN j.sandbox THEN extract(epoch FROM now() - j.created_at)::float8 END,
       j.replay, j.error_code, j.event_seq, j.client_reference
  FROM jobs j";

/// A SQL function's verdict, its row's first column, as one of `V`'s snake_case names; another
/// word is a function this code does not know (newer or broken): its outcome is unknown.
fn verdict<V: serde::de::DeserializeOwned>(row: &Row, function: &str) -> Result<V, StoreError> {
    let word: &str = row.get(0);
    V::deserialize(word.into_deserializer()).map_err(|_: serde::de::value::Error| {
        StoreError::unknown(format!("{function} answered `{word}`"))
    })
}

/// The first three columns of the occupancy, capacity and load reads.
fn capacity_of(row: &Row) -> Capacity {
    Capacity {
        queued: row.get(0),
        rendering: row.get(1),
        anonymous_queued: row.get(2),
    }
}

fn status_of(text: &str) -> Result<JobStatus, StoreError> {
    text.parse().map_err(StoreError::unknown)
}

fn job_record(row: &Row) -> Result<JobRecord, StoreError> {
    let wait = from_json(row, 9)?
        .zip(from_json(row, 10)?)
        .map(|(place, farm)| QueueWait { farm, place });
    let record = JobRecord {
        id: JobId::from(row.get::<_, uuid::Uuid>(0)),
        status: status_of(row.get(1))?,
        progress: row.get(2),
        created_at: row.get(3),
        updated_at: row.get(4),
        error: row.get(5),
        config: row.get(6),
        video_key: row.get(7),
        thumb_key: row.get(8),
        queue_position: wait.as_ref().map(|wait| wait.place.position),
        wait,
        sandbox: row.get(11),
        replay: row.get(13),
        error_code: row.get::<_, Option<&str>>(14).map(FailureCode::stored),
        sequence: row.get(15),
        client_reference: row.get(16),
    };
    Ok(match row.get::<_, Option<f64>>(12) {
        Some(age_secs) if record.sandbox => {
            record.as_sandbox_shows(Duration::try_from_secs_f64(age_secs).unwrap_or_default())
        }
        _ => record,
    })
}

#[async_trait]
impl JobAdmission for PgJobStore {
    async fn occupancy(&self, look: &OccupancyLook<'_>) -> Result<OccupancyFound, StoreError> {
        let caller = look.caller;
        let hash = look.replay.as_bytes().as_slice();
        let active_ms = millis(sandbox::ACTIVE_FOR);
        let cooldown_ms = millis(look.failure_cooldown);
        let client = caller.client().as_str();
        let network = caller.network().map(ClientKey::as_str);
        let wide_network = caller.wide_network().map(ClientKey::as_str);
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
            vec![(&client, Type::TEXT), (&hash, Type::BYTEA)];
        let sql = if caller.is_sandbox() {
            params.push((&active_ms, Type::INT8));
            params.push((&cooldown_ms, Type::INT8));
            SANDBOX_OCCUPANCY_SQL
        } else {
            params.push((&network, Type::TEXT));
            params.push((&cooldown_ms, Type::INT8));
            params.push((&wide_network, Type::TEXT));
            OCCUPANCY_SQL
        };
        let conn = db::checkout(&self.pool).await?;
        let read = conn.query_typed(sql, &params);
        // Neither needs the other's answer: sent together, one round trip.
        let (rows, held) = match look.key {
            Some(key) => tokio::try_join!(read, idempotency::held_on(&conn, key))?,
            None => (read.await?, None),
        };
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::new("occupancy returned no row"))?;
        let occupancy = Occupancy {
            capacity: capacity_of(&row),
            active_for_client: row.get(3),
            duplicate: row.get::<_, Option<uuid::Uuid>>(4).map(JobId::from),
            active_for_network: row.get(5),
            active_for_wide_network: row.get(6),
            failed_recently: row
                .get::<_, Option<f64>>(7)
                .and_then(|secs| Duration::try_from_secs_f64(secs).ok()),
        };
        Ok((occupancy, held))
    }

    async fn overview(&self) -> Result<Overview, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let row = conn.query_row(OVERVIEW_SQL, &[], "overview").await?;
        Ok(Overview {
            capacity: capacity_of(&row),
            wait: QueueWait {
                farm: from_json(&row, 3)?.unwrap_or_default(),
                place: from_json(&row, 4)?.unwrap_or_default(),
            },
            queue_age: QueueAges {
                anonymous: row.get(5),
                keys: row.get(6),
            },
        })
    }

    async fn load(&self, caller: &Caller) -> Result<Load, StoreError> {
        let network = caller.network().map(ClientKey::as_str);
        let wide_network = caller.wide_network().map(ClientKey::as_str);
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&caller.client().as_str(), Type::TEXT),
            (&network, Type::TEXT),
            (&wide_network, Type::TEXT),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn.query_row(LOAD_SQL, &params, "load").await?;
        let work = |in_flight, first_queued| -> Result<ActiveWork, StoreError> {
            Ok(ActiveWork {
                in_flight: from_json(&row, in_flight)?.unwrap_or_default(),
                first_queued: from_json(&row, first_queued)?,
            })
        };
        Ok(Load {
            farm: from_json(&row, 0)?.unwrap_or_default(),
            client: work(1, 2)?,
            network: work(3, 4)?,
            wide_network: work(5, 6)?,
        })
    }

    async fn next_wait(&self, caller: &Caller) -> Result<QueueWait, StoreError> {
        let fair_client = caller.network().unwrap_or(caller.client()).as_str();
        let params: [(&(dyn ToSql + Sync), Type); 1] = [(&fair_client, Type::TEXT)];
        let conn = db::checkout(&self.pool).await?;
        let row = conn.query_row(NEXT_WAIT_SQL, &params, "next_wait").await?;
        Ok(QueueWait {
            farm: from_json(&row, 0)?.unwrap_or_default(),
            place: from_json(&row, 1)?.unwrap_or_default(),
        })
    }

    async fn admit(&self, job: &NewJob, limits: &CapacityLimits) -> Result<Admission, StoreError> {
        let args = AdmitArgs::new(job, limits, self.lock_timeout_ms, self.event_lease_ms);
        let args = serde_json::to_value(&args)
            .map_err(|e| StoreError::new(format!("admit_job's argument: {e}")))?;
        let release = ReleaseArgs::new(limits.farm, self.lock_timeout_ms, self.event_lease_ms)
            .after_admission_of(job.id)
            .to_json()?;
        let conn = db::checkout(&self.pool).await?;
        let admit_params = [(&args as &(dyn ToSql + Sync), Type::JSONB)];
        let admit = conn.query_row(ADMIT_SQL, &admit_params, "admit_job");
        // Pipelined behind the admission, in the same round trip: the farm takes the next jobs
        // in fair order (maybe this one) when it has room. A sandbox job holds none.
        let (row, released) = if job.sandbox.is_some() {
            (admit.await?, Vec::new())
        } else {
            let release_params = [(&release as &(dyn ToSql + Sync), Type::JSONB)];
            let release = conn.query_typed(RELEASE_SQL, &release_params);
            match tokio::join!(admit, release) {
                (Ok(row), Ok(rows)) => (row, released_events(&rows)),
                (Ok(row), Err(error)) => {
                    // Committed; the next release (a report, the janitor, the sweep) takes it.
                    tracing::warn!(%error, job_id = %job.id, "release after admission failed");
                    (row, Vec::new())
                }
                (Err(error), _) => return Err(error),
            }
        };
        let verdict: AdmitVerdict = verdict(&row, "admit_job")?;
        Ok(match verdict {
            AdmitVerdict::Admitted => Admission::Admitted(released),
            AdmitVerdict::Duplicate => {
                let existing: uuid::Uuid = row.get(2);
                Admission::NoRoom(NoRoom::Duplicate(existing.into()))
            }
            AdmitVerdict::QueueFull => Admission::NoRoom(NoRoom::QueueFull),
            AdmitVerdict::AnonymousQueueFull => Admission::NoRoom(NoRoom::AnonymousQueueFull),
            AdmitVerdict::RenderCapacity => Admission::NoRoom(NoRoom::RenderCapacity),
            AdmitVerdict::TooManyActiveJobs => Admission::NoRoom(NoRoom::TooManyActiveJobs),
            AdmitVerdict::TooManyNetworkJobs => Admission::NoRoom(NoRoom::TooManyNetworkJobs),
            AdmitVerdict::TooManyWideNetworkJobs => {
                Admission::NoRoom(NoRoom::TooManyWideNetworkJobs)
            }
            AdmitVerdict::ClaimLost => Admission::ClaimLost,
            AdmitVerdict::Abandoned => Admission::Abandoned,
        })
    }

    async fn resolve(&self, job: &NewJob) -> Result<Resolved, StoreError> {
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&job.id.as_uuid(), Type::UUID),
            (&job.client.lock_id(), Type::INT8),
            (&self.lock_timeout_ms, Type::INT8),
        ];
        let conn = db::checkout(&self.pool).await?;
        let row = conn
            .query_row(RESOLVE_SQL, &params, "resolve_admission")
            .await?;
        let verdict: ResolveVerdict = verdict(&row, "resolve_admission")?;
        match verdict {
            ResolveVerdict::Admitted => Ok(Resolved::Admitted),
            ResolveVerdict::Abandoned => Ok(Resolved::Abandoned),
        }
    }
}

impl PgJobStore {
    fn release_args(&self, room: FarmRoom) -> Result<serde_json::Value, StoreError> {
        ReleaseArgs::new(room, self.lock_timeout_ms, self.event_lease_ms).to_json()
    }
}

#[async_trait]
impl JobRelease for PgJobStore {
    async fn release(&self, room: FarmRoom) -> Result<Vec<OutboxEvent>, StoreError> {
        let args = self.release_args(room)?;
        let conn = db::checkout(&self.pool).await?;
        let rows = conn
            .query_typed(RELEASE_SQL, &[(&args, Type::JSONB)])
            .await?;
        Ok(released_events(&rows))
    }
}

#[async_trait]
impl JobReads for PgJobStore {
    async fn find(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        let conn = db::checkout(&self.pool).await?;
        let sql = format!("{JOB_SELECT} WHERE j.id = $1");
        conn.query_typed(&sql, &[(&id.as_uuid(), Type::UUID)])
            .await?
            .first()
            .map(job_record)
            .transpose()
    }

    async fn list(&self, client: &ClientKey, query: &JobQuery) -> Result<JobPage, StoreError> {
        let statement = PageStatement::new(client, query);
        let conn = db::checkout(&self.pool).await?;
        // One round trip: the page and, on the first, its count, pipelined on the connection.
        let (params, count_params) = (statement.params(), statement.count_params());
        let count = async {
            match query.after {
                None => conn
                    .query_typed(&statement.count_sql, &count_params)
                    .await
                    .map(|rows| Some(rows.first().map_or(0, |row| row.get::<_, i64>(0)))),
                Some(_) => Ok(None),
            }
        };
        let (rows, total) = tokio::try_join!(conn.query_typed(&statement.sql, &params), count)?;
        let rows = rows.iter().map(job_record).collect::<Result<_, _>>()?;
        Ok(JobPage::from_rows(rows, query.limit, total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// admit_job.sql's list `name` (`c_required CONSTANT text[] := ARRAY[…]`).
    fn sql_keys(name: &str) -> BTreeSet<&'static str> {
        let sql = include_str!("../../../../../sql/functions/admit_job.sql");
        let start = format!("{name} CONSTANT text[] := ARRAY[");
        let list = sql.split_once(start.as_str()).expect("the list").1;
        let list = list.split_once(']').expect("its end").0;
        list.split(',')
            .map(|key| key.trim().trim_matches('\''))
            .collect()
    }

    #[test]
    fn the_cooldown_read_lists_exactly_the_replays_own_failures() {
        let listed: Vec<String> = FailureCode::THE_REPLAYS
            .iter()
            .map(|code| format!("'{code}'"))
            .collect();
        let list = format!("f.error_code IN ({})", listed.join(", "));
        assert!(OCCUPANCY_SQL.contains(&list), "{OCCUPANCY_SQL}");
        let migration = include_str!("../../../../../migrations/V14__replay_metadata.sql");
        assert!(
            migration.contains(&format!("error_code IN ({})", listed.join(", "))),
            "the jobs_failed_by_replay index must cover the same codes"
        );
    }

    #[test]
    fn a_young_sandbox_job_is_read_as_long_as_it_shows_queued() {
        let queued_for = format!(
            "interval '{} milliseconds'",
            sandbox::QUEUED_FOR.as_millis()
        );
        assert_eq!(JOB_SELECT.matches(&queued_for).count(), 2, "{JOB_SELECT}");
    }

    #[test]
    fn admit_args_are_the_keys_admit_job_knows_the_required_ones_set() {
        let job =
            crate::ports::contracts::jobs::new_job(&crate::ports::contracts::fresh_caller(), "x");
        let limits = crate::ports::contracts::jobs::ROOMY;
        let args = serde_json::to_value(AdmitArgs::new(&job, &limits, 1000, 30_000)).unwrap();
        let sent: BTreeSet<&str> = args
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let required = sql_keys("c_required");
        let known: BTreeSet<&str> = required.union(&sql_keys("c_optional")).copied().collect();
        assert_eq!(
            sent, known,
            "AdmitArgs and admit_job.sql name different keys"
        );
        for key in required {
            assert!(!args[key].is_null(), "{key} is required, sent null");
        }
    }
}
