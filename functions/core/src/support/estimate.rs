//! Honest waiting hints: `Retry-After` on the capacity refusals and `estimated_start` of a
//! queued job, all from one model of the farm (domain/farm.rs): the renders in flight and what
//! is left of each, the jobs ahead in release order, and the farm's measured speed (render-
//! seconds per second per slot, over the last hour's completions; `RENDER_SPEED` before there
//! are `MIN_SAMPLES`). Every `Retry-After` is clamped to 1 s ..= 1 h: a client must neither spin
//! nor give up; `estimated_start` only to a day.

use std::time::Duration;

use crate::domain::farm::{ActiveWork, FarmModel, FarmState, QueueWait};

const MIN_HINT_SECS: f64 = 1.0;
const MAX_HINT_SECS: f64 = 3600.0;
/// `estimated_start` is not clamped to an hour (a long queue is honest news), only to a day.
const QUEUE_HORIZON_SECS: f64 = 86_400.0;

/// `queue_full`: a queued place frees when a worker takes the next queued job, which is when
/// the first slot frees.
pub fn queue_full_retry(model: &FarmModel, farm: &FarmState) -> u64 {
    clamp(
        model
            .slots_free_in(farm)
            .first()
            .copied()
            .unwrap_or_default(),
    )
}

/// `render_capacity`: until the first render in flight should end.
pub fn render_capacity_retry(model: &FarmModel, farm: &FarmState) -> u64 {
    clamp(
        model
            .first_done_in(farm, &farm.in_flight)
            .unwrap_or_default(),
    )
}

/// `too_many_active_jobs`: until the first of the client's (or network's) active jobs should
/// end: a render in flight, or its first queued job once it has started and rendered.
pub fn active_jobs_retry(model: &FarmModel, farm: &FarmState, work: &ActiveWork) -> u64 {
    let rendering = model.first_done_in(farm, &work.in_flight);
    let queued = work
        .first_queued
        .as_ref()
        .map(|place| model.finish_in(farm, place));
    let first = match (rendering, queued) {
        (Some(a), Some(b)) => a.min(b),
        (one, other) => one.or(other).unwrap_or_default(),
    };
    clamp(first)
}

/// `queue_full` of `MAX_QUEUE_WAIT`: when a job would start within the cap, `excess` seconds on.
pub fn queue_wait_retry(excess: Duration) -> u64 {
    clamp(excess.as_secs_f64())
}

/// When a job waiting at `wait.place` should start: 0 when a slot is free and nothing is ahead.
pub fn start_in(model: &FarmModel, wait: &QueueWait) -> Duration {
    let secs = model.start_in(&wait.farm, &wait.place);
    Duration::from_secs_f64(secs.clamp(0.0, QUEUE_HORIZON_SECS))
}

/// Whole seconds, rounded up — after rounding to milliseconds, so float noise does not add a
/// second.
fn clamp(secs: f64) -> u64 {
    let secs = (secs * 1000.0).round() / 1000.0;
    secs.clamp(MIN_HINT_SECS, MAX_HINT_SECS).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::farm::{InFlight, QueuePlace};

    const MODEL: FarmModel = FarmModel::TWO_SLOTS;

    fn rendering(left: &[f64]) -> FarmState {
        FarmState {
            in_flight: left
                .iter()
                .map(|&left| InFlight {
                    cost: Some(100.0),
                    elapsed_secs: 100.0 - left,
                })
                .collect(),
            ..FarmState::default()
        }
    }

    #[test]
    fn refusals_wait_for_what_frees_their_place() {
        let farm = rendering(&[5.0, 40.0]);
        assert_eq!(queue_full_retry(&MODEL, &farm), 5);
        assert_eq!(render_capacity_retry(&MODEL, &farm), 5);
        // A free slot: a queued job is taken at once, but a client waits at least a second.
        assert_eq!(queue_full_retry(&MODEL, &rendering(&[40.0])), 1);
        // Its own render ends in 40 s; its queued job (2 ahead of 30 s) would end later.
        let work = ActiveWork {
            in_flight: farm.in_flight[1..].to_vec(),
            first_queued: Some(QueuePlace {
                position: 3,
                ahead: vec![Some(30.0), Some(30.0)],
                rest: 0.0,
                cost: Some(30.0),
            }),
        };
        assert_eq!(active_jobs_retry(&MODEL, &farm, &work), 40);
        let queued_only = ActiveWork {
            in_flight: Vec::new(),
            ..work
        };
        // The slots free at 5 and 40 take the two ahead (5→35, 35→65): it starts at 40 and
        // ends at 70.
        assert_eq!(active_jobs_retry(&MODEL, &farm, &queued_only), 70);
        assert_eq!(active_jobs_retry(&MODEL, &farm, &ActiveWork::default()), 1);
    }

    #[test]
    fn hints_are_clamped_and_starts_bounded_by_a_day() {
        let slow = rendering(&[10_000.0, 10_000.0]);
        assert_eq!(queue_full_retry(&MODEL, &slow), 3600);
        let wait = QueueWait {
            farm: slow,
            place: QueuePlace {
                rest: 1e9,
                ..QueuePlace::default()
            },
        };
        assert_eq!(start_in(&MODEL, &wait), Duration::from_secs(86_400));
        assert_eq!(start_in(&MODEL, &QueueWait::default()), Duration::ZERO);
    }
}
