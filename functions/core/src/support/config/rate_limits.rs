//! The rate limits (SlowApi syntax: `5/minute`), and what a request meets while the limiter
//! fails.

use super::{ConfigError, Env};
use crate::domain::rate::RateLimit;

#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    /// Renders per client (`RATE_LIMIT_RENDER`).
    pub render: RateLimit,
    /// Renders of all anonymous clients of one network together.
    pub render_network: RateLimit,
    /// Renders of all anonymous clients of one wide network together.
    pub render_wide_network: RateLimit,
    /// `POST /v1/skins/upload`, direct and presigned.
    pub skins_upload: RateLimit,
    /// `POST /skins/upload`, its own counter.
    pub legacy_skins_upload: RateLimit,
    /// Skin uploads (either route) of all anonymous clients of one network together.
    pub skins_upload_network: RateLimit,
    /// The same of one wide network.
    pub skins_upload_wide_network: RateLimit,
    /// The read endpoints (`GET /v1/jobs…`, `GET /v1/skins`): generous, per client.
    pub read: RateLimit,
    /// Key lookups that reach the database (a key not in the instance's cache), per address:
    /// what holds back a flood of made-up keys.
    pub key_lookup: RateLimit,
    /// The same per network (an IPv4 /24 or IPv6 /48), of all its addresses together.
    pub key_lookup_network: RateLimit,
    /// Live-event connections opened per client address (an IPv6 /64).
    pub events_connect: RateLimit,
    /// The same of all addresses of one network together.
    pub events_connect_network: RateLimit,
    /// Frames one live-event connection may send.
    pub events_frames: RateLimit,
    /// Requests are let through (and logged) while the limiter fails
    /// (`RATE_LIMIT_FAIL_OPEN`); otherwise they are refused.
    pub fail_open: bool,
}

impl RateLimits {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let limit = |name, default: &str| {
            env.parse::<RateLimit>(name, default.parse().expect("built-in limits are valid"))
        };
        Ok(Self {
            render: limit("RATE_LIMIT_RENDER", "5/minute")?,
            render_network: limit("RATE_LIMIT_RENDER_NETWORK", "20/minute")?,
            render_wide_network: limit("RATE_LIMIT_RENDER_WIDE_NETWORK", "60/minute")?,
            skins_upload: limit("RATE_LIMIT_SKINS_UPLOAD", "2/minute")?,
            legacy_skins_upload: limit("RATE_LIMIT_LEGACY_SKINS_UPLOAD", "5/minute")?,
            skins_upload_network: limit("RATE_LIMIT_SKINS_UPLOAD_NETWORK", "10/minute")?,
            skins_upload_wide_network: limit("RATE_LIMIT_SKINS_UPLOAD_WIDE_NETWORK", "30/minute")?,
            read: limit("RATE_LIMIT_READ", "120/minute")?,
            key_lookup: limit("RATE_LIMIT_KEY_LOOKUP", "30/minute")?,
            key_lookup_network: limit("RATE_LIMIT_KEY_LOOKUP_NETWORK", "120/minute")?,
            events_connect: limit("RATE_LIMIT_EVENTS_CONNECT", "10/minute")?,
            events_connect_network: limit("RATE_LIMIT_EVENTS_CONNECT_NETWORK", "40/minute")?,
            events_frames: limit("RATE_LIMIT_EVENTS_FRAMES", "5/second")?,
            fail_open: env.parse("RATE_LIMIT_FAIL_OPEN", false)?,
        })
    }
}
