//! The application: the configuration and the ports every use case reaches the outside world
//! through, built once per process (per Lambda instance: entry/wiring.rs) and shared by every
//! request. Unit tests build it from the in-memory adapters (adapters/memory/).

use std::sync::Arc;

use crate::ports::artifacts::ArtifactLinks;
use crate::ports::callbacks::{CallbackAddresses, CallbackQueue};
use crate::ports::events::{ConnectionStore, PushQueue, Pusher};
use crate::ports::idempotency::IdempotencyStore;
use crate::ports::jobs::{JobAdmission, JobHousekeeping, JobReads, JobRelease, JobTransitions};
use crate::ports::limiter::RateLimiter;
use crate::ports::outbox::OutboxQueue;
use crate::ports::queue::EventPublisher;
use crate::ports::replays::{ReplayFetcher, ReplayStore};
use crate::ports::secrets::SecretStore;
use crate::ports::skins::{SkinRegistry, SkinStore};
use crate::ports::wake::DispatcherWake;
use crate::ports::Ports;
use crate::support::config::Config;
use crate::usecases::health::HealthCheck;
use crate::usecases::keys::lookup::KeyLookup;
use crate::usecases::policy::cache::PolicyCache;
use crate::usecases::status::board::StatusBoard;

#[cfg(any(test, feature = "memory"))]
use crate::adapters::memory::Memory;
use crate::usecases::secrets::RotatingSecret;

#[derive(Clone)]
pub struct App {
    pub config: Arc<Config>,
    pub limiter: Arc<dyn RateLimiter>,
    /// The jobs table, by who uses it: admission, the reads, the workers' reports, the janitor.
    pub admissions: Arc<dyn JobAdmission>,
    pub job_reads: Arc<dyn JobReads>,
    pub transitions: Arc<dyn JobTransitions>,
    pub housekeeping: Arc<dyn JobHousekeeping>,
    /// The queue of record's release to the farm (DESIGN.md "Fair service").
    pub release: Arc<dyn JobRelease>,
    pub replays: Arc<dyn ReplayStore>,
    pub outbox: Arc<OutboxQueue>,
    pub queue: Arc<dyn EventPublisher>,
    /// Jobs' queued callbacks, and what checks their URLs' addresses. (Sending them is the
    /// dispatcher's alone: `callbacks::sweep` is handed the sender.)
    pub callbacks: Arc<CallbackQueue>,
    pub callback_addresses: Arc<dyn CallbackAddresses>,
    /// What fetches a replay named by URL (`replay_url`).
    pub replay_fetcher: Arc<dyn ReplayFetcher>,
    /// What wakes the dispatcher when a callback is queued or falls due; none without a wake
    /// queue (`callbacks::wake_dispatcher`).
    pub wake: Option<Arc<dyn DispatcherWake>>,
    /// Live events: the open connections and what each follows, what sends them frames (none
    /// where nothing is pushed from), and the jobs whose watchers are owed their state.
    pub connections: Arc<dyn ConnectionStore>,
    pub pusher: Option<Arc<dyn Pusher>>,
    pub pushes: Arc<dyn PushQueue>,
    pub skins: Arc<dyn SkinStore>,
    pub skin_names: Arc<dyn SkinRegistry>,
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// The API keys requests carry, behind the instance's cache.
    pub keys: Arc<KeyLookup>,
    /// The operator's pause and bans, behind the instance's cache.
    pub policy: Arc<PolicyCache>,
    /// Presigned links to the render workers' artifacts.
    pub artifacts: Arc<dyn ArtifactLinks>,
    /// What `GET /health` checks, and its last answer.
    pub health: Arc<HealthCheck>,
    /// `GET /v1/status`'s last read of the counts.
    pub status: Arc<StatusBoard>,
    /// Where the secrets `CF_ORIGIN_SECRET_ARN` and `WEBHOOK_SECRET_ARN` name are read from.
    pub secrets: Arc<dyn SecretStore>,
    /// What every request's `X-Origin-Secret` must be, when the origin is closed to all but
    /// our edge (`CF_ORIGIN_SECRET`).
    pub origin_secret: Option<RotatingSecret>,
}

impl App {
    /// The App over `ports`, with the use cases' own state (the key cache, the health check,
    /// the origin secret) built from `config`.
    pub fn from_ports(config: Config, ports: Ports) -> Self {
        if config.capacity.farm_reaches_breaker() {
            tracing::warn!(
                render_slots = config.capacity.render_slots,
                release_ahead = config.capacity.release_ahead,
                max_rendering = config.capacity.max_rendering,
                "RENDER_SLOTS + RELEASE_AHEAD reach MAX_RENDERING: admission refuses \
                 (render_capacity) while the farm holds only what it was given"
            );
        }
        let origin_secret = config.secrets.origin.as_ref().map(|source| {
            RotatingSecret::new(
                source,
                ports.secrets.clone(),
                config.secrets.refresh_interval,
            )
        });
        Self {
            limiter: ports.limiter,
            admissions: ports.jobs.clone(),
            job_reads: ports.jobs.clone(),
            transitions: ports.jobs.clone(),
            housekeeping: ports.jobs.clone(),
            release: ports.jobs,
            replays: ports.replays,
            outbox: ports.outbox,
            queue: ports.queue,
            callbacks: ports.callbacks,
            callback_addresses: ports.callback_addresses,
            replay_fetcher: ports.replay_fetcher,
            wake: ports.wake,
            connections: ports.connections,
            pusher: ports.pusher,
            pushes: ports.pushes,
            skins: ports.skins,
            skin_names: ports.skin_names,
            idempotency: ports.idempotency,
            keys: Arc::new(KeyLookup::new(ports.keys, config.caches.key_ttl)),
            policy: Arc::new(PolicyCache::new(ports.policy, config.caches.policy_ttl)),
            artifacts: ports.artifacts,
            health: Arc::new(HealthCheck::new(
                ports.dependencies,
                config.caches.health_check_interval,
            )),
            status: Arc::default(),
            secrets: ports.secrets,
            origin_secret,
            config: Arc::new(config),
        }
    }

    /// Reads the origin secret when it is kept in Secrets Manager: once per instance, before
    /// the first request. A failure is logged, never fatal: requests answer 503 until a read
    /// succeeds (secrets.rs).
    pub async fn read_secrets(&self) {
        if let Some(secret) = &self.origin_secret {
            secret.read().await;
        }
    }
}

/// Test wiring: the in-memory adapters (feature `memory`) behind an App.
#[cfg(any(test, feature = "memory"))]
impl App {
    /// An App on fresh in-memory adapters, and the adapters, for the test that drives them.
    pub fn in_memory(config: Config) -> (Self, Memory) {
        let memory = Memory::new();
        (Self::from_ports(config, memory.ports()), memory)
    }
}
