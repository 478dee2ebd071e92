//! How long an instance keeps what it read: key lookups, the operator's policy, the health
//! probe.

use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Caches {
    /// How long an instance keeps a key lookup's answer (`API_KEY_CACHE_TTL`; keys/lookup.rs):
    /// at most `MAX_KEY_CACHE_TTL`, the bound on a revocation taking effect.
    pub key_ttl: Duration,
    /// How long an instance keeps the operator's policy (pause, bans) before reading it again
    /// (`POLICY_CACHE_TTL`, 1 s to `MAX_POLICY_CACHE_TTL`): a change reaches every instance
    /// within it.
    pub policy_ttl: Duration,
    /// `GET /health` probes the dependencies at most this often per instance
    /// (`HEALTH_CHECK_INTERVAL`; one probe at a time) and answers from the last probe meanwhile:
    /// a flood of health checks costs the dependencies nothing.
    pub health_check_interval: Duration,
}

/// The longest a key lookup's answer may be kept: a revocation takes effect within it.
pub const MAX_KEY_CACHE_TTL: Duration = Duration::from_secs(60);

/// The longest an instance may keep the operator's policy (`POLICY_CACHE_TTL`).
pub const MAX_POLICY_CACHE_TTL: Duration = Duration::from_secs(300);

impl Caches {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let key_ttl = env.secs_where(
            "API_KEY_CACHE_TTL",
            30,
            |ttl| *ttl <= MAX_KEY_CACHE_TTL,
            "must be at most 60s: a revoked key must stop working within a minute",
        )?;
        let policy_ttl = env.secs_where(
            "POLICY_CACHE_TTL",
            30,
            |ttl| !ttl.is_zero() && *ttl <= MAX_POLICY_CACHE_TTL,
            "must be 1s to 300s: a pause or a ban must reach every instance within minutes",
        )?;
        Ok(Self {
            key_ttl,
            policy_ttl,
            health_check_interval: env.secs("HEALTH_CHECK_INTERVAL", 10)?,
        })
    }
}
