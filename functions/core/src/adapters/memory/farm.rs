//! The queue of record on the memory database, as release_jobs, farm_state and queue_place
//! keep it in Postgres (start-time fair queuing; sql/functions/).

use super::*;
use crate::domain::farm::{fair_tags, Rendered};

/// A new job's tags, as admit_job computes them under the global lock: after the clock and its
/// fair client's last finish.
pub(super) fn tags(tables: &Tables, job: &NewJob) -> (f64, f64) {
    let last = tables.fair_clients.get(job.fair_client().as_str()).copied();
    fair_tags(tables.fair_clock, last, job.cost, job.weight)
}

fn waiting(j: &MemoryJob) -> bool {
    j.status == JobStatus::Queued && j.released_at.is_some()
}

fn unreleased(j: &MemoryJob) -> bool {
    j.status == JobStatus::Queued && j.released_at.is_none() && j.cost.is_some()
}

fn fair_order(j: &MemoryJob) -> (f64, uuid::Uuid) {
    (j.fair_start, j.id.as_uuid())
}

fn in_order(a: (f64, uuid::Uuid), b: (f64, uuid::Uuid)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// release_jobs: the next unreleased jobs in fair order, as many as the room leaves.
pub(super) fn release(tables: &mut Tables, room: FarmRoom, lease: Duration) -> Vec<OutboxEvent> {
    let held = tables
        .jobs
        .iter()
        .filter(|j| matches!(j.status, JobStatus::Downloading | JobStatus::Rendering) || waiting(j))
        .count() as i64;
    let free = room.render_slots + room.release_ahead - held;
    if free <= 0 {
        return Vec::new();
    }
    let mut next: Vec<(f64, uuid::Uuid)> = tables
        .jobs
        .iter()
        .filter(|j| unreleased(j))
        .map(fair_order)
        .collect();
    next.sort_by(|a, b| in_order(*a, *b));
    next.truncate(usize::try_from(free).unwrap_or(0));
    let now = Utc::now();
    let mut released = Vec::new();
    for (start, id) in next {
        if let Some(job) = tables.jobs.iter_mut().find(|j| j.id.as_uuid() == id) {
            job.released_at = Some(now);
            tables.fair_clock = tables.fair_clock.max(start);
            released.push(job.id);
        }
    }
    let mut events = Vec::new();
    for row in tables.events.iter_mut() {
        if released.contains(&row.event.job_id) && row.status == EventStatus::Pending {
            row.event.attempts += 1;
            row.available_at = now + lease;
            events.push(row.event.clone());
        }
    }
    events
}

fn in_flight(j: &MemoryJob) -> InFlight {
    let since = j.started_at.or(j.released_at).unwrap_or(j.updated_at);
    InFlight {
        cost: j.cost,
        elapsed_secs: (Utc::now() - since).num_milliseconds() as f64 / 1000.0,
    }
}

/// Downloading or rendering jobs these are.
pub(super) fn in_flight_of(tables: &Tables, of: impl Fn(&MemoryJob) -> bool) -> Vec<InFlight> {
    tables
        .jobs
        .iter()
        .filter(|j| matches!(j.status, JobStatus::Downloading | JobStatus::Rendering) && of(j))
        .map(in_flight)
        .collect()
}

/// farm_state.
pub(super) fn state(tables: &Tables) -> FarmState {
    let since = Utc::now() - Duration::from_secs(3600);
    let mut rendered = Rendered::default();
    for j in &tables.jobs {
        let done = j.status == JobStatus::Completed && !j.sandbox && j.updated_at > since;
        if let (true, Some(cost), Some(started)) = (done, j.cost, j.started_at) {
            rendered.cost_secs += cost;
            rendered.busy_secs += (j.updated_at - started).num_milliseconds() as f64 / 1000.0;
            rendered.jobs += 1;
        }
    }
    FarmState {
        in_flight: in_flight_of(tables, |_| true),
        waiting: tables.jobs.iter().filter(|j| waiting(j)).count() as i64,
        rendered,
    }
}

/// queue_place of a queued job.
pub(super) fn place_of(tables: &Tables, job: &MemoryJob) -> QueuePlace {
    match job.released_at {
        Some(released) => {
            let mut ahead: Vec<&MemoryJob> = tables
                .jobs
                .iter()
                .filter(|j| {
                    waiting(j)
                        && (j.released_at, j.id.as_uuid()) < (Some(released), job.id.as_uuid())
                })
                .collect();
            ahead.sort_by_key(|j| (j.released_at, j.id.as_uuid()));
            QueuePlace {
                position: ahead.len() as i64 + 1,
                ahead: ahead.iter().map(|j| j.cost).collect(),
                rest: 0.0,
                cost: job.cost,
            }
        }
        None => QueuePlace {
            cost: job.cost,
            ..place_before(tables, fair_order(job))
        },
    }
}

/// queue_place of a job not yet made whose start tag is `start`: after every job of that tag.
pub(super) fn place_at(tables: &Tables, start: f64) -> QueuePlace {
    place_before(tables, (start, uuid::Uuid::max()))
}

/// Queue_place's listed jobs, one by one (its `c_listed`).
const LISTED: usize = 64;

fn place_before(tables: &Tables, at: (f64, uuid::Uuid)) -> QueuePlace {
    let mut waiting_ahead: Vec<&MemoryJob> = tables.jobs.iter().filter(|j| waiting(j)).collect();
    waiting_ahead.sort_by_key(|j| (j.released_at, j.id.as_uuid()));
    let mut fair_ahead: Vec<&MemoryJob> = tables
        .jobs
        .iter()
        .filter(|j| unreleased(j) && in_order(fair_order(j), at).is_lt())
        .collect();
    fair_ahead.sort_by(|a, b| in_order(fair_order(a), fair_order(b)));
    let position = (waiting_ahead.len() + fair_ahead.len()) as i64 + 1;
    let listed = fair_ahead.len().min(LISTED);
    let mut ahead: Vec<Option<f64>> = waiting_ahead.iter().map(|j| j.cost).collect();
    ahead.extend(fair_ahead[..listed].iter().map(|j| j.cost));
    QueuePlace {
        position,
        ahead,
        rest: fair_ahead[listed..].iter().filter_map(|j| j.cost).sum(),
        cost: None,
    }
}

/// The active work of the jobs `of` picks: in flight, and the first queued to go.
pub(super) fn active_work(tables: &Tables, of: impl Fn(&MemoryJob) -> bool) -> ActiveWork {
    let first_queued = tables
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Queued && of(j))
        .min_by(|a, b| {
            let key = |j: &MemoryJob| (j.released_at.is_none(), j.released_at);
            key(a)
                .cmp(&key(b))
                .then(in_order(fair_order(a), fair_order(b)))
        })
        .map(|j| place_of(tables, j));
    ActiveWork {
        in_flight: in_flight_of(tables, &of),
        first_queued,
    }
}

#[async_trait]
impl JobRelease for MemoryDatabase {
    async fn release(&self, room: FarmRoom) -> Result<Vec<OutboxEvent>, StoreError> {
        Ok(release(
            &mut self.statement("jobs.release"),
            room,
            self.event_lease,
        ))
    }
}

/// Overview, as the status read makes it.
pub(super) fn overview(tables: &Tables) -> Overview {
    let oldest = |keyed: bool| {
        tables
            .jobs
            .iter()
            .filter(|j| j.status == JobStatus::Queued)
            .filter(|j| (j.client.scope() == LimitScope::Key) == keyed)
            .map(|j| (Utc::now() - j.created_at).num_milliseconds() as f64 / 1000.0)
            .max_by(f64::total_cmp)
    };
    Overview {
        capacity: capacity_of(tables),
        wait: QueueWait {
            farm: state(tables),
            place: place_at(tables, tables.fair_clock),
        },
        queue_age: QueueAges {
            anonymous: oldest(false),
            keys: oldest(true),
        },
    }
}
