//! `GET /v1/status`: the service's load, public, for a bot deciding whether to submit now: the
//! queued and rendering counts, the caps, whether intake is paused (and for whom), and when a
//! job submitted now should start.
//!
//! An instance reads the counts at most once per `STATUS_INTERVAL`, one read at a time, and
//! answers every other request from that read (as `GET /health` does its probes): however many
//! ask, the database pays one read per interval per instance. The pause comes from the
//! operator's policy the instance already keeps (policy/cache.rs).

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ports::jobs::{Capacity, QueueAges};
use crate::support::estimate;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::policy::current_policy;

pub mod board;

pub use board::STATUS_INTERVAL;

/// Whether the render intake admits, and whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Intake {
    Open,
    /// Only API keys are admitted.
    PausedForAnonymous,
    Paused,
}

#[derive(Debug, Serialize)]
pub struct ServiceStatus {
    intake: Intake,
    /// The operator's reason for a pause.
    pause_reason: Option<String>,
    queued: i64,
    rendering: i64,
    max_queued: i64,
    max_rendering: i64,
    /// Jobs the farm holds released and not finished, against `RENDER_SLOTS` + `RELEASE_AHEAD`.
    slots_in_use: i64,
    render_slots: i64,
    release_ahead: i64,
    /// How long the oldest queued job of anonymous clients and of keys has waited, seconds.
    queue_age_secs: QueueAges,
    /// When a job a new client submits now should start rendering, from the farm model
    /// (estimate.rs): `as_of` when a slot is free and nothing waits; `None` while the queue is
    /// full. The name a job's estimate has.
    estimated_start: Option<DateTime<Utc>>,
    /// Deprecated (one release): `estimated_start` as seconds from `as_of`.
    estimated_start_secs: Option<u64>,
    /// When the counts were read: at most `STATUS_INTERVAL` ago, unless reads fail (then the
    /// last reading's time).
    as_of: DateTime<Utc>,
}

pub async fn service_status(app: &App) -> Result<ServiceStatus, Rejection> {
    let reading = app
        .status
        .reading(app.admissions.as_ref())
        .await
        .ok_or(Rejection::DatabaseUnavailable)?;
    let policy = current_policy(app).await?;
    let (intake, pause_reason) = match &policy.pause {
        None => (Intake::Open, None),
        Some(pause) => (
            if pause.anonymous_only {
                Intake::PausedForAnonymous
            } else {
                Intake::Paused
            },
            pause
                .reason
                .as_ref()
                .map(|reason| reason.as_str().to_owned()),
        ),
    };
    let config = &app.config;
    let overview = &reading.overview;
    let Capacity {
        queued, rendering, ..
    } = overview.capacity;
    let estimated_start_secs = (queued < config.capacity.max_queued).then(|| {
        estimate::start_in(&config.capacity.farm(), &overview.wait)
            .as_secs_f64()
            .ceil() as u64
    });
    Ok(ServiceStatus {
        intake,
        pause_reason,
        queued,
        rendering,
        max_queued: config.capacity.max_queued,
        max_rendering: config.capacity.max_rendering,
        slots_in_use: overview.wait.farm.slots_in_use(),
        render_slots: config.capacity.render_slots,
        release_ahead: config.capacity.release_ahead,
        queue_age_secs: overview.queue_age,
        estimated_start: estimated_start_secs
            .map(|secs| reading.at + chrono::Duration::seconds(secs.try_into().unwrap_or(0))),
        estimated_start_secs,
        as_of: reading.at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::config::Config;

    #[tokio::test]
    async fn requests_within_the_interval_share_one_read() {
        let config = Config::from_lookup(|_| None).unwrap();
        let (app, memory) = App::in_memory(config);
        memory.database.occupy(crate::domain::JobStatus::Queued, 3);
        let answers = futures_util::future::join_all((0..20).map(|_| service_status(&app))).await;
        let reads = memory
            .calls
            .take()
            .into_iter()
            .filter(|call| *call == "jobs.overview")
            .count();
        assert_eq!(reads, 1, "twenty requests, one read");
        let first = answers[0].as_ref().unwrap();
        assert_eq!((first.queued, first.intake), (3, Intake::Open));
        // Queued jobs of an earlier release count DEFAULT_RENDER_SECS each, but they are
        // released: with 16 slots and 2 ahead, a slot is free.
        assert_eq!(first.estimated_start_secs, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_reads_are_retried_once_a_second_and_the_last_reading_answers_meanwhile() {
        let config = Config::from_lookup(|_| None).unwrap();
        let (app, memory) = App::in_memory(config);
        let reads = || {
            let calls = memory.calls.take();
            calls
                .iter()
                .filter(|call| **call == "jobs.overview")
                .count()
        };
        memory.database.fail_overview(true);
        for _ in 0..10 {
            assert!(service_status(&app).await.is_err(), "no reading yet: 503");
        }
        assert_eq!(reads(), 1, "one failed read, then none within a second");
        tokio::time::advance(crate::support::refreshed::RETRY_AFTER_FAILURE).await;
        memory.database.fail_overview(false);
        let good = service_status(&app).await.unwrap();
        assert_eq!(reads(), 1);
        memory.database.fail_overview(true);
        tokio::time::advance(STATUS_INTERVAL).await;
        for _ in 0..10 {
            let stale = service_status(&app).await.unwrap();
            assert_eq!(
                stale.as_of, good.as_of,
                "the last reading, saying how old it is"
            );
        }
        assert_eq!(reads(), 1, "one failed read for the ten");
    }
}
