//! The application: the configuration and the ports every use case reaches the outside world
//! through, built once per process (per Lambda instance: wiring.rs) and shared by every
//! request. Unit tests build it from the in-memory adapters (store/memory.rs).

use std::sync::Arc;

use crate::config::Config;
use crate::health::HealthCheck;
use crate::keys::lookup::KeyLookup;
use crate::ports::artifacts::ArtifactLinks;
use crate::ports::callbacks::{CallbackAddresses, CallbackStore};
use crate::ports::idempotency::IdempotencyStore;
use crate::ports::jobs::JobStore;
use crate::ports::limiter::RateLimiter;
use crate::ports::outbox::OutboxStore;
use crate::ports::queue::EventPublisher;
use crate::ports::replays::ReplayStore;
use crate::ports::secrets::SecretStore;
use crate::ports::skins::{SkinRegistry, SkinStore};
use crate::secrets::RotatingSecret;

#[derive(Clone)]
pub struct App {
    pub config: Arc<Config>,
    pub limiter: Arc<dyn RateLimiter>,
    pub jobs: Arc<dyn JobStore>,
    pub replays: Arc<dyn ReplayStore>,
    pub outbox: Arc<dyn OutboxStore>,
    pub queue: Arc<dyn EventPublisher>,
    /// Jobs' queued callbacks, and what checks their URLs' addresses. (Sending them is the
    /// dispatcher's alone: `callbacks::sweep` is handed the sender.)
    pub callbacks: Arc<dyn CallbackStore>,
    pub callback_addresses: Arc<dyn CallbackAddresses>,
    pub skins: Arc<dyn SkinStore>,
    pub skin_names: Arc<dyn SkinRegistry>,
    pub idempotency: Arc<dyn IdempotencyStore>,
    /// The API keys requests carry, behind the instance's cache.
    pub keys: Arc<KeyLookup>,
    /// Presigned links to the render workers' artifacts.
    pub artifacts: Arc<dyn ArtifactLinks>,
    /// What `GET /health` checks, and its last answer.
    pub health: Arc<HealthCheck>,
    /// Where the secrets `CF_ORIGIN_SECRET_ARN` and `WEBHOOK_SECRET_ARN` name are read from.
    pub secrets: Arc<dyn SecretStore>,
    /// What every request's `X-Origin-Secret` must be, when the origin is closed to all but
    /// our edge (`CF_ORIGIN_SECRET`).
    pub origin_secret: Option<RotatingSecret>,
}
