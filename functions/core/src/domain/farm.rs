//! The render farm as the service models it (DESIGN.md "Fair service"): what a job costs in
//! render-seconds, its fair tags, and when a queued job should start given what the farm is
//! doing. Pure arithmetic, so the estimates are tested without a database.

use std::collections::BinaryHeap;
use std::time::Duration;

use serde::Deserialize;

/// A job's expected render time in render-seconds: its play's length at its mods' speed plus
/// a fixed per-job overhead (download, start, encode, upload). A slot that renders at speed 1
/// takes this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct RenderCost(f64);

impl RenderCost {
    /// At least one render-second: a job never costs nothing.
    pub fn of(play_ms: i64, overhead: Duration) -> Self {
        let play = play_ms.max(0) as f64 / 1000.0;
        Self((play + overhead.as_secs_f64()).max(1.0))
    }

    pub fn secs(self) -> f64 {
        self.0
    }
}

/// A client's share of render time relative to others: 1 to `Weight::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct Weight(u32);

impl Weight {
    pub const MAX: u32 = 1000;
    pub const ONE: Self = Self(1);

    pub fn new(weight: u32) -> Result<Self, String> {
        if (1..=Self::MAX).contains(&weight) {
            Ok(Self(weight))
        } else {
            Err(format!("a weight is 1 to {}, not {weight}", Self::MAX))
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Start-time fair queuing tags: a job starts at the later of the system's virtual time and
/// its client's latest active finish tag, and finishes `cost / weight` later. Jobs are released
/// by smallest start tag. A client that was idle starts at the clock: it banks no credit.
pub fn fair_tags(
    clock: f64,
    client_finish: Option<f64>,
    cost: RenderCost,
    weight: Weight,
) -> (f64, f64) {
    let start = client_finish.map_or(clock, |finish| finish.max(clock));
    (start, start + cost.secs() / f64::from(weight.get()))
}

/// A render a worker is doing: its cost and how long it has run.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct InFlight {
    /// `None` for a job of an earlier release, which recorded none.
    pub cost: Option<f64>,
    pub elapsed_secs: f64,
}

/// What the last hour's completed renders took: the farm's measured speed.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
pub struct Rendered {
    /// Their render-seconds together.
    pub cost_secs: f64,
    /// Their time from a worker's first report to completion, together.
    pub busy_secs: f64,
    pub jobs: i64,
}

/// What the farm is doing now.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct FarmState {
    /// Downloading or rendering.
    pub in_flight: Vec<InFlight>,
    /// Released to the render queue and not taken by a worker yet.
    pub waiting: i64,
    pub rendered: Rendered,
}

impl FarmState {
    /// Slots the farm holds: released jobs not finished (`RENDER_SLOTS` + `RELEASE_AHEAD` at
    /// most, as release_jobs keeps it).
    pub fn slots_in_use(&self) -> i64 {
        self.in_flight.len() as i64 + self.waiting
    }
}

/// A queued job's place in the release order: the jobs ahead of it (released ones not taken
/// yet, then those before it in fair order), the first few one by one and the rest summed.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct QueuePlace {
    /// 1-based.
    pub position: i64,
    /// Costs of the first jobs ahead, in order.
    pub ahead: Vec<Option<f64>>,
    /// Render-seconds of the jobs ahead past those.
    pub rest: f64,
    /// The job's own cost; `None` for a job of an earlier release or a job not yet made.
    pub cost: Option<f64>,
}

/// A queued job's place and the farm it waits for: what its start is estimated from.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueWait {
    pub farm: FarmState,
    pub place: QueuePlace,
}

/// A client's (or a network's) active jobs, as far as when the first ends goes: those a worker
/// has, and the place of the first still queued.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ActiveWork {
    pub in_flight: Vec<InFlight>,
    pub first_queued: Option<QueuePlace>,
}

/// Jobs completed within the last hour below which the farm's speed is the configured one.
pub const MIN_SAMPLES: i64 = 5;

/// The farm's parameters: how many jobs it renders at once, its speed before there is history,
/// and what a job of unknown cost is taken to cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FarmModel {
    pub slots: i64,
    /// Render-seconds one slot renders per second.
    pub default_speed: f64,
    pub unknown_cost: f64,
}

impl FarmModel {
    /// Render-seconds per second per slot: measured over the last hour's completions, once
    /// there are `MIN_SAMPLES`, else the configured default.
    pub fn speed(&self, state: &FarmState) -> f64 {
        let rendered = state.rendered;
        if rendered.jobs >= MIN_SAMPLES && rendered.busy_secs > 0.0 && rendered.cost_secs > 0.0 {
            rendered.cost_secs / rendered.busy_secs
        } else {
            self.default_speed
        }
    }

    fn seconds(&self, cost: Option<f64>, speed: f64) -> f64 {
        cost.unwrap_or(self.unknown_cost).max(0.0) / speed
    }

    /// Seconds until each slot is free, soonest first: a busy slot when its render should end
    /// (now, if it is overdue), an idle one at once. A farm rendering more than `slots` jobs is
    /// that much larger.
    pub fn slots_free_in(&self, state: &FarmState) -> Vec<f64> {
        let speed = self.speed(state);
        let mut free: Vec<f64> = state
            .in_flight
            .iter()
            .map(|job| (self.seconds(job.cost, speed) - job.elapsed_secs).max(0.0))
            .collect();
        let slots = usize::try_from(self.slots.max(1)).unwrap_or(1);
        free.resize(free.len().max(slots), 0.0);
        free.sort_by(f64::total_cmp);
        free
    }

    /// Seconds until a job at `place` starts: the jobs ahead of it are handed, in order, to
    /// the slot that frees first (list scheduling); the summed rest is poured over the slots
    /// as a fluid. Then it takes the first free slot.
    pub fn start_in(&self, state: &FarmState, place: &QueuePlace) -> f64 {
        let speed = self.speed(state);
        let mut slots: BinaryHeap<Free> = self.slots_free_in(state).into_iter().map(Free).collect();
        for cost in &place.ahead {
            let Some(Free(at)) = slots.pop() else { break };
            slots.push(Free(at + self.seconds(*cost, speed)));
        }
        let mut times: Vec<f64> = slots.into_iter().map(|Free(at)| at).collect();
        times.sort_by(f64::total_cmp);
        water_level(&times, place.rest.max(0.0) / speed)
    }

    /// Seconds until a job at `place` should be done.
    pub fn finish_in(&self, state: &FarmState, place: &QueuePlace) -> f64 {
        self.start_in(state, place) + self.seconds(place.cost, self.speed(state))
    }

    /// Seconds until the first of these renders should end.
    pub fn first_done_in(&self, state: &FarmState, renders: &[InFlight]) -> Option<f64> {
        let speed = self.speed(state);
        renders
            .iter()
            .map(|job| (self.seconds(job.cost, speed) - job.elapsed_secs).max(0.0))
            .min_by(f64::total_cmp)
    }
}

/// A slot's free time, soonest first out of a max-heap.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Free(f64);

impl Eq for Free {}

impl PartialOrd for Free {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Free {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0)
    }
}

/// The level `work` seconds reach when poured over slots free at `times` (sorted): where the
/// next job starts once that work is done. With no work, the first free time.
fn water_level(times: &[f64], work: f64) -> f64 {
    let Some(&first) = times.first() else {
        return work;
    };
    let mut level = first;
    let mut left = work;
    for (filled, window) in times.windows(2).enumerate() {
        let width = (filled + 1) as f64;
        let room = (window[1] - level) * width;
        if left <= room {
            return level + left / width;
        }
        left -= room;
        level = window[1];
    }
    level + left / times.len() as f64
}

/// The unit tests' farm: two slots at speed 1, where a job of unknown cost takes 120 s.
#[cfg(test)]
impl FarmModel {
    pub(crate) const TWO_SLOTS: FarmModel = FarmModel {
        slots: 2,
        default_speed: 1.0,
        unknown_cost: 120.0,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: FarmModel = FarmModel::TWO_SLOTS;

    fn busy(pairs: &[(f64, f64)]) -> FarmState {
        FarmState {
            in_flight: pairs
                .iter()
                .map(|&(cost, elapsed_secs)| InFlight {
                    cost: Some(cost),
                    elapsed_secs,
                })
                .collect(),
            ..FarmState::default()
        }
    }

    fn place(ahead: &[f64], rest: f64) -> QueuePlace {
        QueuePlace {
            position: ahead.len() as i64 + 1,
            ahead: ahead.iter().copied().map(Some).collect(),
            rest,
            cost: Some(10.0),
        }
    }

    #[test]
    fn a_cost_is_the_play_and_the_overhead_and_never_nothing() {
        assert_eq!(
            RenderCost::of(90_000, Duration::from_secs(20)).secs(),
            110.0
        );
        assert_eq!(RenderCost::of(-5, Duration::ZERO).secs(), 1.0);
    }

    #[test]
    fn weights_are_bounded() {
        assert!(Weight::new(0).is_err());
        assert!(Weight::new(1001).is_err());
        assert_eq!(Weight::new(1000).unwrap().get(), 1000);
    }

    #[test]
    fn tags_start_at_the_clock_or_after_the_clients_own_work() {
        let cost = RenderCost::of(10_000, Duration::ZERO);
        assert_eq!(fair_tags(50.0, None, cost, Weight::ONE), (50.0, 60.0));
        assert_eq!(
            fair_tags(50.0, Some(20.0), cost, Weight::ONE),
            (50.0, 60.0),
            "idle: no credit"
        );
        let two = Weight::new(2).unwrap();
        assert_eq!(fair_tags(50.0, Some(70.0), cost, two), (70.0, 75.0));
    }

    #[test]
    fn a_free_slot_starts_a_job_at_once() {
        assert_eq!(
            MODEL.start_in(&busy(&[(100.0, 10.0)]), &place(&[], 0.0)),
            0.0
        );
        assert_eq!(MODEL.start_in(&FarmState::default(), &place(&[], 0.0)), 0.0);
    }

    #[test]
    fn jobs_ahead_take_the_slots_that_free_first() {
        // Slots free in 10 s and 60 s; two jobs of 30 s ahead: they start at 10 and 40.
        let state = busy(&[(100.0, 90.0), (100.0, 40.0)]);
        assert_eq!(MODEL.start_in(&state, &place(&[], 0.0)), 10.0);
        assert_eq!(MODEL.start_in(&state, &place(&[30.0], 0.0)), 40.0);
        assert_eq!(MODEL.start_in(&state, &place(&[30.0, 30.0], 0.0)), 60.0);
        // The summed rest is poured: 40 s of work over slots free at 60 and 70 → 85.
        assert_eq!(MODEL.start_in(&state, &place(&[30.0, 30.0], 40.0)), 85.0);
        assert_eq!(MODEL.finish_in(&state, &place(&[], 0.0)), 20.0);
    }

    #[test]
    fn measured_speed_replaces_the_default_once_there_is_history() {
        let mut state = busy(&[(100.0, 0.0), (100.0, 0.0)]);
        assert_eq!(MODEL.start_in(&state, &place(&[], 0.0)), 100.0);
        state.rendered = Rendered {
            cost_secs: 400.0,
            busy_secs: 100.0,
            jobs: MIN_SAMPLES,
        };
        assert_eq!(MODEL.start_in(&state, &place(&[], 0.0)), 25.0);
        state.rendered.jobs = MIN_SAMPLES - 1;
        assert_eq!(MODEL.speed(&state), 1.0);
    }

    #[test]
    fn an_overdue_render_frees_its_slot_any_moment_and_unknown_costs_use_the_default() {
        let state = FarmState {
            in_flight: vec![
                InFlight {
                    cost: Some(10.0),
                    elapsed_secs: 50.0,
                },
                InFlight {
                    cost: None,
                    elapsed_secs: 20.0,
                },
            ],
            ..FarmState::default()
        };
        assert_eq!(MODEL.slots_free_in(&state), vec![0.0, 100.0]);
        assert_eq!(MODEL.first_done_in(&state, &state.in_flight), Some(0.0));
    }

    #[test]
    fn the_water_level_fills_the_lowest_slots_first() {
        assert_eq!(water_level(&[0.0, 10.0], 0.0), 0.0);
        assert_eq!(water_level(&[0.0, 10.0], 5.0), 5.0);
        assert_eq!(water_level(&[0.0, 10.0], 30.0), 20.0);
        assert_eq!(water_level(&[], 7.0), 7.0);
    }
}
