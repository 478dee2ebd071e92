//! The farm and admission's caps: the queue and the breaker, the farm's slots and speed, fair
//! shares, and the caps of active jobs per client and per network.

use std::time::Duration;

use super::{ensure, ConfigError, Env};
use crate::domain::farm::{FarmModel, Weight};

#[derive(Debug, Clone)]
pub struct Capacity {
    /// Queued jobs of everyone together (`MAX_QUEUED`).
    pub max_queued: i64,
    /// Downloading and rendering jobs at which admission refuses (`MAX_RENDERING`): a circuit
    /// breaker.
    pub max_rendering: i64,
    /// How many jobs the farm renders at once (`RENDER_SLOTS`): jobs are released to the render
    /// queue while fewer than this plus `release_ahead` are released and not finished.
    pub render_slots: i64,
    /// Released jobs beyond the slots (`RELEASE_AHEAD`), so a worker that finishes finds the
    /// next one waiting.
    pub release_ahead: i64,
    /// Added to a replay's length for its expected render time (`RENDER_OVERHEAD_SECS`).
    pub render_overhead: Duration,
    /// Render-seconds one slot renders per second before the farm has rendered `MIN_SAMPLES`
    /// jobs within the hour (`RENDER_SPEED`).
    pub render_speed: f64,
    /// The expected render time of a job that recorded none (`DEFAULT_RENDER_SECS`): what the
    /// estimates count it as (domain/farm.rs).
    pub default_render_duration: Duration,
    /// Each anonymous network's share of render time relative to a key of weight 1
    /// (`ANONYMOUS_WEIGHT`).
    pub anonymous_weight: Weight,
    /// A job whose estimated start is later than this is refused `queue_full`
    /// (`MAX_QUEUE_WAIT`; `None`, the default: no such cap).
    pub max_queue_wait: Option<Duration>,
    /// A client's cap on active jobs (`MAX_ACTIVE_JOBS_PER_IP`); a key may have its own.
    pub max_active_per_client: i64,
    /// An anonymous network's cap on active jobs (`MAX_ACTIVE_PER_NETWORK`): many addresses of
    /// one allocation are one actor.
    pub max_active_per_network: i64,
    /// An anonymous wide network's cap on active jobs (`MAX_ACTIVE_PER_WIDE_NETWORK`): the
    /// networks of one allocation (the /48s of a tunnel broker's /32) are one actor too.
    pub max_active_per_wide_network: i64,
    /// The share of `MAX_QUEUED` anonymous clients together may hold (`ANONYMOUS_QUEUE_SHARE`,
    /// 0 < s <= 1; 1 is no reserve): the rest is kept for API keys.
    pub anonymous_queue_share: f64,
}

impl Capacity {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let max_queued: i64 = env.parse("MAX_QUEUED", 100)?;
        let anonymous_queue_share = env.parse_where(
            "ANONYMOUS_QUEUE_SHARE",
            1.0f64,
            |share| *share > 0.0 && *share <= 1.0,
            "must be more than 0 and at most 1",
        )?;
        // Rounded down, a share under one place is none: every anonymous render a 503.
        ensure(
            max_queued <= 0 || max_queued as f64 * anonymous_queue_share >= 1.0,
            "ANONYMOUS_QUEUE_SHARE",
            "times MAX_QUEUED is less than one place",
        )?;
        let render_slots = env.parse_where(
            "RENDER_SLOTS",
            16i64,
            |slots| (1..=10_000).contains(slots),
            "must be 1..=10000",
        )?;
        let release_ahead = env.parse_where(
            "RELEASE_AHEAD",
            2i64,
            |ahead| (0..=10_000).contains(ahead),
            "must be 0..=10000",
        )?;
        let render_speed = env.parse_where(
            "RENDER_SPEED",
            1.0f64,
            |speed| *speed > 0.0 && *speed <= 10_000.0,
            "must be more than 0 and at most 10000",
        )?;
        let anonymous_weight = Weight::new(env.parse("ANONYMOUS_WEIGHT", 1u32)?)
            .map_err(|reason| ConfigError::new("ANONYMOUS_WEIGHT", reason))?;
        let max_queue_wait = Some(env.secs("MAX_QUEUE_WAIT", 0)?).filter(|wait| !wait.is_zero());
        Ok(Self {
            max_queued,
            max_rendering: env.parse("MAX_RENDERING", 20)?,
            render_slots,
            release_ahead,
            render_overhead: env.secs("RENDER_OVERHEAD_SECS", 20)?,
            render_speed,
            default_render_duration: env.secs("DEFAULT_RENDER_SECS", 120)?,
            anonymous_weight,
            max_queue_wait,
            max_active_per_client: env.parse("MAX_ACTIVE_JOBS_PER_IP", 2)?,
            max_active_per_network: env.parse("MAX_ACTIVE_PER_NETWORK", 8)?,
            max_active_per_wide_network: env.parse("MAX_ACTIVE_PER_WIDE_NETWORK", 24)?,
            anonymous_queue_share,
        })
    }

    /// The farm the estimates model.
    pub fn farm(&self) -> FarmModel {
        FarmModel {
            slots: self.render_slots,
            default_speed: self.render_speed,
            unknown_cost: self.default_render_duration.as_secs_f64(),
        }
    }

    /// Whether the farm may hold `MAX_RENDERING` jobs downloading or rendering: then the
    /// breaker (step 14, render capacity) trips on a farm that holds only what it was given,
    /// and admission refuses while the queue could wait (logged as a warning at start).
    pub fn farm_reaches_breaker(&self) -> bool {
        self.render_slots + self.release_ahead >= self.max_rendering
    }

    /// How many queued jobs anonymous clients together may hold: `ANONYMOUS_QUEUE_SHARE` of
    /// `MAX_QUEUED`, rounded down.
    pub fn max_anonymous_queued(&self) -> i64 {
        (self.max_queued as f64 * self.anonymous_queue_share).floor() as i64
    }
}
