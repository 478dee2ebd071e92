//! Callbacks: how long a send may take, where it may go, and how many a key may have pending.

use std::time::Duration;

use super::{ensure, ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Callbacks {
    /// How long one callback send may take, connection included (`CALLBACK_TIMEOUT_MS`).
    pub timeout: Duration,
    /// Development only: callbacks may use `http` and reach private and local addresses
    /// (`ALLOW_PRIVATE_CALLBACKS`).
    pub allow_private: bool,
    /// Whether the dispatcher can reach the internet (`CALLBACKS_EGRESS`). A deployment whose
    /// dispatcher has no route out sets it false, and a submission with a `callback_url` is
    /// refused (422 `callbacks_unavailable`) rather than accepted and never delivered.
    pub egress: bool,
    /// A key's undelivered callbacks past which progress-only ones are not queued
    /// (`MAX_PENDING_CALLBACKS_PER_KEY`; the dispatcher records it for the database's trigger at
    /// each claim).
    pub max_pending_per_key: i64,
}

/// The longest `CALLBACK_TIMEOUT_MS`.
pub const MAX_CALLBACK_TIMEOUT: Duration = Duration::from_secs(20);

impl Callbacks {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let timeout = env.millis("CALLBACK_TIMEOUT_MS", 5_000)?;
        ensure(
            !timeout.is_zero() && timeout <= MAX_CALLBACK_TIMEOUT,
            "CALLBACK_TIMEOUT_MS",
            "must be 1 to 20000: a dispatcher run sends several rounds of callbacks within its \
             50 s",
        )?;
        let max_pending_per_key = env.parse_where(
            "MAX_PENDING_CALLBACKS_PER_KEY",
            1_000i64,
            |max| *max >= 1,
            "must be at least 1",
        )?;
        Ok(Self {
            timeout,
            allow_private: env.flag("ALLOW_PRIVATE_CALLBACKS", false)?,
            egress: env.flag("CALLBACKS_EGRESS", true)?,
            max_pending_per_key,
        })
    }
}
