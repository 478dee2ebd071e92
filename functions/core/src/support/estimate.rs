//! Honest waiting hints: `Retry-After` on the capacity refusals and `estimated_start` of a
//! queued job, computed from what the renderers have actually done lately.
//!
//! Throughput λ (jobs per second) is the number of jobs completed in the last hour / 3600 s,
//! once at least `MIN_SAMPLES` jobs completed; with fewer (a quiet hour, a fresh deployment) it is
//! the configured capacity, `MAX_RENDERING` renders per `DEFAULT_RENDER_SECS`. A job's
//! turnaround (submission to completion) is the recent median likewise, else
//! `DEFAULT_RENDER_SECS`. Every hint is clamped to 1 s ..= 1 h: a client must neither spin nor
//! give up.

use std::time::Duration;

use crate::support::config::Config;

/// Fewer completions than this in an hour say more about chance than about throughput.
pub const MIN_SAMPLES: i64 = 5;
/// The window recent throughput is measured over.
pub const WINDOW_SECS: f64 = 3600.0;
const MIN_HINT_SECS: f64 = 1.0;
const MAX_HINT_SECS: f64 = 3600.0;

/// What the jobs table says about recent rendering.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Recent {
    /// Jobs completed in the last hour.
    pub completed: i64,
    /// Their median time from submission to completion, seconds.
    pub median_turnaround_secs: Option<f64>,
}

/// The configured fallbacks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    pub render: Duration,
    pub max_rendering: i64,
}

impl From<&Config> for Defaults {
    fn from(config: &Config) -> Self {
        Self {
            render: config.default_render_duration,
            max_rendering: config.max_rendering,
        }
    }
}

impl Recent {
    /// λ, jobs per second (always > 0).
    pub fn throughput(&self, defaults: &Defaults) -> f64 {
        if self.completed >= MIN_SAMPLES {
            self.completed as f64 / WINDOW_SECS
        } else {
            defaults.max_rendering.max(1) as f64 / defaults.render.as_secs_f64().max(1.0)
        }
    }

    fn turnaround(&self, defaults: &Defaults) -> f64 {
        match self.median_turnaround_secs {
            Some(secs) if self.completed >= MIN_SAMPLES => secs,
            _ => defaults.render.as_secs_f64(),
        }
    }

    /// `queue_full`: until enough queued jobs have left for one more, `(queued − max + 1) / λ`.
    pub fn queue_full_retry(&self, defaults: &Defaults, queued: i64, max_queued: i64) -> u64 {
        let excess = (queued - max_queued + 1).max(1) as f64;
        clamp(excess / self.throughput(defaults))
    }

    /// `render_capacity`: until one render finishes, `1 / λ`.
    pub fn render_capacity_retry(&self, defaults: &Defaults) -> u64 {
        clamp(1.0 / self.throughput(defaults))
    }

    /// `too_many_active_jobs`: until the client's oldest active job is expected done — the
    /// median turnaround less its age; when it is already older than that, one render slot's
    /// turnover (`1 / λ`), as it should be finishing any moment.
    pub fn active_jobs_retry(&self, defaults: &Defaults, oldest_active_age_secs: f64) -> u64 {
        let left = self.turnaround(defaults) - oldest_active_age_secs;
        if left >= MIN_HINT_SECS {
            clamp(left)
        } else {
            self.render_capacity_retry(defaults)
        }
    }

    /// Seconds until a job at 1-based `position` in the queue starts: `position / λ`.
    pub fn start_in(&self, defaults: &Defaults, position: i64) -> Duration {
        let secs = position.max(1) as f64 / self.throughput(defaults);
        Duration::from_secs_f64(secs.min(queue_horizon()))
    }
}

/// `estimated_start` is not clamped to an hour (a long queue is honest news), only to a day.
fn queue_horizon() -> f64 {
    24.0 * WINDOW_SECS
}

/// Whole seconds, rounded up — after rounding to milliseconds, so float noise (1 / (20 / 120)
/// is 6.000000000000001) does not add a second.
fn clamp(secs: f64) -> u64 {
    let secs = (secs * 1000.0).round() / 1000.0;
    secs.clamp(MIN_HINT_SECS, MAX_HINT_SECS).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Defaults = Defaults {
        render: Duration::from_secs(120),
        max_rendering: 20,
    };

    #[test]
    fn throughput_is_observed_or_configured() {
        let quiet = Recent {
            completed: 2,
            median_turnaround_secs: Some(10.0),
        };
        assert!((quiet.throughput(&DEFAULTS) - 20.0 / 120.0).abs() < 1e-9);
        let busy = Recent {
            completed: 360,
            median_turnaround_secs: Some(300.0),
        };
        assert!((busy.throughput(&DEFAULTS) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn hints_follow_the_formulas_and_are_clamped() {
        let busy = Recent {
            completed: 360,
            median_turnaround_secs: Some(300.0),
        };
        assert_eq!(busy.queue_full_retry(&DEFAULTS, 100, 100), 10);
        assert_eq!(busy.queue_full_retry(&DEFAULTS, 104, 100), 50);
        assert_eq!(busy.render_capacity_retry(&DEFAULTS), 10);
        assert_eq!(busy.active_jobs_retry(&DEFAULTS, 100.0), 200);
        assert_eq!(busy.active_jobs_retry(&DEFAULTS, 1000.0), 10);
        let crawling = Recent {
            completed: 5,
            median_turnaround_secs: None,
        };
        assert_eq!(crawling.queue_full_retry(&DEFAULTS, 500, 100), 3600);
        assert_eq!(busy.start_in(&DEFAULTS, 3), Duration::from_secs(30));
        assert_eq!(
            crawling.start_in(&DEFAULTS, 100_000),
            Duration::from_secs(86_400)
        );
    }
}
