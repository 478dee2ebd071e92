//! The queue of record's release (`JobRelease`, with `JobAdmission`'s pipelined release):
//! fair service's properties, on a simulated farm that takes what is released and reports it
//! rendered. Every admitted job is released exactly once and never past the room; one client's
//! jobs go first in, first out; busy clients are served render-seconds in proportion to their
//! weights; an idle client banks no credit; a newcomer is not starved; an ended job frees its
//! slot. Run on a store of its own (release acts on every queued job).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use super::fresh_caller;
use super::jobs::{new_job, report, reported, ROOMY};
use crate::domain::caller::Caller;
use crate::domain::farm::{RenderCost, Weight};
use crate::domain::job::{JobId, JobStatus};
use crate::ports::jobs::{
    Admission, CapacityLimits, FarmRoom, JobAdmission, JobHousekeeping, JobRelease, JobTransitions,
    NewJob,
};

/// What the suites need of a store.
pub trait FairStore: JobAdmission + JobTransitions + JobRelease + JobHousekeeping {}
impl<S: JobAdmission + JobTransitions + JobRelease + JobHousekeeping> FairStore for S {}

/// A deterministic pseudo-random sequence (xorshift): the same cases on every store and run.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn limits(room: FarmRoom) -> CapacityLimits {
    CapacityLimits {
        max_active_per_client: 10_000,
        farm: room,
        ..ROOMY
    }
}

/// The farm: who has been released, in order, and what it still renders.
struct Farm<'a, S: FairStore> {
    store: &'a S,
    room: FarmRoom,
    /// Released, in release order.
    released: Vec<JobId>,
    /// Released and not finished.
    holding: VecDeque<JobId>,
}

impl<'a, S: FairStore> Farm<'a, S> {
    fn new(store: &'a S, render_slots: i64, release_ahead: i64) -> Self {
        Self {
            store,
            room: FarmRoom {
                render_slots,
                release_ahead,
            },
            released: Vec::new(),
            holding: VecDeque::new(),
        }
    }

    fn took(&mut self, events: Vec<crate::ports::outbox::OutboxEvent>) {
        for event in events {
            self.released.push(event.job_id);
            self.holding.push_back(event.job_id);
        }
        let room = (self.room.render_slots + self.room.release_ahead) as usize;
        assert!(
            self.holding.len() <= room,
            "the farm holds {} jobs, more than its room {room}",
            self.holding.len()
        );
    }

    /// Jobs released elsewhere, now the farm's.
    fn took_over(&mut self, released: Vec<JobId>) {
        self.released.extend(&released);
        self.holding.extend(released);
    }

    async fn admit(&mut self, job: &NewJob) {
        match self
            .store
            .admit(job, &limits(self.room))
            .await
            .expect("answered")
        {
            Admission::Admitted(events) => self.took(events),
            other => panic!("a job with room is admitted, got {other:?}"),
        }
    }

    async fn release(&mut self) {
        let events = self.store.release(self.room).await.expect("answered");
        self.took(events);
    }

    /// The oldest job the farm holds renders and completes (or fails); the next is released.
    async fn finish_one(&mut self, ends: JobStatus) -> Option<JobId> {
        let id = self.holding.pop_front()?;
        let moves: &[JobStatus] = match ends {
            JobStatus::Completed => &[JobStatus::Rendering, JobStatus::Completed],
            other => &[other],
        };
        for &to in moves {
            let outcome = reported(self.store, id, report(to), None).await;
            assert!(
                matches!(
                    outcome,
                    crate::ports::jobs::TransitionOutcome::Applied { .. }
                ),
                "{id} moves to {to}: {outcome:?}"
            );
        }
        self.release().await;
        Some(id)
    }
}

fn job_of(caller: &Caller, tag: &str, cost_secs: i64, weight: u32) -> NewJob {
    NewJob {
        cost: RenderCost::of(cost_secs * 1000, Duration::ZERO),
        weight: Weight::new(weight).expect("a weight"),
        ..new_job(caller, &format!("release-{tag}-{}", uuid::Uuid::new_v4()))
    }
}

pub async fn suite<S: FairStore>(store: &S) {
    exactly_once_within_the_room_first_in_first_out_per_client(store).await;
    weighted_render_seconds(store).await;
    an_idle_client_gets_no_burst_and_a_newcomer_no_wait(store).await;
    an_ended_job_frees_its_slot(store).await;
    an_unclaimed_release_is_failed_and_frees_its_slot(store).await;
    one_job_at_a_time_clients_do_not_starve_a_backlog(store).await;
    concurrent_releases_stay_within_the_room(store).await;
}

/// A released job no worker takes (its message lost: a job released after it has started) is
/// failed by the janitor's sweep, and the next job is released; a release still waiting for a
/// worker, and a job waiting for its release, are not touched.
async fn an_unclaimed_release_is_failed_and_frees_its_slot<S: FairStore>(store: &S) {
    let mut farm = Farm::new(store, 2, 0);
    let client = fresh_caller();
    let job = || job_of(&client, "lost", 60, 1);
    let (lost, later, waiting) = (job(), job(), job());
    farm.admit(&lost).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    farm.admit(&later).await;
    farm.admit(&waiting).await;
    assert_eq!(farm.released, [lost.id, later.id]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let fail_unclaimed =
        async |older_than| store.fail_unclaimed(older_than).await.expect("answered");
    assert_eq!(
        fail_unclaimed(Duration::ZERO).await,
        0,
        "no worker has started anything: the releases wait for one"
    );
    reported(store, later.id, report(JobStatus::Downloading), None).await;
    assert_eq!(
        fail_unclaimed(Duration::from_secs(3600)).await,
        0,
        "a young release is left alone"
    );
    assert_eq!(
        fail_unclaimed(Duration::ZERO).await,
        1,
        "the release a worker passed over, not the job waiting for its release"
    );
    farm.holding.retain(|id| *id != lost.id);
    farm.release().await;
    assert_eq!(
        farm.released,
        [lost.id, later.id, waiting.id],
        "its slot is free again"
    );
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
}

/// Clients that each keep exactly one job in the farm, submitting the next when theirs ends,
/// advance through virtual time like any other: a client with a backlog beside them is served
/// its share, not starved.
async fn one_job_at_a_time_clients_do_not_starve_a_backlog<S: FairStore>(store: &S) {
    let mut farm = Farm::new(store, 1, 0);
    let trickle: Vec<Caller> = (0..3).map(|_| fresh_caller()).collect();
    let backlog = fresh_caller();
    let mut whose: HashMap<JobId, usize> = HashMap::new();
    for _ in 0..12 {
        let job = job_of(&backlog, "backlog", 60, 1);
        whose.insert(job.id, trickle.len());
        farm.admit(&job).await;
    }
    for (n, client) in trickle.iter().enumerate() {
        let job = job_of(client, "trickle", 60, 1);
        whose.insert(job.id, n);
        farm.admit(&job).await;
    }
    let from = farm.released.len();
    for _ in 0..24 {
        let done = farm.finish_one(JobStatus::Completed).await.expect("a job");
        if let Some(&who) = whose.get(&done).filter(|who| **who < trickle.len()) {
            let next = job_of(&trickle[who], "trickle", 60, 1);
            whose.insert(next.id, who);
            farm.admit(&next).await;
        }
    }
    let served = farm.released[from..]
        .iter()
        .filter(|id| whose[*id] == trickle.len())
        .count();
    assert!(
        served >= 5,
        "the backlog got {served} of the last {} releases beside three one-at-a-time clients",
        farm.released.len() - from
    );
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
}

/// Releases racing each other (and admissions) never hand out one job twice nor more than the
/// room; the fair clients the clock has passed are forgotten.
async fn concurrent_releases_stay_within_the_room<S: FairStore>(store: &S) {
    let room = FarmRoom {
        render_slots: 3,
        release_ahead: 1,
    };
    let full = FarmRoom {
        render_slots: 0,
        release_ahead: 0,
    };
    let clients: Vec<Caller> = (0..4).map(|_| fresh_caller()).collect();
    let jobs: Vec<NewJob> = (0..16)
        .map(|n| job_of(&clients[n % clients.len()], "race", 60, 1))
        .collect();
    for job in &jobs {
        // Admitted into a farm with no room: every job waits.
        let admitted = store.admit(job, &limits(full)).await.expect("answered");
        assert_eq!(admitted, Admission::Admitted(Vec::new()));
    }
    let releases = (0..8).map(|_| store.release(room));
    let released: Vec<JobId> = futures_util::future::join_all(releases)
        .await
        .into_iter()
        .flat_map(|events| events.expect("answered"))
        .map(|event| event.job_id)
        .collect();
    let distinct: HashSet<JobId> = released.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        released.len(),
        "no job released twice: {released:?}"
    );
    assert_eq!(
        released.len(),
        4,
        "exactly the room, however many race: {released:?}"
    );
    let mut farm = Farm::new(store, 3, 1);
    farm.took_over(released);
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
    assert!(
        store.prune_fair_clients(1_000_000).await.expect("answered") >= 1,
        "clients whose last finish the clock passed are forgotten"
    );
}

/// Random clients and costs, jobs arriving while the farm works: each job is released once,
/// the farm never holds more than its room, and each client's jobs go in admission order.
async fn exactly_once_within_the_room_first_in_first_out_per_client<S: FairStore>(store: &S) {
    let mut cases = Cases(0x5eed_f00d);
    let mut farm = Farm::new(store, 3, 1);
    let clients: Vec<Caller> = (0..6).map(|_| fresh_caller()).collect();
    let mut admitted: HashMap<JobId, usize> = HashMap::new();
    let mut order: Vec<Vec<JobId>> = vec![Vec::new(); clients.len()];
    for round in 0..120 {
        if round < 80 {
            let who = cases.below(clients.len() as u64) as usize;
            let cost = 10 + cases.below(900) as i64;
            let job = job_of(&clients[who], "once", cost, 1 + cases.below(3) as u32);
            farm.admit(&job).await;
            admitted.insert(job.id, who);
            order[who].push(job.id);
        }
        if cases.below(3) > 0 {
            farm.finish_one(JobStatus::Completed).await;
        }
    }
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
    let released: HashSet<JobId> = farm.released.iter().copied().collect();
    assert_eq!(
        released.len(),
        farm.released.len(),
        "no job is released twice"
    );
    assert_eq!(
        released,
        admitted.keys().copied().collect(),
        "every admitted job is released"
    );
    for (who, jobs) in order.iter().enumerate() {
        let in_release: Vec<JobId> = farm
            .released
            .iter()
            .copied()
            .filter(|id| admitted[id] == who)
            .collect();
        assert_eq!(
            &in_release, jobs,
            "client {who}'s jobs go first in, first out"
        );
    }
}

/// Three clients of weights 1, 1 and 2, always backlogged, jobs of random render time on one
/// slot: the render-seconds each is served are within ±10% of 1:1:2.
async fn weighted_render_seconds<S: FairStore>(store: &S) {
    let mut cases = Cases(0xfa1e);
    let mut farm = Farm::new(store, 1, 0);
    let weights = [1u32, 1, 2];
    let clients: Vec<Caller> = weights.iter().map(|_| fresh_caller()).collect();
    let mut cost_of: HashMap<JobId, (usize, i64)> = HashMap::new();
    let mut backlog = [0usize; 3];
    let mut served = [0i64; 3];
    for _ in 0..240 {
        for who in 0..clients.len() {
            while backlog[who] < 4 {
                let cost = 30 + cases.below(570) as i64;
                let job = job_of(&clients[who], "weights", cost, weights[who]);
                cost_of.insert(job.id, (who, cost));
                backlog[who] += 1;
                farm.admit(&job).await;
            }
        }
        let done = farm.finish_one(JobStatus::Completed).await.expect("a job");
        let (who, cost) = cost_of[&done];
        backlog[who] -= 1;
        served[who] += cost;
    }
    let unit = served.iter().sum::<i64>() as f64 / 4.0;
    for (who, weight) in weights.iter().enumerate() {
        let share = served[who] as f64 / (unit * f64::from(*weight));
        assert!(
            (0.9..=1.1).contains(&share),
            "client {who} of weight {weight} was served {} render-seconds of {:?}: {share:.3} \
             of its share",
            served[who],
            served
        );
    }
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
}

/// A client busy for a long time, then one that was idle arrives with a burst of equal jobs: it
/// gets every other slot, not a run banked from its idle time; a newcomer with one job is
/// released within the next two releases.
async fn an_idle_client_gets_no_burst_and_a_newcomer_no_wait<S: FairStore>(store: &S) {
    let mut farm = Farm::new(store, 1, 0);
    let (busy, idle, newcomer) = (fresh_caller(), fresh_caller(), fresh_caller());
    let mut whose: HashMap<JobId, &str> = HashMap::new();
    for _ in 0..30 {
        let job = job_of(&busy, "busy", 60, 1);
        whose.insert(job.id, "busy");
        farm.admit(&job).await;
    }
    for _ in 0..10 {
        farm.finish_one(JobStatus::Completed).await;
    }
    for _ in 0..10 {
        let job = job_of(&idle, "idle", 60, 1);
        whose.insert(job.id, "idle");
        farm.admit(&job).await;
    }
    let from = farm.released.len();
    for _ in 0..10 {
        farm.finish_one(JobStatus::Completed).await;
    }
    let next: Vec<&str> = farm.released[from..].iter().map(|id| whose[id]).collect();
    // Equal tags tie by id, so two in a row can happen; a run of three cannot.
    let runs = next
        .windows(3)
        .filter(|w| w.iter().all(|who| *who == "idle"))
        .count();
    assert!(
        runs == 0 && next.iter().filter(|who| **who == "idle").count() <= 6,
        "the returning client alternates with the busy one, it banked nothing: {next:?}"
    );
    let job = job_of(&newcomer, "newcomer", 60, 1);
    farm.admit(&job).await;
    let from = farm.released.len();
    for _ in 0..3 {
        farm.finish_one(JobStatus::Completed).await;
    }
    assert!(
        farm.released[from..].iter().take(3).any(|id| *id == job.id),
        "a newcomer's job is released within a few releases: {:?}",
        &farm.released[from..]
    );
    while farm.finish_one(JobStatus::Completed).await.is_some() {}
}

/// A failed render frees its slot as a completed one does, and a queued job the janitor
/// expires before its release is never released.
async fn an_ended_job_frees_its_slot<S: FairStore>(store: &S) {
    let mut farm = Farm::new(store, 1, 0);
    let client = fresh_caller();
    let (first, second) = (
        job_of(&client, "ends", 60, 1),
        job_of(&client, "ends", 60, 1),
    );
    farm.admit(&first).await;
    farm.admit(&second).await;
    assert_eq!(farm.released, [first.id], "one slot: the first job only");
    assert_eq!(farm.finish_one(JobStatus::Failed).await, Some(first.id));
    assert_eq!(
        farm.released,
        [first.id, second.id],
        "a failed job frees its slot"
    );
    // A job waiting for release when the janitor expires the queue is never released (the
    // second is a worker's by then).
    reported(store, second.id, report(JobStatus::Downloading), None).await;
    let third = job_of(&client, "ends", 60, 1);
    farm.admit(&third).await;
    store.expire_queued(Duration::ZERO).await.expect("answered");
    farm.finish_one(JobStatus::Completed).await;
    assert!(
        !farm.released.contains(&third.id),
        "an expired job is not released"
    );
}
