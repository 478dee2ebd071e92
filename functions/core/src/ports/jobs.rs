//! The `jobs` table: admission (the capacity checks, the per-client lock and limit, the job +
//! outbox insert), the status reads, the workers' transitions and the janitor's.

use std::time::Duration;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};

use crate::domain::callback::CallbackUrl;
use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::failure::FailureCode;
pub use crate::domain::farm::{ActiveWork, QueueWait};
use crate::domain::farm::{FarmState, RenderCost, Weight};
use crate::domain::hash::{Md5, ReplayHash};
use crate::domain::job::{ClientReference, JobId, JobStatus};
use crate::domain::render::RenderOptions;
use crate::domain::replay::ReplayInfo;
use crate::domain::sandbox;
use crate::ports::idempotency::{Claim, Held, StoredResponse};
use crate::ports::outbox::{OutboxEvent, RENDER_JOB_CREATED};
use crate::ports::StoreError;

/// The caps admission enforces (DESIGN.md invariants 1 and 2, and §3's fair share).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityLimits {
    pub max_queued: i64,
    /// The queued jobs all anonymous clients together may hold; `None` for a key's job.
    pub max_anonymous_queued: Option<i64>,
    pub max_rendering: i64,
    pub max_active_per_client: i64,
    /// The active jobs an anonymous client's network may hold; `None` for a key's job.
    pub max_active_per_network: Option<i64>,
    /// The active jobs an anonymous client's wide network may hold; `None` for a key's job.
    pub max_active_per_wide_network: Option<i64>,
    /// What the farm is given: the admission releases into it (a sandbox job holds none).
    pub farm: FarmRoom,
}

/// How many jobs the farm holds released and not finished: `RENDER_SLOTS` it renders at once,
/// and `RELEASE_AHEAD` more waiting on the render queue for the next free worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FarmRoom {
    pub render_slots: i64,
    pub release_ahead: i64,
}

/// Why a job cannot be admitted, in the order the checks are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The client has this replay queued or rendering already, as this job.
    Duplicate(JobId),
    QueueFull,
    /// The anonymous clients' share of the queue is taken (`ANONYMOUS_QUEUE_SHARE`).
    AnonymousQueueFull,
    RenderCapacity,
    TooManyActiveJobs,
    /// The client's network has its `MAX_ACTIVE_PER_NETWORK` active jobs.
    TooManyNetworkJobs,
    /// The client's wide network has its `MAX_ACTIVE_PER_WIDE_NETWORK` active jobs.
    TooManyWideNetworkJobs,
}

/// How an admission came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Committed; then the farm's next jobs in fair order (this one or others) were released,
    /// their events leased to the caller to publish (none for a sandbox job, or a full farm).
    Admitted(Vec<OutboxEvent>),
    /// Refused by a re-check under the locks.
    NoRoom(NoRoom),
    /// The request's idempotency claim is no longer its own (released, or taken over as stale):
    /// nothing was inserted, so the key never points at a job it did not make.
    ClaimLost,
    /// `resolve` gave this job up before the admission ran: nothing was inserted.
    Abandoned,
}

/// What `resolve` found out about an admission whose answer never came.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// It committed: the job exists (waiting for its release, if it is a real job).
    Admitted,
    /// It did not, and now never will: the job id is fenced.
    Abandoned,
}

/// The global capacity counts (kept by the store in O(1): the `job_counts` row).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    pub queued: i64,
    pub rendering: i64,
    /// Queued jobs of anonymous clients (every client that is not an API key).
    pub anonymous_queued: i64,
}

/// Active job counts, globally, of one client, of its network and of its wide network, and the
/// client's active job of one replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    pub capacity: Capacity,
    pub active_for_client: i64,
    /// 0 for a key's client (no network limit applies to it).
    pub active_for_network: i64,
    /// 0 for a key's client, as the network's.
    pub active_for_wide_network: i64,
    pub duplicate: Option<JobId>,
    /// What is left of the failure cooldown of this replay (whoever submitted it): a render
    /// of it failed less than the cooldown ago. `None` when none did.
    pub failed_recently: Option<Duration>,
}

impl Occupancy {
    /// The capacity checks, in admission order (admit_job's too); the duplicate is checked
    /// before the rate limit. A network's cap before its wide network's: a refusal names the
    /// narrowest limit that is reached.
    pub fn check(&self, limits: &CapacityLimits) -> Result<(), NoRoom> {
        let over = |count: i64, cap: Option<i64>| cap.is_some_and(|cap| count >= cap);
        if self.capacity.queued >= limits.max_queued {
            Err(NoRoom::QueueFull)
        } else if over(self.capacity.anonymous_queued, limits.max_anonymous_queued) {
            Err(NoRoom::AnonymousQueueFull)
        } else if self.capacity.rendering >= limits.max_rendering {
            Err(NoRoom::RenderCapacity)
        } else if self.active_for_client >= limits.max_active_per_client {
            Err(NoRoom::TooManyActiveJobs)
        } else if over(self.active_for_network, limits.max_active_per_network) {
            Err(NoRoom::TooManyNetworkJobs)
        } else if over(
            self.active_for_wide_network,
            limits.max_active_per_wide_network,
        ) {
            Err(NoRoom::TooManyWideNetworkJobs)
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
    /// The address a key client's job came from (jobs.client_addr); `None` for an anonymous
    /// client, whose `client` is its address.
    pub address: Option<ClientKey>,
    /// An anonymous client's network (jobs.client_network), its cap counted by; `None` for a
    /// key client.
    pub network: Option<ClientKey>,
    /// An anonymous client's wide network (jobs.client_wide_network), its cap counted by;
    /// `None` for a key client.
    pub wide_network: Option<ClientKey>,
    pub options: RenderOptions,
    /// The client's own label for the job, echoed wherever the job is shown.
    pub client_reference: Option<ClientReference>,
    pub replay_key: String,
    pub replay_sha256: ReplayHash,
    /// What the replay says, shown with the job, in its callbacks and in its queue message.
    pub replay: ReplayInfo,
    /// The idempotency claim this admission completes, with the response its retries get.
    pub completes: Option<(Claim, StoredResponse)>,
    /// A sandbox key's job, and how it ends: admitted by the same checks, but stored final and
    /// never queued for rendering (domain/sandbox.rs). `None` for a real job.
    pub sandbox: Option<sandbox::Outcome>,
    /// Where the job's status changes are POSTed.
    pub callback: Option<CallbackUrl>,
    /// Its expected render time, and its client's weight: its place in the fair order.
    pub cost: RenderCost,
    pub weight: Weight,
}

impl NewJob {
    /// This job's `render_job_created` event as admission stores it under `id`, held for
    /// release; a sandbox job has none.
    pub fn held_event(&self, id: i64) -> Option<OutboxEvent> {
        self.sandbox.is_none().then(|| OutboxEvent {
            id,
            job_id: self.id,
            event_type: RENDER_JOB_CREATED.to_owned(),
            payload: self.event_payload(),
            attempts: 0,
            group: Some(self.fair_client().as_str().to_owned()),
        })
    }

    /// Whom the farm's time is shared between: an anonymous client's network, or the key.
    pub fn fair_client(&self) -> &ClientKey {
        self.network.as_ref().unwrap_or(&self.client)
    }

    /// The callbacks admission queues, as `(delay, status, progress)`: the first status, or a
    /// sandbox job's whole schedule; none without a callback URL.
    pub fn first_callbacks(&self) -> Vec<(Duration, JobStatus, f32)> {
        match (&self.callback, self.sandbox) {
            (None, _) => Vec::new(),
            (Some(_), Some(outcome)) => sandbox::callback_schedule(outcome),
            (Some(_), None) => vec![(Duration::ZERO, JobStatus::Queued, 0.0)],
        }
    }

    /// What a sandbox job is stored as, and how its failure reads: (status, progress, its sample
    /// artifacts, the failure it rehearses).
    pub fn sandbox_final(&self) -> Option<(JobStatus, f32, bool, Option<FailureCode>)> {
        self.sandbox.map(|outcome| match outcome {
            sandbox::Outcome::Completed => (JobStatus::Completed, 100.0, true, None),
            sandbox::Outcome::Failed(code) => (JobStatus::Failed, 0.0, false, Some(code)),
        })
    }

    /// The `render_job_created` payload the workers receive.
    pub fn event_payload(&self) -> serde_json::Value {
        serde_json::json!({
            "job_id": self.id,
            "replay_key": self.replay_key,
            "skin": self.options.skin,
            "config": self.options,
            "replay": self.replay,
        })
    }
}

/// A job as the API shows it. Who submitted it is not selected, so it cannot leak.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub status: JobStatus,
    pub progress: f32,
    /// 1-based place in the release order (domain/farm.rs `QueuePlace`); `None` unless queued.
    pub queue_position: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub error: Option<String>,
    /// Why a failed job failed; `None` unless failed.
    pub error_code: Option<FailureCode>,
    pub config: serde_json::Value,
    pub video_key: Option<String>,
    pub thumb_key: Option<String>,
    /// What the replay says (`ReplayInfo`, as stored); `None` for a job of an earlier release.
    pub replay: Option<serde_json::Value>,
    /// What its `estimated_start` is computed from: read for queued jobs only, and for sandbox
    /// jobs young enough to show queued (the wait of a job submitted now).
    pub wait: Option<QueueWait>,
    /// A sandbox key's job, shown as its age makes it (domain/sandbox.rs).
    pub sandbox: bool,
    /// Grows by one with each change of its status or progress (`jobs.event_seq`): a live
    /// event's `sequence`.
    pub sequence: i64,
    /// The client's own label for the job (`client_reference`), if it gave one.
    pub client_reference: Option<String>,
}

impl JobRecord {
    /// Why the job ended without a video: its code, and for an expired job of a release that
    /// stored none, `queue_expired`. `None` unless failed or expired.
    pub fn failure(&self) -> Option<FailureCode> {
        match self.status {
            JobStatus::Expired => Some(self.error_code.unwrap_or(FailureCode::QueueExpired)),
            _ => self.error_code,
        }
    }

    /// A sandbox job as its `age` makes it: stored final, shown moving through its states
    /// (domain/sandbox.rs), its sample artifacts only once completed, its sample failure only
    /// once failed. While it shows queued, its place is the one a real job submitted with it
    /// would have (the store reads the queue's length into `queue_position` for a young sandbox
    /// job), with the same estimate.
    pub fn as_sandbox_shows(self, age: Duration) -> Self {
        let (status, progress) = sandbox::state_at(age, self.status);
        let completed = status == JobStatus::Completed;
        let failed = status == JobStatus::Failed;
        let queued = status == JobStatus::Queued;
        Self {
            status,
            progress,
            queue_position: self.queue_position.filter(|_| queued),
            error: self.error.filter(|_| failed),
            error_code: self.error_code.filter(|_| failed),
            updated_at: self.created_at
                + chrono::Duration::from_std(age.min(sandbox::ACTIVE_FOR)).unwrap_or_default(),
            video_key: self.video_key.filter(|_| completed),
            thumb_key: self.thumb_key.filter(|_| completed),
            wait: self.wait.filter(|_| queued),
            ..self
        }
    }
}

/// What capacity refusals estimate their `Retry-After` from (estimate.rs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Load {
    pub farm: FarmState,
    pub client: ActiveWork,
    /// An anonymous client's network's; empty for a key.
    pub network: ActiveWork,
    /// An anonymous client's wide network's; empty for a key.
    pub wide_network: ActiveWork,
}

/// What `GET /v1/status` reads: the counts, the farm, and the place a new client's job would
/// take now.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Overview {
    pub capacity: Capacity,
    pub wait: QueueWait,
    /// How long the oldest queued job of each client class has waited, seconds.
    pub queue_age: QueueAges,
}

/// The oldest queued job's age by client class, seconds; `None` when it has none queued.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct QueueAges {
    pub anonymous: Option<f64>,
    pub keys: Option<f64>,
}

/// A page of one client's `GET /v1/jobs`, newest first (`created_at`, then `id`, descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobQuery {
    pub status: Option<JobStatus>,
    /// Only the jobs of this player's replays, compared case-insensitively.
    pub player: Option<String>,
    /// Only the jobs of replays of this beatmap.
    pub beatmap_md5: Option<Md5>,
    /// The client is a sandbox key: `status` filters by the status its jobs show, which their
    /// age makes (domain/sandbox.rs), not the final one they are stored with.
    pub sandbox: bool,
    pub limit: i64,
    /// Continue after this job; `None` for the first page.
    pub after: Option<PageCursor>,
}

/// A place in the listing order: the last job of a page, by what the order compares. Opaque to
/// clients (base64url of its 24 bytes), so the order's columns can change without breaking them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub created_at: DateTime<Utc>,
    pub id: JobId,
}

/// A cursor that is not one this service made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a cursor of this listing; use the `next` of a page")]
pub struct MalformedCursor;

/// 10000-01-01T00:00:00Z.
const MAX_CURSOR_SECS: i64 = 253_402_300_800;

impl PageCursor {
    /// Microseconds (Postgres' precision, so the cursor matches the stored value exactly) and
    /// the id's bytes.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(24);
        bytes.extend_from_slice(&self.created_at.timestamp_micros().to_be_bytes());
        bytes.extend_from_slice(self.id.as_uuid().as_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub fn decode(text: &str) -> Result<Self, MalformedCursor> {
        let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| MalformedCursor)?;
        let (micros, id) = bytes.split_at_checked(8).ok_or(MalformedCursor)?;
        let micros = i64::from_be_bytes(micros.try_into().map_err(|_| MalformedCursor)?);
        let id = uuid::Uuid::from_slice(id).map_err(|_| MalformedCursor)?;
        // Jobs are made now: a time outside the Unix epoch to year 9999 is no job's, and may be
        // outside what Postgres can compare with (it starts at 4713 BC).
        let created_at = DateTime::from_timestamp_micros(micros)
            .filter(|at| (0..MAX_CURSOR_SECS).contains(&at.timestamp()))
            .ok_or(MalformedCursor)?;
        Ok(Self {
            created_at,
            id: id.into(),
        })
    }
}

/// One page of `GET /v1/jobs`, and where the next starts if there may be more.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    pub jobs: Vec<JobRecord>,
    pub next: Option<PageCursor>,
    /// On the first page (no cursor): how many of the client's jobs match the filters, counted
    /// up to `TOTAL_CAP + 1`, a bounded range of the listing's own index. `None` on later pages.
    pub total: Option<i64>,
}

/// The most jobs a listing's `total` counts exactly: past it, `total` is `TOTAL_CAP` and
/// `total_capped` is true, so the count costs at most this many index entries, once per
/// listing (its first page).
pub const TOTAL_CAP: i64 = 1_000;

impl JobPage {
    /// From up to `limit + 1` rows in listing order (a row past the page means there is more)
    /// and the count of every match, up to `TOTAL_CAP + 1`.
    pub fn from_rows(mut rows: Vec<JobRecord>, limit: i64, total: Option<i64>) -> Self {
        let limit = usize::try_from(limit).unwrap_or(0);
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = rows.last().filter(|_| more).map(|last| PageCursor {
            created_at: last.created_at,
            id: last.id,
        });
        Self {
            jobs: rows,
            next,
            total,
        }
    }
}

/// What one `delete_ended` batch removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    pub jobs: u64,
    pub outbox_events: u64,
}

/// A render worker's validated report: what the job moves to and what to record with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub to: JobStatus,
    /// `None` keeps the stored progress within a state, and is 0 in a new one.
    pub progress: Option<f32>,
    pub video_key: Option<String>,
    pub thumb_key: Option<String>,
    pub error: Option<String>,
    /// With `failed` only (a failed report without one is `render_failed`).
    pub error_code: Option<FailureCode>,
    /// The janitor fails the job if no report comes by then; `None` for a terminal state.
    pub deadline_in: Option<Duration>,
}

/// A worker's report as the store applies it: the job, what it moves to, and the report's nonce.
#[derive(Debug, Clone, Copy)]
pub struct JobReport<'a> {
    pub id: JobId,
    pub transition: &'a Transition,
    pub nonce: &'a Nonce,
}

/// The report's nonce and how long it must be remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    pub value: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TransitionOutcome {
    /// `calls_back`: the change queued a callback (the job has a `callback_url`, and this was
    /// a status change, or a progress update over 5 s after its last callback). `pushes`: the
    /// change queued a live-event push (the job, or its key, is watched).
    Applied {
        status: JobStatus,
        progress: f32,
        calls_back: bool,
        pushes: bool,
    },
    NonceReused,
    UnknownJob,
    Illegal {
        current: JobStatus,
    },
}

/// What an admission's unlocked look asks about (`JobAdmission::occupancy`).
#[derive(Debug, Clone, Copy)]
pub struct OccupancyLook<'a> {
    pub caller: &'a Caller,
    pub replay: &'a ReplayHash,
    /// How long a failed render of the replay (for a reason of its own) refuses it again.
    pub failure_cooldown: Duration,
    /// The request's idempotency key, whose holder is read in the same round trip.
    pub key: Option<&'a Claim>,
}

/// What the look found: the occupancy, and the key's holder (none without a key).
pub type OccupancyFound = (Occupancy, Option<Held>);

/// The look and the admission (DESIGN.md §2): the unlocked looks that refuse early, and the
/// locked admit (with its settlement when no answer came).
#[async_trait]
pub trait JobAdmission: Send + Sync {
    /// An unlocked look at occupancy and at the client's active job of this replay, to refuse
    /// early before anything is stored; with a key, its holder (`IdempotencyStore::held`) is
    /// read in the same round trip (pipelined) and comes back too. Only reads.
    ///
    /// For a sandbox client, the global counts are 0 (its jobs hold no capacity) and its
    /// active jobs are its sandbox jobs younger than `sandbox::ACTIVE_FOR`. An anonymous
    /// client's network's active jobs are counted too. A failed render of this replay (any
    /// client's real job) less than `failure_cooldown` ago comes back as what is left of it.
    async fn occupancy(&self, look: &OccupancyLook<'_>) -> Result<OccupancyFound, StoreError>;

    /// The global counts, the farm and a new client's place, nobody's in particular
    /// (`GET /v1/status`).
    async fn overview(&self) -> Result<Overview, StoreError>;

    /// The farm, and the caller's (and its network's and wide network's) active work.
    async fn load(&self, caller: &Caller) -> Result<Load, StoreError>;

    /// Where the caller's next job would wait: after its own active jobs in fair order
    /// (`MAX_QUEUE_WAIT`).
    async fn next_wait(&self, caller: &Caller) -> Result<QueueWait, StoreError>;

    /// Locks, re-checks the duplicate and `limits` and inserts the job with its outbox event
    /// held (completing its idempotency claim), atomically; then, in the same round trip,
    /// releases what the farm has room for (`JobRelease::release`) and returns those events.
    async fn admit(&self, job: &NewJob, limits: &CapacityLimits) -> Result<Admission, StoreError>;

    /// Settles an `admit` of `job` whose outcome is unknown (no answer came): the job if it
    /// was committed, else a fence that makes a late `admit` of it refuse. Final either way.
    async fn resolve(&self, job: &NewJob) -> Result<Resolved, StoreError>;
}

/// The queue of record's release to the farm (DESIGN.md "Fair service").
#[async_trait]
pub trait JobRelease: Send + Sync {
    /// Releases the queued jobs not yet released, smallest fair start tag first, as many as
    /// `room` leaves beside the jobs released and not finished; race-free (no job twice, never
    /// past the room). Their events come back leased to the caller, which publishes them.
    async fn release(&self, room: FarmRoom) -> Result<Vec<OutboxEvent>, StoreError>;
}

/// What `GET /v1/jobs` and `GET /v1/jobs/{id}` read.
#[async_trait]
pub trait JobReads: Send + Sync {
    async fn find(&self, id: JobId) -> Result<Option<JobRecord>, StoreError>;

    /// One page of `client`'s own jobs: nobody lists another client's.
    async fn list(&self, client: &ClientKey, query: &JobQuery) -> Result<JobPage, StoreError>;
}

/// The render workers' reports.
#[async_trait]
pub trait JobTransitions: Send + Sync {
    /// Spends the report's nonce and, if it was fresh and the job's current state may move to
    /// `transition.to`, applies the transition; one statement, so it is all or nothing and a
    /// concurrent change of the job is re-checked rather than overwritten.
    async fn transition(&self, report: &JobReport<'_>) -> Result<TransitionOutcome, StoreError>;
}

/// The janitor's sweeps, each bounded by a batch.
#[async_trait]
pub trait JobHousekeeping: Send + Sync {
    /// Ends the jobs queued longer than `ttl` as `expired`. Returns how many.
    async fn expire_queued(&self, ttl: Duration) -> Result<u64, StoreError>;

    /// Fails the downloading/rendering jobs past their deadline (or, without one, not updated
    /// for `stall_timeout`). Returns how many.
    async fn fail_stalled(&self, stall_timeout: Duration) -> Result<u64, StoreError>;

    /// Fails the released jobs no worker has taken for `older_than` while a job released after
    /// them was started (their message lost, dead-lettered, or never published), so they do
    /// not hold the farm's room. Returns how many.
    async fn fail_unclaimed(&self, older_than: Duration) -> Result<u64, StoreError>;

    /// Deletes up to `batch` jobs that ended (completed, failed, expired) more than `retention`
    /// ago, oldest first, with their outbox events. Never an active job.
    async fn delete_ended(&self, retention: Duration, batch: i64) -> Result<Deleted, StoreError>;

    /// Forgets up to `batch` nonces whose reports could no longer be accepted. Returns how many.
    async fn prune_nonces(&self, batch: i64) -> Result<u64, StoreError>;

    /// Forgets up to `batch` fences of `resolve` older than any statement can be in flight.
    /// Returns how many.
    async fn prune_fences(&self, batch: i64) -> Result<u64, StoreError>;

    /// Forgets up to `batch` fair clients whose last finish tag the clock has passed (their
    /// next job starts at the clock either way). Returns how many.
    async fn prune_fair_clients(&self, batch: i64) -> Result<u64, StoreError>;
}

/// The jobs table behind all five of its ports: every adapter keeps them in one store.
pub trait JobStore:
    JobAdmission + JobReads + JobTransitions + JobHousekeeping + JobRelease
{
}
impl<S: JobAdmission + JobReads + JobTransitions + JobHousekeeping + JobRelease> JobStore for S {}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: u128, micros: i64) -> JobRecord {
        JobRecord {
            id: uuid::Uuid::from_u128(id).into(),
            status: JobStatus::Completed,
            progress: 100.0,
            queue_position: None,
            created_at: DateTime::from_timestamp_micros(micros).unwrap(),
            updated_at: DateTime::from_timestamp_micros(micros).unwrap(),
            error: None,
            error_code: None,
            config: serde_json::json!({}),
            video_key: None,
            thumb_key: None,
            replay: None,
            wait: None,
            sandbox: false,
            sequence: 0,
            client_reference: None,
        }
    }

    #[test]
    fn cursors_round_trip_exactly_and_refuse_anything_else() {
        let cursor = PageCursor {
            created_at: DateTime::from_timestamp_micros(1_764_530_000_123_456).unwrap(),
            id: JobId::new(),
        };
        let text = cursor.encode();
        assert_eq!(text.len(), 32);
        assert!(text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(PageCursor::decode(&text), Ok(cursor));
        let too_long = format!("{text}AAAA");
        for bad in [
            "",
            "x",
            "not a cursor",
            &text[..31],
            &too_long,
            "%%%%",
            "AAAA",
        ] {
            assert_eq!(PageCursor::decode(bad), Err(MalformedCursor), "{bad:?}");
        }
        // Past chrono's range, before Postgres', and years no job was made in.
        for micros in [i64::MAX, i64::MIN, -1, MAX_CURSOR_SECS * 1_000_000] {
            let far = URL_SAFE_NO_PAD.encode([&micros.to_be_bytes()[..], &[0; 16]].concat());
            assert_eq!(PageCursor::decode(&far), Err(MalformedCursor), "{micros}");
        }
    }

    #[test]
    fn a_page_has_a_next_only_when_a_row_is_past_it() {
        let rows = || {
            (0..3)
                .map(|n| record(n, 1_000 - n as i64))
                .collect::<Vec<_>>()
        };
        let full = JobPage::from_rows(rows(), 2, Some(3));
        assert_eq!(full.jobs.len(), 2);
        let last = &full.jobs[1];
        assert_eq!(
            full.next,
            Some(PageCursor {
                created_at: last.created_at,
                id: last.id
            })
        );
        let exact = JobPage::from_rows(rows(), 3, Some(3));
        assert_eq!((exact.jobs.len(), exact.next), (3, None));
        assert_eq!(JobPage::from_rows(Vec::new(), 20, None).next, None);
    }

    #[test]
    fn occupancy_checks_in_admission_order() {
        let limits = CapacityLimits {
            max_queued: 3,
            max_anonymous_queued: Some(2),
            max_rendering: 1,
            max_active_per_client: 1,
            max_active_per_network: Some(2),
            max_active_per_wide_network: Some(3),
            farm: FarmRoom {
                render_slots: 1,
                release_ahead: 0,
            },
        };
        // (queued, anonymous queued, rendering, active for the client, for its network, for its
        // wide network)
        let at = |(queued, anonymous_queued, rendering, client, network, wide_network)| Occupancy {
            capacity: Capacity {
                queued,
                rendering,
                anonymous_queued,
            },
            active_for_client: client,
            active_for_network: network,
            active_for_wide_network: wide_network,
            duplicate: None,
            failed_recently: None,
        };
        // Each count at its cap refuses, the earlier checks first.
        let cases = [
            ((2, 1, 0, 0, 1, 2), Ok(())),
            ((3, 2, 1, 1, 2, 3), Err(NoRoom::QueueFull)),
            ((2, 2, 1, 1, 2, 3), Err(NoRoom::AnonymousQueueFull)),
            ((2, 1, 1, 1, 2, 3), Err(NoRoom::RenderCapacity)),
            ((2, 1, 0, 1, 2, 3), Err(NoRoom::TooManyActiveJobs)),
            ((2, 1, 0, 0, 2, 3), Err(NoRoom::TooManyNetworkJobs)),
            ((2, 1, 0, 0, 1, 3), Err(NoRoom::TooManyWideNetworkJobs)),
        ];
        for (counts, expected) in cases {
            let occupancy = at(counts);
            assert_eq!(occupancy.check(&limits), expected, "{occupancy:?}");
        }
        // A key's job: no share, no network caps.
        let keyed = CapacityLimits {
            max_anonymous_queued: None,
            max_active_per_network: None,
            max_active_per_wide_network: None,
            ..limits
        };
        assert_eq!(at((2, 2, 0, 0, 9, 9)).check(&keyed), Ok(()));
    }
}
