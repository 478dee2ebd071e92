//! In-memory adapters behind every port, for the use cases' unit tests: no Postgres, no AWS
//! stand-in, microseconds a test. They keep the guarantees the real adapters give (one lock
//! serializes what `admit_job` serializes; a key is completed with its job; conditional object
//! writes), record which port each call went to, in order, and can be told to fail.
//!
//! The integration tests (tests/api) keep crossing the real boundaries; these check the order
//! and the decisions of the use cases, fast.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::domain::caller::Caller;
use crate::domain::rate::LimitScope;
use crate::domain::sandbox;
use crate::domain::{ClientKey, JobId, JobStatus, RateDecision, RateLimit, SkinName};
use crate::ports::artifacts::ArtifactLinks;
use crate::ports::health::Dependency;
use crate::ports::idempotency::{Claim, Held, IdempotencyStore, StoredResponse, KEY_TTL};
use crate::ports::jobs::{
    Admission, Capacity, CapacityLimits, Deleted, JobPage, JobQuery, JobRecord, JobStore, Load,
    NewJob, NoRoom, Nonce, Occupancy, Resolved, Transition, TransitionOutcome,
};
use crate::ports::limiter::{LimiterUnavailable, RateLimiter};
use crate::ports::outbox::{OutboxEvent, OutboxStore, Retry};
use crate::ports::queue::{EventPublisher, Published};
use crate::ports::replays::{ReplayStore, StorageError};
use crate::ports::secrets::{SecretStore, SecretVersions};
use crate::ports::skins::{
    self, ByteChunks, Copied, IngestClaim, IngestTicket, NameClaim, NameState, ObjectVersion,
    PresignedPost, SkinRegistry, SkinStore,
};
use crate::ports::{Ports, StoreError};
use crate::support::estimate::Recent;

/// Every adapter of one in-memory App, shared with the test that drives it.
#[derive(Clone)]
pub struct Memory {
    pub calls: Calls,
    pub database: Arc<MemoryDatabase>,
    pub limiter: Arc<MemoryLimiter>,
    pub objects: Arc<MemoryObjects>,
    pub queue: Arc<MemoryQueue>,
    pub keys: Arc<MemoryKeys>,
    pub secrets: Arc<MemorySecrets>,
    pub callbacks: Arc<MemoryCallbacks>,
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
            secrets: Arc::new(MemorySecrets::default()),
            callbacks: Arc::default(),
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
            skins: self.objects.clone(),
            skin_names: self.database.clone(),
            idempotency: self.database.clone(),
            keys: self.keys.clone(),
            artifacts: self.objects.clone(),
            secrets: self.secrets.clone(),
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
    status: JobStatus,
    progress: f32,
    replay_sha256: [u8; 32],
    config: serde_json::Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    error: Option<String>,
    video_key: Option<String>,
    thumb_key: Option<String>,
    sandbox: bool,
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
    request_hash: Vec<u8>,
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
    /// A held `admit` that runs at the next `resolve`'s end (see `AdmitFault`).
    held_admission: Option<(NewJob, CapacityLimits)>,
}

struct MemorySkin {
    name: String,
    token: uuid::Uuid,
    stored: bool,
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
            event_lease: Duration::from_secs(30),
        }
    }

    /// The next `admit` goes wrong this way.
    pub fn fail_next_admit(&self, fault: AdmitFault) {
        *lock(&self.admit_fault) = Some(fault);
    }

    /// Every `resolve` fails (the outcome stays unknown).
    pub fn fail_resolve(&self, fails: bool) {
        self.resolve_fails.store(fails, Ordering::SeqCst);
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
                status,
                progress: 0.0,
                replay_sha256: [n as u8; 32],
                config: serde_json::json!({}),
                created_at: Utc::now(),
                updated_at: Utc::now(),
                error: None,
                video_key: None,
                thumb_key: None,
                sandbox: false,
            });
        }
    }

    /// Moves every job's `created_at` and `updated_at` back by `age`.
    pub fn age_jobs(&self, age: Duration) {
        for job in lock(&self.tables).jobs.iter_mut() {
            job.created_at -= age;
            job.updated_at -= age;
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
            &job.replay_sha256,
            job.sandbox,
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
        // A sandbox job is stored final, as admit_job stores it (migrations/V10).
        let (status, progress) = match job.sandbox {
            true => (JobStatus::Completed, 100.0),
            false => (JobStatus::Queued, 0.0),
        };
        let sample = |key: &str| job.sandbox.then(|| key.to_owned());
        tables.jobs.push(MemoryJob {
            id: job.id,
            client: job.client.clone(),
            network: job.network.clone(),
            status,
            progress,
            replay_sha256: job.replay_sha256,
            config: serde_json::to_value(&job.options).unwrap_or_default(),
            created_at: now,
            updated_at: now,
            error: None,
            video_key: sample(sandbox::SAMPLE_VIDEO_KEY),
            thumb_key: sample(sandbox::SAMPLE_THUMB_KEY),
            sandbox: job.sandbox,
        });
        let event_id = (!job.sandbox).then_some(tables.events.len() as i64 + 1);
        let event = job.event(event_id).unwrap_or_default();
        if let Some(event) = &event {
            tables.events.push(MemoryEvent {
                event: event.clone(),
                status: EventStatus::Pending,
                available_at: now + self.event_lease,
            });
        }
        Admission::Admitted(event)
    }
}

fn key_of(claim: &Claim) -> (String, &'static str, String) {
    (
        claim.client.as_str().to_owned(),
        claim.endpoint,
        claim.key.as_str().to_owned(),
    )
}

fn occupancy_of(
    tables: &Tables,
    client: &ClientKey,
    network: Option<&ClientKey>,
    sha256: &[u8; 32],
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
            duplicate: recent
                .iter()
                .find(|j| &j.replay_sha256 == sha256)
                .map(|j| j.id),
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
        duplicate: active
            .iter()
            .find(|j| &j.client == client && &j.replay_sha256 == sha256)
            .map(|j| j.id),
    }
}

/// The global counts, as V11's `job_counts` keeps them.
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

/// A key answers for `KEY_TTL` after its claim, as `expires_at` says in Postgres.
fn expired(row: &KeyRow, now: DateTime<Utc>) -> bool {
    row.claimed_at + KEY_TTL <= now
}

fn try_claim(tables: &mut Tables, claim: &Claim, request_hash: &[u8; 32]) -> bool {
    let stale_before = Utc::now() - claim.stale_after;
    let key = key_of(claim);
    let free = match tables.keys.get(&key) {
        None => true,
        Some(row) => {
            expired(row, Utc::now()) || (row.response.is_none() && row.claimed_at < stale_before)
        }
    };
    if free {
        tables.keys.insert(
            key,
            KeyRow {
                request_hash: request_hash.to_vec(),
                token: claim.token,
                response: None,
                claimed_at: Utc::now(),
            },
        );
    }
    free
}

fn record(job: &MemoryJob, tables: &Tables) -> JobRecord {
    let queue_position = (job.status == JobStatus::Queued).then(|| {
        tables
            .jobs
            .iter()
            .filter(|q| q.status == JobStatus::Queued && q.created_at <= job.created_at)
            .count() as i64
    });
    let record = JobRecord {
        id: job.id,
        status: job.status,
        progress: job.progress,
        queue_position,
        created_at: job.created_at,
        updated_at: job.updated_at,
        error: job.error.clone(),
        config: job.config.clone(),
        video_key: job.video_key.clone(),
        thumb_key: job.thumb_key.clone(),
        recent_completed: queue_position.map(|_| completed_within_hour(tables)),
        sandbox: job.sandbox,
    };
    match job.sandbox {
        true => record.as_sandbox_shows((Utc::now() - job.created_at).to_std().unwrap_or_default()),
        false => record,
    }
}

fn completed_within_hour(tables: &Tables) -> i64 {
    let since = Utc::now() - Duration::from_secs(3600);
    tables
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Completed && j.updated_at > since && !j.sandbox)
        .count() as i64
}

#[async_trait]
impl JobStore for MemoryDatabase {
    async fn occupancy(
        &self,
        caller: &Caller,
        replay_sha256: &[u8; 32],
        claim: Option<(&Claim, &[u8; 32])>,
    ) -> Result<(Occupancy, Option<bool>), StoreError> {
        self.calls.record("jobs.occupancy");
        let mut tables = lock(&self.tables);
        let claimed = claim.map(|(claim, hash)| try_claim(&mut tables, claim, hash));
        let occupancy = occupancy_of(
            &tables,
            &caller.client,
            caller.network.as_ref(),
            replay_sha256,
            caller.is_sandbox(),
        );
        Ok((occupancy, claimed))
    }

    async fn capacity(&self) -> Result<Capacity, StoreError> {
        self.calls.record("jobs.capacity");
        Ok(capacity_of(&lock(&self.tables)))
    }

    async fn load(&self, caller: &Caller) -> Result<Load, StoreError> {
        self.calls.record("jobs.load");
        let tables = lock(&self.tables);
        let now = Utc::now();
        let oldest = |counted: &dyn Fn(&MemoryJob) -> bool| {
            tables
                .jobs
                .iter()
                .filter(|j| counted(j) && ACTIVE.contains(&j.status))
                .map(|j| (now - j.created_at).num_milliseconds() as f64 / 1000.0)
                .fold(None, |oldest: Option<f64>, age| {
                    Some(oldest.map_or(age, |o| o.max(age)))
                })
        };
        Ok(Load {
            recent: Recent {
                completed: completed_within_hour(&tables),
                median_turnaround_secs: None,
            },
            capacity: capacity_of(&tables),
            oldest_active_age_secs: oldest(&|j| j.client == caller.client),
            oldest_network_active_age_secs: caller
                .network
                .as_ref()
                .and_then(|network| oldest(&|j| j.network.as_ref() == Some(network))),
        })
    }

    async fn admit(&self, job: &NewJob, limits: &CapacityLimits) -> Result<Admission, StoreError> {
        self.calls.record("jobs.admit");
        let fault = lock(&self.admit_fault).take();
        let mut tables = lock(&self.tables);
        match fault {
            None => Ok(self.admit_now(&mut tables, job, limits)),
            Some(AdmitFault::Error) => Err(StoreError::new("55P03: lock timeout")),
            Some(AdmitFault::LateAnswer) => {
                self.admit_now(&mut tables, job, limits);
                Err(StoreError::unknown("no answer within 500 ms"))
            }
            Some(AdmitFault::ArrivesAfterResolve) => {
                tables.held_admission = Some((job.clone(), *limits));
                Err(StoreError::unknown("no answer within 500 ms"))
            }
        }
    }

    async fn resolve(&self, job: &NewJob) -> Result<Resolved, StoreError> {
        self.calls.record("jobs.resolve");
        if self.resolve_fails.load(Ordering::SeqCst) {
            return Err(StoreError::unknown("no answer within 500 ms"));
        }
        let mut tables = lock(&self.tables);
        let admitted = tables.jobs.iter().any(|j| j.id == job.id);
        let resolved = match tables.events.iter().find(|e| e.event.job_id == job.id) {
            Some(found) => Resolved::Admitted(Some(found.event.clone())),
            None if admitted => Resolved::Admitted(None),
            None => {
                tables.fences.insert(job.id, Utc::now());
                Resolved::Abandoned
            }
        };
        // The held statement arrives now, after the resolution.
        if let Some((held, limits)) = tables.held_admission.take() {
            self.admit_now(&mut tables, &held, &limits);
        }
        Ok(resolved)
    }

    async fn find(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.calls.record("jobs.find");
        let tables = lock(&self.tables);
        Ok(tables
            .jobs
            .iter()
            .find(|j| j.id == id)
            .map(|j| record(j, &tables)))
    }

    async fn list(&self, client: &ClientKey, query: &JobQuery) -> Result<JobPage, StoreError> {
        self.calls.record("jobs.list");
        let tables = lock(&self.tables);
        let position = |j: &MemoryJob| (j.created_at, j.id.as_uuid());
        let mut matching: Vec<&MemoryJob> = tables
            .jobs
            .iter()
            .filter(|j| &j.client == client)
            .filter(|j| query.status.is_none_or(|status| j.status == status))
            .filter(|j| {
                query
                    .after
                    .is_none_or(|after| position(j) < (after.created_at, after.id.as_uuid()))
            })
            .collect();
        matching.sort_by_key(|j| std::cmp::Reverse(position(j)));
        let rows = matching
            .iter()
            .take(usize::try_from(query.limit.saturating_add(1)).unwrap_or(0))
            .map(|j| record(j, &tables))
            .collect();
        Ok(JobPage::from_rows(rows, query.limit))
    }

    async fn transition(
        &self,
        id: JobId,
        transition: &Transition,
        nonce: &Nonce,
    ) -> Result<TransitionOutcome, StoreError> {
        self.calls.record("jobs.transition");
        let mut tables = lock(&self.tables);
        if tables.nonces.contains_key(&nonce.value) {
            return Ok(TransitionOutcome::NonceReused);
        }
        tables.nonces.insert(nonce.value.clone(), nonce.expires_at);
        let Some(job) = tables.jobs.iter_mut().find(|j| j.id == id) else {
            return Ok(TransitionOutcome::UnknownJob);
        };
        if !transition.to.predecessors().contains(&job.status) {
            return Ok(TransitionOutcome::Illegal {
                current: job.status,
            });
        }
        let progress = transition
            .progress
            .unwrap_or(if job.status == transition.to {
                job.progress
            } else {
                0.0
            });
        job.status = transition.to;
        job.progress = progress;
        job.video_key = transition.video_key.clone().or(job.video_key.take());
        job.thumb_key = transition.thumb_key.clone().or(job.thumb_key.take());
        job.error = transition.error.clone().or(job.error.take());
        job.updated_at = Utc::now();
        Ok(TransitionOutcome::Applied {
            status: job.status,
            progress,
        })
    }

    async fn expire_queued(&self, ttl: Duration) -> Result<u64, StoreError> {
        self.calls.record("jobs.expire_queued");
        let before = Utc::now() - ttl;
        let mut tables = lock(&self.tables);
        let mut expired = 0;
        for job in tables.jobs.iter_mut() {
            if job.status == JobStatus::Queued && job.created_at < before {
                job.status = JobStatus::Expired;
                job.updated_at = Utc::now();
                expired += 1;
            }
        }
        Ok(expired)
    }

    async fn fail_stalled(&self, stall_timeout: Duration) -> Result<u64, StoreError> {
        self.calls.record("jobs.fail_stalled");
        let before = Utc::now() - stall_timeout;
        let mut tables = lock(&self.tables);
        let mut failed = 0;
        for job in tables.jobs.iter_mut() {
            let working = matches!(job.status, JobStatus::Downloading | JobStatus::Rendering);
            if working && job.updated_at < before {
                job.status = JobStatus::Failed;
                job.updated_at = Utc::now();
                failed += 1;
            }
        }
        Ok(failed)
    }

    async fn delete_ended(&self, retention: Duration, batch: i64) -> Result<Deleted, StoreError> {
        self.calls.record("jobs.delete_ended");
        let before = Utc::now() - retention;
        let tables = &mut *lock(&self.tables);
        let mut ended: Vec<&MemoryJob> = tables
            .jobs
            .iter()
            .filter(|j| !j.status.is_active() && j.updated_at < before)
            .collect();
        ended.sort_by_key(|j| j.updated_at);
        let doomed: HashSet<JobId> = ended.iter().take(batch_len(batch)).map(|j| j.id).collect();
        let (jobs, events) = (tables.jobs.len(), tables.events.len());
        tables.jobs.retain(|j| !doomed.contains(&j.id));
        tables.events.retain(|e| !doomed.contains(&e.event.job_id));
        Ok(Deleted {
            jobs: (jobs - tables.jobs.len()) as u64,
            outbox_events: (events - tables.events.len()) as u64,
        })
    }

    async fn prune_nonces(&self, batch: i64) -> Result<u64, StoreError> {
        self.calls.record("jobs.prune_nonces");
        let now = Utc::now();
        Ok(prune_oldest(
            &mut lock(&self.tables).nonces,
            batch,
            |expires_at| (*expires_at < now).then_some(*expires_at),
        ))
    }

    async fn prune_fences(&self, batch: i64) -> Result<u64, StoreError> {
        self.calls.record("jobs.prune_fences");
        let day_ago = Utc::now() - Duration::from_secs(24 * 3600);
        Ok(prune_oldest(
            &mut lock(&self.tables).fences,
            batch,
            |fenced_at| (*fenced_at < day_ago).then_some(*fenced_at),
        ))
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
impl OutboxStore for MemoryDatabase {
    async fn claim(
        &self,
        limit: i64,
        lease: Duration,
        max_attempts: i32,
    ) -> Result<Vec<OutboxEvent>, StoreError> {
        self.calls.record("outbox.claim");
        let now = Utc::now();
        let mut tables = lock(&self.tables);
        let mut claimed = Vec::new();
        for row in tables.events.iter_mut() {
            if claimed.len() as i64 >= limit {
                break;
            }
            let due = row.status == EventStatus::Pending && row.available_at <= now;
            if due && row.event.attempts < max_attempts {
                row.event.attempts += 1;
                row.available_at = now + lease;
                claimed.push(row.event.clone());
            }
        }
        Ok(claimed)
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        self.calls.record("outbox.mark_dispatched");
        for row in lock(&self.tables).events.iter_mut() {
            if ids.contains(&row.event.id) {
                row.status = EventStatus::Dispatched;
            }
        }
        Ok(())
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        self.calls.record("outbox.mark_retry");
        let mut changed = 0;
        for row in lock(&self.tables).events.iter_mut() {
            if let Some(retry) = retries.iter().find(|r| r.id == row.event.id) {
                row.available_at = Utc::now() + retry.delay;
                if row.event.attempts >= max_attempts {
                    row.status = EventStatus::Failed;
                }
                changed += 1;
            }
        }
        Ok(changed)
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        self.calls.record("outbox.fail_exhausted");
        let now = Utc::now();
        let mut failed = 0;
        for row in lock(&self.tables).events.iter_mut() {
            let spent = row.event.attempts >= max_attempts && row.available_at <= now;
            if row.status == EventStatus::Pending && spent {
                row.status = EventStatus::Failed;
                failed += 1;
            }
        }
        Ok(failed)
    }
}

#[async_trait]
impl IdempotencyStore for MemoryDatabase {
    async fn claim(
        &self,
        claim: &Claim,
        request_hash: &[u8; 32],
    ) -> Result<Result<(), Option<Held>>, StoreError> {
        self.calls.record("idempotency.claim");
        let mut tables = lock(&self.tables);
        if try_claim(&mut tables, claim, request_hash) {
            return Ok(Ok(()));
        }
        Ok(Err(held(&tables, claim)))
    }

    async fn held(&self, claim: &Claim) -> Result<Option<Held>, StoreError> {
        self.calls.record("idempotency.held");
        Ok(held(&lock(&self.tables), claim))
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), StoreError> {
        self.calls.record("idempotency.complete");
        if let Some(row) = lock(&self.tables).keys.get_mut(&key_of(claim)) {
            if row.token == claim.token {
                row.response = Some(response.clone());
            }
        }
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.calls.record("idempotency.release");
        let mut tables = lock(&self.tables);
        let key = key_of(claim);
        let ours = tables
            .keys
            .get(&key)
            .is_some_and(|row| row.token == claim.token && row.response.is_none());
        if ours {
            tables.keys.remove(&key);
        }
        Ok(())
    }

    async fn prune(&self, batch: i64) -> Result<u64, StoreError> {
        self.calls.record("idempotency.prune");
        let now = Utc::now();
        Ok(prune_oldest(&mut lock(&self.tables).keys, batch, |row| {
            expired(row, now).then_some(row.claimed_at)
        }))
    }
}

fn held(tables: &Tables, claim: &Claim) -> Option<Held> {
    let now = Utc::now();
    tables
        .keys
        .get(&key_of(claim))
        .filter(|row| !expired(row, now))
        .map(|row| match &row.response {
            Some(response) => Held::Completed {
                request_hash: row.request_hash.clone(),
                response: response.clone(),
            },
            None => Held::InProgress {
                request_hash: row.request_hash.clone(),
            },
        })
}

#[async_trait]
impl SkinRegistry for MemoryDatabase {
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, StoreError> {
        self.calls.record("skin_names.claim");
        let mut tables = lock(&self.tables);
        match tables.skins.get(&folded(name.as_str())) {
            Some(skin) if skin.stored => Ok(NameClaim::Stored),
            Some(_) => Ok(NameClaim::Held),
            None => {
                let token = uuid::Uuid::new_v4();
                let skin = MemorySkin {
                    name: name.as_str().to_owned(),
                    token,
                    stored: false,
                };
                tables.skins.insert(folded(name.as_str()), skin);
                Ok(NameClaim::Claimed(skins::Claim {
                    name: name.clone(),
                    token,
                }))
            }
        }
    }

    async fn confirm(
        &self,
        claim: &skins::Claim,
        completes: Option<(&Claim, &StoredResponse)>,
    ) -> Result<(), StoreError> {
        self.calls.record("skin_names.confirm");
        let mut tables = lock(&self.tables);
        match tables.skins.get_mut(&folded(claim.name.as_str())) {
            Some(skin) if skin.token == claim.token => skin.stored = true,
            _ => return Err(StoreError::new("the claim was lost")),
        }
        if let Some((key, response)) = completes {
            if let Some(row) = tables.keys.get_mut(&key_of(key)) {
                if row.token == key.token {
                    row.response = Some(response.clone());
                }
            }
        }
        Ok(())
    }

    async fn release(&self, claim: &skins::Claim) -> Result<(), StoreError> {
        self.calls.record("skin_names.release");
        let mut tables = lock(&self.tables);
        let key = folded(claim.name.as_str());
        if tables
            .skins
            .get(&key)
            .is_some_and(|skin| skin.token == claim.token && !skin.stored)
        {
            tables.skins.remove(&key);
        }
        Ok(())
    }

    async fn state(&self, name: &SkinName) -> Result<NameState, StoreError> {
        self.calls.record("skin_names.state");
        Ok(match lock(&self.tables).skins.get(&folded(name.as_str())) {
            Some(skin) if skin.stored => NameState::Stored,
            Some(_) => NameState::Held,
            None => NameState::Free,
        })
    }

    async fn list(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        self.calls.record("skin_names.list");
        let tables = lock(&self.tables);
        let mut names: Vec<String> = tables
            .skins
            .values()
            .filter(|skin| skin.stored && skin.name.as_str() > after)
            .map(|skin| skin.name.clone())
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        Ok(names)
    }

    async fn claim_ingest(
        &self,
        ticket: &IngestTicket,
        etag: &str,
    ) -> Result<IngestClaim, StoreError> {
        self.calls.record("skin_names.claim_ingest");
        let mut tables = lock(&self.tables);
        match tables.ingests.get_mut(&ticket.key) {
            None => {
                let ingest = MemoryIngest {
                    etag: etag.to_owned(),
                    claim: Some(ticket.token),
                    claimed_at: Utc::now(),
                    finished: false,
                };
                tables.ingests.insert(ticket.key.clone(), ingest);
                Ok(IngestClaim::Ours)
            }
            Some(ingest) if ingest.etag != etag => Ok(IngestClaim::Replaced),
            Some(ingest) if ingest.finished => Ok(IngestClaim::Done),
            Some(ingest) if ingest.claim.is_some() => Ok(IngestClaim::Running),
            Some(ingest) => {
                ingest.claim = Some(ticket.token);
                ingest.claimed_at = Utc::now();
                Ok(IngestClaim::Ours)
            }
        }
    }

    async fn finish_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        self.calls.record("skin_names.finish_ingest");
        match lock(&self.tables).ingests.get_mut(&ticket.key) {
            Some(ingest) if ingest.claim == Some(ticket.token) && !ingest.finished => {
                ingest.finished = true;
                Ok(())
            }
            _ => Err(StoreError::new("the ingest claim was lost")),
        }
    }

    async fn release_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        self.calls.record("skin_names.release_ingest");
        if let Some(ingest) = lock(&self.tables).ingests.get_mut(&ticket.key) {
            if ingest.claim == Some(ticket.token) && !ingest.finished {
                ingest.claim = None;
            }
        }
        Ok(())
    }

    async fn prune_ingests(&self, older_than: Duration, limit: u64) -> Result<u64, StoreError> {
        self.calls.record("skin_names.prune_ingests");
        let cutoff = Utc::now() - older_than;
        let ingests = &mut lock(&self.tables).ingests;
        let mut old: Vec<(DateTime<Utc>, String)> = ingests
            .iter()
            .filter(|(_, ingest)| ingest.claimed_at < cutoff)
            .map(|(key, ingest)| (ingest.claimed_at, key.clone()))
            .collect();
        old.sort_unstable();
        old.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        for (_, key) in &old {
            ingests.remove(key);
        }
        Ok(old.len() as u64)
    }
}

/// The name skins compare by: names are ASCII and trimmed (`SkinName`), so ASCII lowercase.
fn folded(name: &str) -> String {
    name.to_ascii_lowercase()
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

/// Fixed windows in a map, exact as DynamoDB's conditional update.
pub struct MemoryLimiter {
    calls: Calls,
    hits: Mutex<HashMap<String, u64>>,
    down: AtomicBool,
}

impl MemoryLimiter {
    fn new(calls: Calls) -> Self {
        Self {
            calls,
            hits: Mutex::default(),
            down: AtomicBool::new(false),
        }
    }

    /// The limiter answers nothing until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl RateLimiter for MemoryLimiter {
    async fn hit(
        &self,
        endpoint: &'static str,
        client: &ClientKey,
        limit: RateLimit,
        now: u64,
    ) -> Result<RateDecision, LimiterUnavailable> {
        self.calls.record("limiter.hit");
        if self.down.load(Ordering::SeqCst) {
            return Err(LimiterUnavailable("the limiter is down".into()));
        }
        let (start, _) = limit.window(now);
        let mut hits = lock(&self.hits);
        let count = hits
            .entry(format!("{endpoint}#{client}#{start}"))
            .or_default();
        let allowed = *count < u64::from(limit.requests);
        if allowed {
            *count += 1;
        }
        Ok(RateDecision::new(
            endpoint,
            limit,
            allowed.then_some(*count),
            now,
        ))
    }
}

/// One bucket of objects: replays, skins, artifacts.
pub struct MemoryObjects {
    calls: Calls,
    objects: Mutex<HashMap<String, (Bytes, Option<String>)>>,
    down: AtomicBool,
}

impl MemoryObjects {
    fn new(calls: Calls) -> Self {
        Self {
            calls,
            objects: Mutex::default(),
            down: AtomicBool::new(false),
        }
    }

    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = lock(&self.objects).keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Writes fail (transiently) until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn up(&self) -> Result<(), StorageError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StorageError::transient("the bucket does not answer"))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl ReplayStore for MemoryObjects {
    async fn put(&self, key: &str, body: Bytes) -> Result<(), StorageError> {
        self.calls.record("replays.put");
        self.up()?;
        lock(&self.objects).insert(key.to_owned(), (body, None));
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.calls.record("replays.delete");
        lock(&self.objects).remove(key);
        Ok(())
    }
}

#[async_trait]
impl SkinStore for MemoryObjects {
    async fn exists(&self, name: &SkinName) -> Result<bool, StorageError> {
        self.calls.record("skins.exists");
        Ok(lock(&self.objects).contains_key(&skins::skin_key(name)))
    }

    async fn put_new(&self, name: &SkinName, body: Bytes) -> Result<bool, StorageError> {
        self.calls.record("skins.put_new");
        self.up()?;
        let content = skins::content_id(&body);
        let mut objects = lock(&self.objects);
        match objects.get(&skins::skin_key(name)) {
            Some((_, stored)) => Ok(stored.as_deref() == Some(content.as_str())),
            None => {
                objects.insert(skins::skin_key(name), (body, Some(content)));
                Ok(true)
            }
        }
    }

    async fn holds(&self, name: &SkinName, content: &str) -> Result<bool, StorageError> {
        self.calls.record("skins.holds");
        Ok(lock(&self.objects)
            .get(&skins::skin_key(name))
            .is_some_and(|(_, stored)| stored.as_deref() == Some(content)))
    }

    async fn presign_post(
        &self,
        key: &str,
        size: u64,
        _expires_at: SystemTime,
    ) -> Result<PresignedPost, StorageError> {
        self.calls.record("skins.presign_post");
        Ok(PresignedPost {
            url: "memory://bucket".into(),
            fields: [("key", key.to_owned()), ("size", size.to_string())].into(),
        })
    }

    async fn list_incoming(&self, limit: usize) -> Result<Vec<String>, StorageError> {
        self.calls.record("skins.list_incoming");
        let keys = self.keys();
        Ok(keys
            .into_iter()
            .filter(|key| key.starts_with(skins::INCOMING_PREFIX))
            .take(limit)
            .collect())
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectVersion>, StorageError> {
        self.calls.record("skins.head");
        Ok(lock(&self.objects).get(key).map(|(body, _)| ObjectVersion {
            size: body.len() as u64,
            etag: skins::content_id(body),
        }))
    }

    async fn read(
        &self,
        key: &str,
        version: &ObjectVersion,
        range: Range<u64>,
    ) -> Result<ByteChunks, StorageError> {
        self.calls.record("skins.read");
        let body = lock(&self.objects)
            .get(key)
            .filter(|(body, _)| skins::content_id(body) == version.etag)
            .map(|(body, _)| body.clone())
            .ok_or_else(|| StorageError::new(format!("{key} changed")))?;
        let end = usize::try_from(range.end)
            .unwrap_or(usize::MAX)
            .min(body.len());
        let start = usize::try_from(range.start).unwrap_or(end).min(end);
        let chunk = body.slice(start..end);
        Ok(Box::pin(futures_util::stream::iter([Ok(chunk)])))
    }

    async fn copy_new(
        &self,
        key: &str,
        version: &ObjectVersion,
        name: &SkinName,
    ) -> Result<Copied, StorageError> {
        self.calls.record("skins.copy_new");
        let mut objects = lock(&self.objects);
        let body = objects
            .get(key)
            .map(|(body, _)| body.clone())
            .ok_or_else(|| StorageError::new(format!("{key} is gone")))?;
        let content = skins::incoming_content_id(version);
        match objects.get(&skins::skin_key(name)) {
            Some((_, stored)) if stored.as_deref() == Some(content.as_str()) => Ok(Copied::Stored),
            Some(_) => Ok(Copied::Exists),
            None => {
                objects.insert(skins::skin_key(name), (body, Some(content)));
                Ok(Copied::Stored)
            }
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.calls.record("skins.delete");
        lock(&self.objects).remove(key);
        Ok(())
    }
}

#[async_trait]
impl ArtifactLinks for MemoryObjects {
    async fn link(&self, key: &str, ttl: Duration) -> Result<String, StorageError> {
        self.calls.record("artifacts.link");
        Ok(format!("memory://bucket/{key}?ttl={}", ttl.as_secs()))
    }
}

/// The render queue: what was sent, in order.
pub struct MemoryQueue {
    calls: Calls,
    sent: Mutex<Vec<OutboxEvent>>,
    down: AtomicBool,
}

impl MemoryQueue {
    fn new(calls: Calls) -> Self {
        Self {
            calls,
            sent: Mutex::default(),
            down: AtomicBool::new(false),
        }
    }

    pub fn sent_jobs(&self) -> Vec<JobId> {
        lock(&self.sent).iter().map(|event| event.job_id).collect()
    }

    /// Publishing fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl EventPublisher for MemoryQueue {
    async fn publish(&self, events: &[OutboxEvent]) -> Published {
        self.calls.record("queue.publish");
        if self.down.load(Ordering::SeqCst) {
            return Published {
                sent: Vec::new(),
                failed: events
                    .iter()
                    .map(|e| (e.id, "the queue is down".to_owned()))
                    .collect(),
            };
        }
        lock(&self.sent).extend(events.iter().cloned());
        Published {
            sent: events.iter().map(|e| e.id).collect(),
            failed: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------- API keys (issue 13)

use crate::domain::key::{KeyHash, KeyId};
use crate::ports::keys::{
    KeyRecord, KeyStore, KeySummary, NewKey, Revocation, MAX_LIST, MAX_LIVE_HASHES,
};

/// The `api_keys` table: keys by hash, as `PgKeyStore` keeps them. Counts its lookups (what
/// the lookup cache saves) and can be told to fail.
#[derive(Default)]
pub struct MemoryKeys {
    rows: Mutex<Vec<(KeyHash, KeyRecord)>>,
    lookups: std::sync::atomic::AtomicUsize,
    live_lists: std::sync::atomic::AtomicUsize,
    down: AtomicBool,
}

impl MemoryKeys {
    /// How many `find_by_hash` calls reached the table.
    pub fn lookups(&self) -> usize {
        self.lookups.load(Ordering::SeqCst)
    }

    /// How many `live_hashes` calls reached the table.
    pub fn live_lists(&self) -> usize {
        self.live_lists.load(Ordering::SeqCst)
    }

    /// Every call fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn up(&self) -> Result<(), StoreError> {
        match self.down.load(Ordering::SeqCst) {
            true => Err(StoreError::new("the key table is down")),
            false => Ok(()),
        }
    }
}

#[async_trait]
impl KeyStore for MemoryKeys {
    async fn create(&self, key: &NewKey) -> Result<DateTime<Utc>, StoreError> {
        self.up()?;
        let mut rows = lock(&self.rows);
        if rows
            .iter()
            .any(|(hash, row)| *hash == key.hash || row.summary.id == key.id)
        {
            return Err(StoreError::new("23505: duplicate key"));
        }
        let created_at = Utc::now();
        rows.push((
            key.hash,
            KeyRecord {
                summary: KeySummary {
                    id: key.id,
                    name: key.name.clone(),
                    kind: key.kind,
                    limits: key.limits,
                    created_at,
                    revoked_at: None,
                },
                signing_secret: key.signing_secret.clone(),
            },
        ));
        Ok(created_at)
    }

    async fn list(&self, limit: usize) -> Result<Vec<KeySummary>, StoreError> {
        self.up()?;
        let mut keys: Vec<KeySummary> = lock(&self.rows)
            .iter()
            .map(|(_, row)| row.summary.clone())
            .collect();
        keys.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        keys.truncate(limit.min(MAX_LIST));
        Ok(keys)
    }

    async fn revoke(&self, id: KeyId) -> Result<Revocation, StoreError> {
        self.up()?;
        let mut rows = lock(&self.rows);
        let Some((_, row)) = rows.iter_mut().find(|(_, row)| row.summary.id == id) else {
            return Ok(Revocation::NoSuchKey);
        };
        Ok(match row.summary.revoked_at {
            Some(at) => Revocation::AlreadyRevoked(at),
            None => {
                let now = Utc::now();
                row.summary.revoked_at = Some(now);
                Revocation::Revoked(now)
            }
        })
    }

    async fn find_by_hash(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.up()?;
        Ok(lock(&self.rows)
            .iter()
            .find(|(stored, _)| stored == hash)
            .map(|(_, row)| row.clone()))
    }

    async fn live_hashes(&self, limit: usize) -> Result<Vec<KeyHash>, StoreError> {
        self.live_lists.fetch_add(1, Ordering::SeqCst);
        self.up()?;
        Ok(lock(&self.rows)
            .iter()
            .filter(|(_, row)| !row.is_revoked())
            .map(|(hash, _)| *hash)
            .take(limit.min(MAX_LIVE_HASHES))
            .collect())
    }
}

/// Secrets by id: `put` rotates one as Secrets Manager does (the current value becomes the
/// previous); `reads` counts the reads. An unknown id fails to read.
#[derive(Default)]
pub struct MemorySecrets {
    versions: Mutex<HashMap<String, SecretVersions>>,
    reads: Mutex<usize>,
}

impl MemorySecrets {
    pub fn put(&self, id: &str, value: &str) {
        let mut versions = lock(&self.versions);
        let previous = versions.remove(id).map(|old| old.current);
        versions.insert(
            id.to_owned(),
            SecretVersions {
                current: value.to_owned(),
                previous,
            },
        );
    }

    pub fn reads(&self) -> usize {
        *lock(&self.reads)
    }
}

#[async_trait]
impl SecretStore for MemorySecrets {
    async fn versions(&self, id: &str) -> Result<SecretVersions, StoreError> {
        *lock(&self.reads) += 1;
        lock(&self.versions)
            .get(id)
            .cloned()
            .ok_or_else(|| StoreError::new(format!("no secret `{id}`")))
    }
}

use crate::domain::callback::{is_public, CallbackUrl};
use crate::ports::callbacks::{
    Callback, CallbackAddresses, CallbackSender, CallbackStore, SendError,
};

/// Jobs' callbacks and their sender. The memory database queues none itself (V10's trigger is
/// Postgres'): a test pushes them, and reads what the sender was asked to send. The sender
/// checks literal addresses as the real one does; a host name counts as public (no DNS here).
#[derive(Default)]
pub struct MemoryCallbacks {
    queued: Mutex<Vec<(Callback, EventStatus, DateTime<Utc>)>>,
    sent: Mutex<Vec<(String, Vec<u8>, String)>>,
    down: AtomicBool,
    failing_marks: Mutex<Vec<i64>>,
    lookups_fail: AtomicBool,
}

impl MemoryCallbacks {
    /// As V12's insert trigger: not due before the job's pending callbacks' available_at.
    pub fn push(&self, callback: Callback) {
        let mut queued = lock(&self.queued);
        let at = queued
            .iter()
            .filter(|(c, status, _)| c.job_id == callback.job_id && *status == EventStatus::Pending)
            .map(|(_, _, at)| *at)
            .fold(Utc::now(), DateTime::max);
        queued.push((callback, EventStatus::Pending, at));
    }

    /// As store/postgres/callbacks.rs' marks: the job's pending callbacks after `sequence` that
    /// are at exactly `from` (they waited for its lease) are moved to `to`; if `push` (a retry),
    /// the others before `to` are too.
    fn move_later(
        queued: &mut [(Callback, EventStatus, DateTime<Utc>)],
        (job, sequence): (JobId, i32),
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        push: bool,
    ) {
        for (c, status, due) in queued.iter_mut() {
            if c.job_id != job || c.sequence <= sequence || *status != EventStatus::Pending {
                continue;
            }
            if *due == from {
                *due = to;
            } else if push {
                *due = (*due).max(to);
            }
        }
    }

    /// What was sent, in order: the URL, the body and the signature.
    pub fn sent(&self) -> Vec<(String, Vec<u8>, String)> {
        lock(&self.sent).clone()
    }

    /// Every callback's status (`Pending`, `Dispatched`, `Failed`), by id.
    pub fn statuses(&self) -> Vec<(i64, String)> {
        lock(&self.queued)
            .iter()
            .map(|(c, status, _)| (c.id, format!("{status:?}")))
            .collect()
    }

    /// Marking callback `id` (delivered or to retry) fails, as a database that does not answer.
    pub fn fail_mark_of(&self, id: i64) {
        lock(&self.failing_marks).push(id);
    }

    fn check_mark(&self, ids: impl IntoIterator<Item = i64>) -> Result<(), StoreError> {
        let failing = lock(&self.failing_marks);
        match ids.into_iter().find(|id| failing.contains(id)) {
            Some(id) => Err(StoreError::new(format!("marking callback {id} failed"))),
            None => Ok(()),
        }
    }

    /// Every host name's lookup fails (the resolver does not answer).
    pub fn set_lookups_failing(&self, failing: bool) {
        self.lookups_fail.store(failing, Ordering::SeqCst);
    }

    /// Every receiver fails to answer.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes every pending callback due now (its backoff passed).
    pub fn make_due(&self) {
        for (_, _, at) in lock(&self.queued).iter_mut() {
            *at = Utc::now();
        }
    }
}

#[async_trait]
impl CallbackStore for MemoryCallbacks {
    /// Every callback counts as one client's here: `per_client` caps a claim too. Nothing is
    /// queued here but what a test pushes, so `max_pending_per_key` bounds nothing.
    async fn claim(
        &self,
        limit: i64,
        per_client: i64,
        lease: Duration,
        max_attempts: i32,
        _max_pending_per_key: i64,
    ) -> Result<Vec<Callback>, StoreError> {
        let limit = limit.min(per_client);
        let mut queued = lock(&self.queued);
        let now = Utc::now();
        let pending = |job: JobId, before: i32, rows: &[(Callback, EventStatus, DateTime<Utc>)]| {
            rows.iter().any(|(c, status, _)| {
                c.job_id == job && c.sequence < before && *status == EventStatus::Pending
            })
        };
        let due: Vec<usize> = (0..queued.len())
            .filter(|&i| {
                let (c, status, at) = &queued[i];
                *status == EventStatus::Pending
                    && *at <= now
                    && c.attempts < max_attempts
                    && !pending(c.job_id, c.sequence, &queued)
            })
            .take(usize::try_from(limit).unwrap_or(0))
            .collect();
        Ok(due
            .into_iter()
            .map(|i| {
                let (c, _, at) = &mut queued[i];
                c.attempts += 1;
                *at = now + lease;
                c.clone()
            })
            .collect())
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        self.check_mark(ids.iter().copied())?;
        let mut queued = lock(&self.queued);
        let mut sent = Vec::new();
        for (c, status, at) in queued.iter_mut() {
            if ids.contains(&c.id) && *status == EventStatus::Pending {
                *status = EventStatus::Dispatched;
                sent.push(((c.job_id, c.sequence), *at));
            }
        }
        let now = Utc::now();
        for (callback, at) in sent.into_iter().filter(|&(_, at)| at > now) {
            Self::move_later(&mut queued, callback, at, now, false);
        }
        Ok(())
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        self.check_mark(retries.iter().map(|r| r.id))?;
        let mut queued = lock(&self.queued);
        let mut failed = 0;
        let mut moved = Vec::new();
        for (c, status, at) in queued.iter_mut() {
            let Some(retry) = retries.iter().find(|r| r.id == c.id) else {
                continue;
            };
            if *status != EventStatus::Pending {
                continue;
            }
            let leased_until = *at;
            *at = Utc::now() + retry.delay;
            if c.attempts >= max_attempts {
                *status = EventStatus::Failed;
                failed += 1;
                moved.push(((c.job_id, c.sequence), leased_until, Utc::now(), false));
            } else {
                moved.push(((c.job_id, c.sequence), leased_until, *at, true));
            }
        }
        for (callback, from, to, push) in moved {
            Self::move_later(&mut queued, callback, from, to, push);
        }
        Ok(failed)
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut failed = 0;
        for (c, status, at) in lock(&self.queued).iter_mut() {
            if *status == EventStatus::Pending && *at <= now && c.attempts >= max_attempts {
                *status = EventStatus::Failed;
                failed += 1;
            }
        }
        Ok(failed)
    }
}

#[async_trait]
impl CallbackAddresses for MemoryCallbacks {
    async fn check(&self, url: &CallbackUrl) -> Result<(), SendError> {
        match url.literal_address() {
            Some(address) if !is_public(address) => Err(SendError::Refused {
                host: url.host_and_port().0,
                address,
            }),
            None if self.lookups_fail.load(Ordering::SeqCst) => {
                Err(SendError::LookupFailed(url.host_and_port().0))
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl CallbackSender for MemoryCallbacks {
    async fn send(
        &self,
        url: &CallbackUrl,
        body: Vec<u8>,
        signature: &str,
    ) -> Result<(), SendError> {
        self.check(url).await?;
        if self.down.load(Ordering::SeqCst) {
            return Err(SendError::Status(503));
        }
        lock(&self.sent).push((url.as_str().to_owned(), body, signature.to_owned()));
        Ok(())
    }
}
