//! The callback ports: the queued callbacks of jobs (adapters/postgres/callbacks.rs), the check of
//! their URLs' addresses and the sender that reaches them (adapters/callback_sender.rs).

use std::net::IpAddr;

use async_trait::async_trait;

use crate::domain::callback::CallbackUrl;
use crate::domain::job::JobId;
use crate::domain::key::SigningSecret;
use crate::ports::leased::{LeaseClaim, Leased, LeasedQueue};

/// A callback to send, as claimed from `job_callbacks`.
#[derive(Debug, Clone, PartialEq)]
pub struct Callback {
    pub id: i64,
    pub job_id: JobId,
    pub sequence: i32,
    pub url: String,
    pub body: serde_json::Value,
    /// Sends begun, this one included.
    pub attempts: i32,
    /// The job's key's signing secret; `None` once the key is revoked (or gone).
    pub signing_secret: Option<SigningSecret>,
}

/// How one key's callbacks share the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyShares {
    /// The most of one client's callbacks a claim takes.
    pub per_client: i64,
    /// Recorded with the claim: past this many undelivered callbacks, a client's
    /// progress-only callbacks are not queued (`MAX_PENDING_CALLBACKS_PER_KEY`).
    pub max_pending_per_key: i64,
}

/// What a claim of callbacks asks for: clients (keys) first, up to `lease.limit` of those with
/// a due callback, in turn from where the last claim stopped, then at most `shares.per_client`
/// of each one's oldest, a round at a time; only callbacks that are the earliest pending one of
/// their job (so a job's callbacks go out in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackClaim {
    pub lease: LeaseClaim,
    pub shares: KeyShares,
}

impl Leased for Callback {
    fn lease(&self) -> (i64, i32) {
        (self.id, self.attempts)
    }
}

/// Jobs' callbacks, leased out to the dispatcher.
pub type CallbackQueue = dyn LeasedQueue<Item = Callback, Claim = CallbackClaim>;

/// Why a callback URL may not be used, or a send did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The host is, or resolves to, an address callbacks may not reach.
    #[error("{host} resolves to {address}, which callbacks may not reach")]
    Refused { host: String, address: IpAddr },
    /// The name does not exist, or has no addresses: a no.
    #[error("{0} does not resolve")]
    Unresolved(String),
    /// The lookup got no answer in time, or the resolver failed: not known either way.
    #[error("{0} could not be looked up (no answer in time, or the resolver failed)")]
    LookupFailed(String),
    /// Sent, but not acknowledged with a 2xx.
    #[error("answered {0}")]
    Status(u16),
    #[error("{0}")]
    Failed(String),
}

/// Whether a callback URL may be used: checked at submission, by every function that admits.
#[async_trait]
pub trait CallbackAddresses: Send + Sync {
    /// Whether `url`'s host is, or resolves only to, addresses callbacks may reach.
    async fn check(&self, url: &CallbackUrl) -> Result<(), SendError>;
}

/// What sends callbacks: only the dispatcher has one (entry/wiring.rs `callback_sender`), so no
/// other function carries an HTTP client it never uses.
#[async_trait]
pub trait CallbackSender: Send + Sync {
    /// POSTs `signed` to `url`, connecting only to addresses `CallbackAddresses::check` would
    /// allow (resolved for this send: no rebinding) and following no redirect.
    async fn send(&self, url: &CallbackUrl, signed: SignedBody) -> Result<(), SendError>;
}

/// A callback's body as it is sent: the JSON, and its signature header's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedBody {
    pub body: Vec<u8>,
    pub signature: String,
}
