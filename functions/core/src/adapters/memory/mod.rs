//! In-memory adapters behind every port, for the use cases' unit tests: no Postgres, no AWS
//! stand-in, microseconds a test. They keep the guarantees the real adapters give (one lock
//! serializes what `admit_job` serializes; a key is completed with its job; conditional object
//! writes), record which port each call went to, in order, and can be told to fail.
//!
//! The integration tests (tests/api) keep crossing the real boundaries; these check the order
//! and the decisions of the use cases, fast.

mod callbacks;
mod connections;
#[cfg(test)]
mod contracts;
mod farm;
mod idempotency;
mod jobs;
mod keys;
mod limiter;
mod objects;
mod outbox;
mod policy;
mod pushes;
mod queue;
mod replay_urls;
mod secrets;
mod skin_names;
mod wake;

pub use callbacks::MemoryCallbacks;
pub use connections::MemoryConnections;
pub use keys::MemoryKeys;
pub use limiter::MemoryLimiter;
pub use objects::MemoryObjects;
pub use policy::MemoryPolicy;
pub use queue::MemoryQueue;
pub use replay_urls::MemoryReplayUrls;
pub use secrets::MemorySecrets;
pub use wake::MemoryWake;

use idempotency::key_of;

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

/// The pusher the in-memory wiring sends frames through (the dev server's own).
pub use crate::adapters::local_sockets::LocalSockets;
use crate::domain::caller::Caller;
use crate::domain::events::Topic;
use crate::domain::failure::FailureCode;
use crate::domain::farm::{FarmState, InFlight, QueuePlace};
use crate::domain::hash::{ReplayHash, RequestHash};
use crate::domain::rate::LimitScope;
use crate::domain::sandbox;
use crate::domain::{ClientKey, JobId, JobStatus, RateDecision, SkinName};
use crate::ports::artifacts::ArtifactLinks;
use crate::ports::health::Dependency;
use crate::ports::idempotency::{Claim, Held, IdempotencyStore, StoredResponse, KEY_TTL};
use crate::ports::jobs::{
    ActiveWork, Admission, Capacity, CapacityLimits, Deleted, FarmRoom, JobAdmission,
    JobHousekeeping, JobPage, JobQuery, JobReads, JobRecord, JobRelease, JobReport, JobTransitions,
    Load, NewJob, NoRoom, Occupancy, OccupancyFound, OccupancyLook, Overview, QueueAges, QueueWait,
    Resolved, TransitionOutcome,
};
use crate::ports::leased::{LeaseClaim, LeasedQueue, Retry, JUST_DUE};
use crate::ports::limiter::{Hit, LimiterUnavailable, RateLimiter};
use crate::ports::outbox::OutboxEvent;
use crate::ports::queue::{EventPublisher, Published};
use crate::ports::replays::{ReplayStore, StorageError};
use crate::ports::secrets::{SecretStore, SecretVersions};
use crate::ports::skins::{
    self, ByteChunks, Copied, Freeing, IngestClaim, IngestTicket, NameClaim, NameState,
    ObjectVersion, PresignedPost, Removal, SkinRegistry, SkinStore,
};
use crate::ports::wake::{delay_secs, DispatcherWake};
use crate::ports::{Ports, StoreError};

/// Every adapter of one in-memory App, shared with the test that drives it.
#[derive(Clone)]
pub struct Memory {
    pub calls: Calls,
    pub database: Arc<MemoryDatabase>,
    pub limiter: Arc<MemoryLimiter>,
    pub objects: Arc<MemoryObjects>,
    pub queue: Arc<MemoryQueue>,
    pub keys: Arc<MemoryKeys>,
    pub policy: Arc<MemoryPolicy>,
    pub secrets: Arc<MemorySecrets>,
    pub callbacks: Arc<MemoryCallbacks>,
    /// Replays served at URLs (`replay_url`).
    pub replay_urls: Arc<MemoryReplayUrls>,
    pub wake: Arc<MemoryWake>,
    pub connections: Arc<MemoryConnections>,
    /// The sockets frames are pushed to: a test registers a connection to read its frames.
    pub sockets: Arc<LocalSockets>,
}

impl Memory {
    /// Fresh in-memory adapters, sharing one call log.
    pub fn new() -> Self {
        let calls = Calls::default();
        Memory {
            database: Arc::new(MemoryDatabase::new(calls.clone())),
            limiter: Arc::new(MemoryLimiter::new(calls.clone())),
            objects: Arc::new(MemoryObjects::new(calls.clone())),
            queue: Arc::new(MemoryQueue::new(calls.clone())),
            keys: Arc::default(),
            policy: Arc::default(),
            secrets: Arc::new(MemorySecrets::default()),
            callbacks: Arc::default(),
            replay_urls: Arc::default(),
            wake: Arc::default(),
            connections: Arc::default(),
            sockets: Arc::default(),
            calls,
        }
    }

    /// These adapters behind every port, for `App::from_ports`.
    pub fn ports(&self) -> Ports {
        Ports {
            limiter: self.limiter.clone(),
            jobs: self.database.clone(),
            replays: self.objects.clone(),
            outbox: self.database.clone(),
            queue: self.queue.clone(),
            callbacks: self.callbacks.clone(),
            callback_addresses: self.callbacks.clone(),
            replay_fetcher: self.replay_urls.clone(),
            skins: self.objects.clone(),
            skin_names: self.database.clone(),
            idempotency: self.database.clone(),
            keys: self.keys.clone(),
            policy: self.policy.clone(),
            artifacts: self.objects.clone(),
            secrets: self.secrets.clone(),
            wake: Some(self.wake.clone()),
            connections: self.connections.clone(),
            pusher: Some(self.sockets.clone()),
            pushes: self.database.clone(),
            dependencies: vec![self.database.clone() as Arc<dyn Dependency>],
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

/// The ports called, in order, as `port.method`.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<&'static str>>>);

impl Calls {
    fn record(&self, call: &'static str) {
        lock(&self.0).push(call);
    }

    pub fn take(&self) -> Vec<&'static str> {
        std::mem::take(&mut *lock(&self.0))
    }
}

/// A test's switch that takes an adapter down: while it is down, the adapter's calls fail.
#[derive(Default)]
struct Outage(AtomicBool);

impl Outage {
    fn set(&self, down: bool) {
        self.0.store(down, Ordering::SeqCst);
    }

    fn is_down(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// A store call's `failure` while down.
    fn check(&self, failure: &str) -> Result<(), StoreError> {
        match self.is_down() {
            true => Err(StoreError::new(failure)),
            false => Ok(()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A test that panicked while holding it has failed already.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How the next `admit` goes wrong, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitFault {
    /// The statement commits, but its answer never comes (an unknown outcome).
    LateAnswer,
    /// The statement never arrives until after it was resolved, then runs (a held statement).
    ArrivesAfterResolve,
    /// The server refuses it (nothing applied).
    Error,
}

#[derive(Debug, Clone)]
struct MemoryJob {
    id: JobId,
    client: ClientKey,
    network: Option<ClientKey>,
    wide_network: Option<ClientKey>,
    status: JobStatus,
    progress: f32,
    replay_sha256: ReplayHash,
    config: serde_json::Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    error: Option<String>,
    error_code: Option<FailureCode>,
    video_key: Option<String>,
    thumb_key: Option<String>,
    /// What the replay says (jobs.replay).
    replay: Option<serde_json::Value>,
    sandbox: bool,
    /// When the janitor fails the job if no report came (jobs.deadline_at).
    deadline: Option<DateTime<Utc>>,
    /// Whether the job has a `callback_url`.
    calls_back: bool,
    /// When its last callback was queued (jobs.callback_at).
    callback_at: Option<DateTime<Utc>>,
    /// Its expected render-seconds (jobs.render_cost); `None` for a job made by `occupy`.
    cost: Option<f64>,
    /// Its fair start tag (jobs.fair_start).
    fair_start: f64,
    /// When the farm was given it (jobs.released_at).
    released_at: Option<DateTime<Utc>>,
    /// When a worker first reported it (jobs.started_at).
    started_at: Option<DateTime<Utc>>,
    /// Its changes of status or progress (jobs.event_seq).
    event_seq: i64,
    /// The client's own label (jobs.client_reference).
    client_reference: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventStatus {
    Pending,
    Dispatched,
    Failed,
}

#[derive(Debug, Clone)]
struct MemoryEvent {
    event: OutboxEvent,
    status: EventStatus,
    available_at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
struct KeyRow {
    request_hash: RequestHash,
    token: uuid::Uuid,
    response: Option<StoredResponse>,
    claimed_at: DateTime<Utc>,
}

#[derive(Default)]
struct Tables {
    jobs: Vec<MemoryJob>,
    /// Fenced job ids, with when.
    fences: HashMap<JobId, DateTime<Utc>>,
    /// Spent nonces, until they expire.
    nonces: HashMap<String, DateTime<Utc>>,
    events: Vec<MemoryEvent>,
    keys: HashMap<(String, &'static str, String), KeyRow>,
    /// Skin names by their folded form.
    skins: HashMap<String, MemorySkin>,
    /// Presigned uploads' ingests by upload key.
    ingests: HashMap<String, MemoryIngest>,
    /// Reserved skin names, folded.
    skin_reservations: HashSet<String>,
    /// A held `admit` that runs at the next `resolve`'s end (see `AdmitFault`).
    held_admission: Option<(NewJob, CapacityLimits)>,
    /// The system virtual time (fair_clock).
    fair_clock: f64,
    /// Each fair client's last finish tag (fair_clients).
    fair_clients: HashMap<String, f64>,
    /// Watched topics by name, until when (event_watches).
    watches: HashMap<String, DateTime<Utc>>,
    /// Queued live-event pushes by job (job_pushes).
    pushes: HashMap<JobId, MemoryPush>,
}

/// A queued push (a row of job_pushes).
#[derive(Debug, Clone)]
struct MemoryPush {
    client: ClientKey,
    sequence: i64,
    due_at: DateTime<Utc>,
    attempts: i32,
    leased_until: Option<DateTime<Utc>>,
}

struct MemorySkin {
    name: String,
    token: uuid::Uuid,
    stored: bool,
    /// When the operator removed it (skins.removed_at).
    removed_at: Option<DateTime<Utc>>,
}

struct MemoryIngest {
    etag: String,
    claim: Option<uuid::Uuid>,
    claimed_at: DateTime<Utc>,
    finished: bool,
}

/// The database's tables behind the jobs, outbox, idempotency and skin-name ports. One mutex
/// plays `admit_job`'s locks: each call is atomic, as each statement is.
pub struct MemoryDatabase {
    calls: Calls,
    tables: Mutex<Tables>,
    admit_fault: Mutex<Option<AdmitFault>>,
    resolve_fails: AtomicBool,
    overview_fails: AtomicBool,
    /// Lease of a fresh admission's event, as `PgJobStore` is given it.
    event_lease: Duration,
}

const ACTIVE: [JobStatus; 3] = [
    JobStatus::Queued,
    JobStatus::Downloading,
    JobStatus::Rendering,
];

impl MemoryDatabase {
    fn new(calls: Calls) -> Self {
        Self {
            calls,
            tables: Mutex::default(),
            admit_fault: Mutex::default(),
            resolve_fails: AtomicBool::new(false),
            overview_fails: AtomicBool::new(false),
            event_lease: Duration::from_secs(30),
        }
    }

    /// One port call as one statement: `call` recorded, then the tables locked until the guard
    /// drops.
    fn statement(&self, call: &'static str) -> MutexGuard<'_, Tables> {
        self.calls.record(call);
        lock(&self.tables)
    }

    /// The next `admit` goes wrong this way.
    pub fn fail_next_admit(&self, fault: AdmitFault) {
        *lock(&self.admit_fault) = Some(fault);
    }

    /// Every `resolve` fails (the outcome stays unknown).
    pub fn fail_resolve(&self, fails: bool) {
        self.resolve_fails.store(fails, Ordering::SeqCst);
    }

    /// Every `overview` fails (the database is down for `GET /v1/status`).
    pub fn fail_overview(&self, fails: bool) {
        self.overview_fails.store(fails, Ordering::SeqCst);
    }

    pub fn job_ids(&self) -> Vec<JobId> {
        lock(&self.tables).jobs.iter().map(|job| job.id).collect()
    }

    /// Idempotency claims still in progress.
    pub fn claims_in_progress(&self) -> usize {
        lock(&self.tables)
            .keys
            .values()
            .filter(|row| row.response.is_none())
            .count()
    }

    /// Makes `count` active jobs of other clients in `status`.
    pub fn occupy(&self, status: JobStatus, count: usize) {
        let mut tables = lock(&self.tables);
        for n in 0..count {
            let client = ClientKey::new(format!("192.0.2.{}", n % 250).parse().unwrap(), 64);
            tables.jobs.push(MemoryJob {
                id: JobId::new(),
                client,
                network: None,
                wide_network: None,
                status,
                progress: 0.0,
                replay_sha256: ReplayHash::of(&n.to_be_bytes()),
                config: serde_json::json!({}),
                created_at: Utc::now(),
                updated_at: Utc::now(),
                error: None,
                error_code: None,
                video_key: None,
                thumb_key: None,
                replay: None,
                sandbox: false,
                deadline: None,
                calls_back: false,
                callback_at: None,
                cost: None,
                fair_start: 0.0,
                released_at: Some(Utc::now()),
                started_at: None,
                event_seq: 0,
                client_reference: None,
            });
        }
    }

    /// Moves every job's `created_at` and `updated_at` back by `age`.
    pub fn age_jobs(&self, age: Duration) {
        for job in lock(&self.tables).jobs.iter_mut() {
            job.created_at -= age;
            job.updated_at -= age;
            job.deadline = job.deadline.map(|deadline| deadline - age);
            job.released_at = job.released_at.map(|at| at - age);
            job.started_at = job.started_at.map(|at| at - age);
        }
    }

    /// Moves every skin removal back by `age`.
    pub fn age_skin_removals(&self, age: Duration) {
        for skin in lock(&self.tables).skins.values_mut() {
            skin.removed_at = skin.removed_at.map(|at| at - age);
        }
    }

    fn admit_now(&self, tables: &mut Tables, job: &NewJob, limits: &CapacityLimits) -> Admission {
        if tables.fences.contains_key(&job.id) {
            return Admission::Abandoned;
        }
        let occupancy = occupancy_of(
            tables,
            &job.client,
            job.network.as_ref(),
            job.wide_network.as_ref(),
            &job.replay_sha256,
            job.sandbox.is_some(),
        );
        if let Some(existing) = occupancy.duplicate {
            return Admission::NoRoom(NoRoom::Duplicate(existing));
        }
        if let Err(no_room) = occupancy.check(limits) {
            return Admission::NoRoom(no_room);
        }
        if let Some((claim, response)) = &job.completes {
            match tables.keys.get_mut(&key_of(claim)) {
                Some(row) if row.token == claim.token && row.response.is_none() => {
                    row.response = Some(response.clone());
                }
                _ => return Admission::ClaimLost,
            }
        }
        let now = Utc::now();
        let (fair_start, fair_finish) = farm::tags(tables, job);
        if job.sandbox.is_none() {
            let client = job.fair_client().as_str().to_owned();
            tables.fair_clients.insert(client, fair_finish);
        }
        // A sandbox job is stored final, as admit_job stores it.
        let (status, progress, artifacts, failure) =
            job.sandbox_final()
                .unwrap_or((JobStatus::Queued, 0.0, false, None));
        let sample = |key: &str| artifacts.then(|| key.to_owned());
        tables.jobs.push(MemoryJob {
            id: job.id,
            client: job.client.clone(),
            network: job.network.clone(),
            wide_network: job.wide_network.clone(),
            status,
            progress,
            replay_sha256: job.replay_sha256,
            config: serde_json::to_value(&job.options).unwrap_or_default(),
            created_at: now,
            updated_at: now,
            error: failure.map(sandbox::sample_failure),
            error_code: failure,
            video_key: sample(sandbox::SAMPLE_VIDEO_KEY),
            thumb_key: sample(sandbox::SAMPLE_THUMB_KEY),
            replay: serde_json::to_value(&job.replay).ok(),
            sandbox: job.sandbox.is_some(),
            deadline: None,
            calls_back: job.callback.is_some(),
            callback_at: job.callback.as_ref().map(|_| now),
            cost: Some(job.cost.secs()),
            fair_start,
            released_at: None,
            started_at: None,
            event_seq: 0,
            client_reference: job.client_reference.as_ref().map(|r| r.as_str().to_owned()),
        });
        job_changed(tables, job.id, false);
        // Held until released (available_at 'infinity' in Postgres).
        if let Some(event) = job.held_event(tables.events.len() as i64 + 1) {
            tables.events.push(MemoryEvent {
                event,
                status: EventStatus::Pending,
                available_at: DateTime::<Utc>::MAX_UTC,
            });
        }
        Admission::Admitted(Vec::new())
    }
}

/// What the `count_job_event` and `queue_job_push` triggers do when a job is inserted (`bump`
/// false) or its status or progress changed (`bump` true): the change is counted in its
/// `event_seq`, and, if its job topic or its key's topic is watched, its push is queued or made due
/// now. Called wherever a memory job changes. Whether a push was queued.
fn job_changed(tables: &mut Tables, id: JobId, bump: bool) -> bool {
    let Some(job) = tables.jobs.iter_mut().find(|j| j.id == id) else {
        return false;
    };
    if bump {
        job.event_seq += 1;
    }
    let (sequence, client) = (job.event_seq, job.client.clone());
    let mut topics = vec![Topic::Job(id).name()];
    if client.scope() == LimitScope::Key {
        topics.push(Topic::Key(client.clone()).name());
    }
    let now = Utc::now();
    let watched = topics
        .iter()
        .any(|topic| tables.watches.get(topic).is_some_and(|until| *until > now));
    if !watched {
        return false;
    }
    let push = tables.pushes.entry(id).or_insert(MemoryPush {
        client,
        sequence,
        due_at: now,
        attempts: 0,
        leased_until: None,
    });
    push.sequence = push.sequence.max(sequence);
    push.due_at = now;
    push.attempts = 0;
    push.leased_until = None;
    true
}

fn occupancy_of(
    tables: &Tables,
    client: &ClientKey,
    network: Option<&ClientKey>,
    wide_network: Option<&ClientKey>,
    sha256: &ReplayHash,
    sandbox: bool,
) -> Occupancy {
    if sandbox {
        let since = Utc::now() - sandbox::ACTIVE_FOR;
        let recent: Vec<&MemoryJob> = tables
            .jobs
            .iter()
            .filter(|j| j.sandbox && &j.client == client && j.created_at > since)
            .collect();
        return Occupancy {
            capacity: Capacity::default(),
            active_for_client: recent.len() as i64,
            active_for_network: 0,
            active_for_wide_network: 0,
            duplicate: recent
                .iter()
                .find(|j| &j.replay_sha256 == sha256)
                .map(|j| j.id),
            failed_recently: None,
        };
    }
    let active: Vec<&MemoryJob> = tables
        .jobs
        .iter()
        .filter(|j| ACTIVE.contains(&j.status))
        .collect();
    Occupancy {
        capacity: capacity_of(tables),
        active_for_client: active.iter().filter(|j| &j.client == client).count() as i64,
        active_for_network: active
            .iter()
            .filter(|j| network.is_some() && j.network.as_ref() == network)
            .count() as i64,
        active_for_wide_network: active
            .iter()
            .filter(|j| wide_network.is_some() && j.wide_network.as_ref() == wide_network)
            .count() as i64,
        duplicate: active
            .iter()
            .find(|j| &j.client == client && &j.replay_sha256 == sha256)
            .map(|j| j.id),
        failed_recently: None,
    }
}

/// What is left of the cooldown after the latest failed real render of `sha256`.
fn failed_recently(tables: &Tables, sha256: &ReplayHash, cooldown: Duration) -> Option<Duration> {
    let cooldown = chrono::Duration::from_std(cooldown).ok()?;
    let ends = tables
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Failed && !j.sandbox && &j.replay_sha256 == sha256)
        .filter(|j| {
            j.error_code
                .is_some_and(|code| FailureCode::THE_REPLAYS.contains(&code))
        })
        .map(|j| j.updated_at + cooldown)
        .max()?;
    (ends - Utc::now())
        .to_std()
        .ok()
        .filter(|left| !left.is_zero())
}

/// The global counts, as the `job_counts` row keeps them.
fn capacity_of(tables: &Tables) -> Capacity {
    let count = |counted: &dyn Fn(&MemoryJob) -> bool| {
        tables.jobs.iter().filter(|j| counted(j)).count() as i64
    };
    let queued = |j: &MemoryJob| j.status == JobStatus::Queued;
    Capacity {
        queued: count(&queued),
        rendering: count(&|j| matches!(j.status, JobStatus::Downloading | JobStatus::Rendering)),
        anonymous_queued: count(&|j| queued(j) && j.client.scope() == LimitScope::Client),
    }
}

fn batch_len(batch: i64) -> usize {
    usize::try_from(batch).unwrap_or(0)
}

/// Removes up to `batch` entries of `map` that `due` gives an age, oldest first: a batched
/// `DELETE … ORDER BY age LIMIT batch`. Returns how many.
fn prune_oldest<K, V, A>(map: &mut HashMap<K, V>, batch: i64, due: impl Fn(&V) -> Option<A>) -> u64
where
    K: Clone + Eq + std::hash::Hash,
    A: Ord,
{
    let mut aged: Vec<(A, &K)> = map
        .iter()
        .filter_map(|(key, value)| due(value).map(|age| (age, key)))
        .collect();
    aged.sort_by(|a, b| a.0.cmp(&b.0));
    let doomed: Vec<K> = aged
        .into_iter()
        .take(batch_len(batch))
        .map(|(_, key)| key.clone())
        .collect();
    for key in &doomed {
        map.remove(key);
    }
    doomed.len() as u64
}

#[async_trait]
impl Dependency for MemoryDatabase {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// The leased tables' `next_due` over these pending items' due times: how long until the
/// earliest of those not due for longer than `JUST_DUE`, zero if it is due already.
fn next_due(times: impl Iterator<Item = DateTime<Utc>>) -> Option<Duration> {
    let now = Utc::now();
    let since = now - JUST_DUE;
    times
        .filter(|&at| at > since)
        .min()
        .map(|at| (at - now).to_std().unwrap_or_default())
}
