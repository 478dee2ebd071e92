//! A job's life after admission: how long it may wait and run, how long it is kept, and how
//! often its events and callbacks are tried.

use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Lifecycle {
    /// A job queued longer than this expires (`QUEUED_TTL`).
    pub queued_ttl: Duration,
    /// The janitor deletes a job (with its outbox events and callbacks) once it has ended this
    /// long ago (`JOB_RETENTION`); at least `MIN_JOB_RETENTION`.
    pub job_retention: Duration,
    /// A downloading or rendering job with no webhook progress for this long fails
    /// (`RENDER_STALL_TIMEOUT`).
    pub render_stall_timeout: Duration,
    /// Publish attempts before an outbox event is marked failed, and send attempts before a
    /// callback is (`OUTBOX_MAX_ATTEMPTS`).
    pub max_delivery_attempts: i32,
}

/// A stored response (idempotency keys live `KEY_TTL`, a day) and an admission fence (kept a
/// day, longer than any statement is in flight) may name a job for a day after it was made: it
/// must not be deleted before, or a retry would be sent to a job that is gone, or an unknown
/// admission resolved as never made.
pub const MIN_JOB_RETENTION: Duration = Duration::from_secs(86_400);

impl Lifecycle {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let job_retention = env.secs_where(
            "JOB_RETENTION",
            30 * 86_400,
            |retention| *retention >= MIN_JOB_RETENTION,
            "must be at least 1d: idempotency keys and admission fences refer to a job for a day",
        )?;
        Ok(Self {
            queued_ttl: env.secs("QUEUED_TTL", 6 * 3600)?,
            job_retention,
            render_stall_timeout: env.secs("RENDER_STALL_TIMEOUT", 900)?,
            max_delivery_attempts: env.parse("OUTBOX_MAX_ATTEMPTS", 10)?,
        })
    }
}
