//! The jobs table's guarantees, by port: admission (`JobAdmission`), the reads (`JobReads`), the
//! workers' reports (`JobTransitions`) and the janitor's sweeps (`JobHousekeeping`).

use std::time::Duration;

use axum::http::HeaderValue;
use chrono::Utc;

use super::fresh_caller;
use crate::domain::callback::CallbackUrl;
use crate::domain::caller::Caller;
use crate::domain::failure::FailureCode;
use crate::domain::farm::{RenderCost, Weight};
use crate::domain::hash::{Md5, ReplayHash};
use crate::domain::job::{JobId, JobStatus};
use crate::domain::render::RenderOptions;
use crate::domain::replay::ReplayInfo;
use crate::ports::idempotency::{Claim, IdempotencyKey};
use crate::ports::jobs::{
    Admission, CapacityLimits, FarmRoom, JobAdmission, JobHousekeeping, JobQuery, JobReads,
    JobRecord, JobReport, JobTransitions, NewJob, NoRoom, Nonce, OccupancyLook, Resolved,
    Transition, TransitionOutcome,
};
use crate::ports::outbox::RENDER_JOB_CREATED;

/// Room for everything but the client's own cap (2).
pub const ROOMY: CapacityLimits = CapacityLimits {
    max_queued: 1_000_000,
    max_anonymous_queued: None,
    max_rendering: 1_000_000,
    max_active_per_client: 2,
    max_active_per_network: None,
    max_active_per_wide_network: None,
    farm: FarmRoom {
        render_slots: 1_000_000,
        release_ahead: 0,
    },
};

/// What a replay of `player` on the beatmap of MD5 `beatmap_md5` says, as admission parses it.
pub fn replay_info(player: &str, beatmap_md5: &str) -> ReplayInfo {
    ReplayInfo {
        player: player.into(),
        beatmap_md5: Md5::parse(beatmap_md5).expect("an MD5"),
        replay_md5: Md5::parse("0123456789abcdef0123456789abcdef").ok(),
        mode: "osu",
        mods: vec!["HD", "DT"],
        score: 1_000_000,
        max_combo: 727,
        accuracy: 98.5,
        count_300: 700,
        count_100: 20,
        count_50: 1,
        count_miss: 0,
        played_at: "2024-01-23T12:34:56Z".into(),
        length_ms: 120_000,
        online_id: None,
    }
}

/// A job of `caller`'s, of a replay whose bytes are `replay`, as admission would make it.
pub fn new_job(caller: &Caller, replay: &str) -> NewJob {
    let id = JobId::new();
    NewJob {
        id,
        client: caller.client().clone(),
        address: None,
        network: caller.network().cloned(),
        wide_network: caller.wide_network().cloned(),
        options: RenderOptions::default(),
        client_reference: None,
        replay_key: id.replay_key(),
        replay_sha256: ReplayHash::of(replay.as_bytes()),
        replay: replay_info("contract player", "fedcba9876543210fedcba9876543210"),
        completes: None,
        sandbox: None,
        callback: None,
        cost: RenderCost::of(120_000, Duration::from_secs(20)),
        weight: Weight::ONE,
    }
}

/// A worker's report moving a job to `to`, with a deadline while active.
pub(super) fn report(to: JobStatus) -> Transition {
    Transition {
        to,
        progress: None,
        video_key: None,
        thumb_key: None,
        error: None,
        error_code: None,
        deadline_in: to.is_active().then_some(Duration::from_secs(600)),
    }
}

fn fresh_nonce() -> Nonce {
    Nonce {
        value: format!("contract-{}", uuid::Uuid::new_v4()),
        expires_at: Utc::now() + chrono::Duration::minutes(10),
    }
}

/// The job as a read shows it; it must be there.
pub(super) async fn found(store: &dyn JobReads, id: JobId) -> JobRecord {
    let found = store.find(id).await.expect("answered");
    found.expect("the job is found")
}

/// A worker's report of `transition`, with `nonce` (a fresh one if `None`).
pub(super) async fn reported(
    store: &dyn JobTransitions,
    id: JobId,
    transition: Transition,
    nonce: Option<&Nonce>,
) -> TransitionOutcome {
    let fresh = fresh_nonce();
    let nonce = nonce.unwrap_or(&fresh);
    store
        .transition(&JobReport {
            id,
            transition: &transition,
            nonce,
        })
        .await
        .expect("answered")
}

pub(super) async fn admitted(store: &dyn JobAdmission, job: &NewJob) {
    match store.admit(job, &ROOMY).await.expect("answered") {
        Admission::Admitted(events) => {
            let own: Vec<_> = events.iter().filter(|e| e.job_id == job.id).collect();
            assert!(
                matches!(own[..], [event] if event.event_type == RENDER_JOB_CREATED
                    && event.group.as_deref() == Some(job.fair_client().as_str())),
                "a job admitted into a farm with room comes released, with its render event \
                 in its client's message group: {events:?}"
            );
        }
        other => panic!("a job with room is admitted with its event, got {other:?}"),
    }
}

pub async fn suite<S>(store: &S)
where
    S: JobAdmission + JobReads + JobTransitions + JobHousekeeping,
{
    admission(store).await;
    wide_network_cap(store).await;
    reads(store).await;
    replay_filters(store).await;
    failure_cooldown(store).await;
    transitions(store).await;
    housekeeping(store).await;
}

/// A job shows what its replay says, and a listing finds a player's (whatever the case) or a
/// beatmap's jobs, newest first.
async fn replay_filters<S: JobAdmission + JobReads>(store: &S) {
    let caller = fresh_caller();
    let of = |replay: &str, player: &str, beatmap: &str| NewJob {
        replay: replay_info(player, beatmap),
        ..new_job(&caller, replay)
    };
    let (beatmap_a, beatmap_b) = ("a".repeat(32), "b".repeat(32));
    let jobs = [
        of("contract-filter-1", "Cookiezi", &beatmap_a),
        of("contract-filter-2", "cookiezi", &beatmap_b),
        of("contract-filter-3", "WhiteCat", &beatmap_a),
    ];
    for job in &jobs {
        match store
            .admit(
                job,
                &CapacityLimits {
                    max_active_per_client: 3,
                    ..ROOMY
                },
            )
            .await
        {
            Ok(Admission::Admitted(_)) => {}
            other => panic!("a job with room is admitted, got {other:?}"),
        }
    }
    let record = found(store, jobs[0].id).await;
    assert_eq!(
        record.replay,
        serde_json::to_value(&jobs[0].replay).ok(),
        "a job shows what its replay says, as admitted"
    );
    let listed = |player: Option<&str>, beatmap: Option<&str>| {
        let query = JobQuery {
            status: None,
            player: player.map(str::to_owned),
            beatmap_md5: beatmap.map(|md5| Md5::parse(md5).expect("an MD5")),
            sandbox: false,
            limit: 10,
            after: None,
        };
        let client = caller.client().clone();
        async move {
            let page = store.list(&client, &query).await.expect("answered");
            page.jobs.iter().map(|job| job.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed(Some("COOKIEZI"), None).await,
        [jobs[1].id, jobs[0].id],
        "a player's jobs, whatever the case, newest first"
    );
    assert_eq!(
        listed(None, Some(&beatmap_a)).await,
        [jobs[2].id, jobs[0].id],
        "a beatmap's jobs"
    );
    assert_eq!(
        listed(Some("whitecat"), Some(&beatmap_a)).await,
        [jobs[2].id],
        "both filters at once"
    );
    assert!(
        listed(Some("nobody"), None).await.is_empty(),
        "no match, no jobs"
    );
}

/// A real render of a replay that failed for a reason of the replay's own is seen by every
/// client's look for the cooldown, then not; another failure (a crash, a stopped worker) is
/// not.
async fn failure_cooldown<S: JobAdmission + JobReads + JobTransitions>(store: &S) {
    let failed = |code| Transition {
        error: Some("the renderer crashed".into()),
        error_code: Some(code),
        ..report(JobStatus::Failed)
    };
    let retried = new_job(&fresh_caller(), "contract-failed-retryable");
    admitted(store, &retried).await;
    reported(
        store,
        retried.id,
        failed(FailureCode::RendererCrashed),
        None,
    )
    .await;
    let replay = format!("contract-failed-{}", uuid::Uuid::new_v4());
    let job = new_job(&fresh_caller(), &replay);
    admitted(store, &job).await;
    assert!(matches!(
        reported(store, job.id, failed(FailureCode::ReplayUnrenderable), None).await,
        TransitionOutcome::Applied { .. }
    ));
    assert_eq!(
        found(store, job.id).await.error_code,
        Some(FailureCode::ReplayUnrenderable),
        "a failed job keeps its code"
    );
    let other = fresh_caller();
    // Another client's look at `replay`: what is left of its failure cooldown.
    let look = async |replay: &ReplayHash, cooldown: Duration| {
        store
            .occupancy(&OccupancyLook {
                caller: &other,
                replay,
                failure_cooldown: cooldown,
                key: None,
            })
            .await
            .expect("answered")
            .0
            .failed_recently
    };
    let hour = Duration::from_secs(3600);
    assert!(
        look(&job.replay_sha256, hour)
            .await
            .is_some_and(|left| left <= hour && left > hour - Duration::from_secs(60)),
        "another client's look sees the failure, with what is left of the cooldown"
    );
    assert_eq!(
        look(&job.replay_sha256, Duration::ZERO).await,
        None,
        "no cooldown, no refusal"
    );
    let unrelated = new_job(&other, "contract-never-failed");
    assert_eq!(
        look(&unrelated.replay_sha256, hour).await,
        None,
        "another replay is not refused"
    );
    assert_eq!(
        look(&retried.replay_sha256, hour).await,
        None,
        "a failure that is not the replay's does not keep it out"
    );
}

async fn admission(store: &dyn JobAdmission) {
    let caller = fresh_caller();
    let before = store.overview().await.expect("answered").capacity;
    let job = new_job(&caller, "contract-replay-1");
    admitted(store, &job).await;
    let after = store.overview().await.expect("answered").capacity;
    let overview = store.overview().await.expect("answered");
    assert!(
        overview.capacity.queued >= after.queued && overview.capacity.queued >= 1,
        "the overview counts the queue as admission does"
    );
    assert_eq!(
        (after.queued, after.anonymous_queued),
        (before.queued + 1, before.anonymous_queued + 1),
        "an anonymous client's admitted job counts in the queue and the anonymous share"
    );

    let key = IdempotencyKey::parse(&HeaderValue::from_static("contract-look")).expect("a key");
    let key = Claim::new(caller.client(), "contract", key, Duration::from_secs(10));
    let asked = OccupancyLook {
        caller: &caller,
        replay: &job.replay_sha256,
        failure_cooldown: Duration::from_secs(3600),
        key: Some(&key),
    };
    let look = || store.occupancy(&asked);
    let (_, held) = look().await.expect("answered");
    assert_eq!(held, None, "a key nobody holds reads as free");
    let (occupancy, held) = look().await.expect("answered");
    assert_eq!(held, None, "and the look claimed nothing");
    assert_eq!(
        (
            occupancy.duplicate,
            occupancy.active_for_client,
            occupancy.active_for_network
        ),
        (Some(job.id), 1, 1),
        "the look sees the client's active job of this replay, and counts it for its network"
    );

    let again = new_job(&caller, "contract-replay-1");
    assert_eq!(
        store.admit(&again, &ROOMY).await.expect("answered"),
        Admission::NoRoom(NoRoom::Duplicate(job.id)),
        "the same replay of the same client is refused under the lock, naming the job"
    );
    let one_each = CapacityLimits {
        max_active_per_client: 1,
        ..ROOMY
    };
    let other = new_job(&caller, "contract-replay-2");
    assert_eq!(
        store.admit(&other, &one_each).await.expect("answered"),
        Admission::NoRoom(NoRoom::TooManyActiveJobs),
        "the client's cap is re-checked under the lock"
    );
    let network_full = CapacityLimits {
        max_active_per_network: Some(1),
        ..ROOMY
    };
    assert_eq!(
        store.admit(&other, &network_full).await.expect("answered"),
        Admission::NoRoom(NoRoom::TooManyNetworkJobs),
        "the network's cap is re-checked under the lock"
    );
    let queue_full = CapacityLimits {
        max_queued: after.queued,
        ..ROOMY
    };
    assert_eq!(
        store.admit(&other, &queue_full).await.expect("answered"),
        Admission::NoRoom(NoRoom::QueueFull),
        "the global queue cap is re-checked under the lock"
    );

    assert!(
        matches!(
            store.resolve(&job).await.expect("answered"),
            Resolved::Admitted
        ),
        "resolving a committed admission finds the job"
    );
    let never = new_job(&fresh_caller(), "contract-replay-3");
    assert_eq!(
        store.resolve(&never).await.expect("answered"),
        Resolved::Abandoned,
        "resolving an admission that never ran gives it up"
    );
    assert_eq!(
        store.admit(&never, &ROOMY).await.expect("answered"),
        Admission::Abandoned,
        "a late admission of a given-up job inserts nothing"
    );
}

/// The wide network's cap counts the active jobs of every network inside it: under the lock,
/// and in the look and the load; a client of another wide network is not held to it.
async fn wide_network_cap(store: &dyn JobAdmission) {
    // Two clients, each of its own network, in one wide network.
    let first = fresh_caller();
    let other = fresh_caller();
    let second = Caller::anonymous(
        other.address().clone(),
        other.network().cloned().expect("anonymous"),
        first.wide_network().cloned().expect("anonymous"),
    );
    assert_ne!(first.network(), second.network());
    let wide_full = CapacityLimits {
        max_active_per_network: Some(1),
        max_active_per_wide_network: Some(1),
        ..ROOMY
    };
    let job = new_job(&first, "contract-wide-1");
    assert!(
        matches!(
            store.admit(&job, &wide_full).await.expect("answered"),
            Admission::Admitted(_)
        ),
        "the wide network's first job is admitted"
    );
    let refused = new_job(&second, "contract-wide-2");
    assert_eq!(
        store.admit(&refused, &wide_full).await.expect("answered"),
        Admission::NoRoom(NoRoom::TooManyWideNetworkJobs),
        "another network of the wide network is held to its cap, under the lock"
    );
    let (occupancy, _) = store
        .occupancy(&OccupancyLook {
            caller: &second,
            replay: &refused.replay_sha256,
            failure_cooldown: Duration::ZERO,
            key: None,
        })
        .await
        .expect("answered");
    assert_eq!(
        (
            occupancy.active_for_network,
            occupancy.active_for_wide_network
        ),
        (0, 1),
        "the look counts the wide network's job, not for the other network"
    );
    let load = store.load(&second).await.expect("answered");
    assert_eq!(
        load.wide_network
            .first_queued
            .map(|place| place.position > 0),
        Some(true),
        "the load finds the wide network's queued job"
    );
    let elsewhere = new_job(&fresh_caller(), "contract-wide-3");
    assert!(
        matches!(
            store.admit(&elsewhere, &wide_full).await.expect("answered"),
            Admission::Admitted(_)
        ),
        "a client of another wide network is not held to it"
    );
}

async fn reads<S: JobAdmission + JobReads>(store: &S) {
    let caller = fresh_caller();
    let (first, second) = (
        new_job(&caller, "contract-read-1"),
        new_job(&caller, "contract-read-2"),
    );
    admitted(store, &first).await;
    admitted(store, &second).await;
    let record = found(store, first.id).await;
    assert_eq!(
        (record.status, record.progress, record.sandbox),
        (JobStatus::Queued, 0.0, false),
        "a new job is queued"
    );
    assert!(
        record.queue_position.is_some_and(|place| place >= 1),
        "a queued job has a place in the queue"
    );
    assert_eq!(
        store.find(JobId::new()).await.expect("answered"),
        None,
        "an unknown id finds nothing"
    );

    let all = JobQuery {
        status: None,
        player: None,
        beatmap_md5: None,
        sandbox: false,
        limit: 10,
        after: None,
    };
    let page = store.list(caller.client(), &all).await.expect("answered");
    let ids: Vec<JobId> = page.jobs.iter().map(|job| job.id).collect();
    assert_eq!(
        (ids, page.next),
        (vec![second.id, first.id], None),
        "a client lists its own jobs, newest first"
    );
    let one = JobQuery {
        limit: 1,
        ..all.clone()
    };
    let page = store.list(caller.client(), &one).await.expect("answered");
    assert_eq!(page.jobs.len(), 1, "a page holds at most its limit");
    let next = JobQuery {
        after: page.next,
        ..one.clone()
    };
    assert!(
        page.next.is_some(),
        "a full page says where the next starts"
    );
    assert_eq!(
        page.total,
        Some(2),
        "the first page counts every page's jobs"
    );
    let rest = store.list(caller.client(), &next).await.expect("answered");
    assert_eq!(
        rest.jobs.iter().map(|job| job.id).collect::<Vec<_>>(),
        vec![first.id],
        "the next page continues after the cursor"
    );
    assert_eq!(rest.total, None, "a later page counts nothing");
    let stranger = fresh_caller();
    let theirs = store.list(stranger.client(), &all).await.expect("answered");
    assert!(
        theirs.jobs.is_empty() && theirs.total == Some(0),
        "nobody lists (or counts) another client's jobs"
    );
}

async fn transitions<S: JobAdmission + JobReads + JobTransitions>(store: &S) {
    let caller = fresh_caller();
    let job = new_job(&caller, "contract-move");
    admitted(store, &job).await;
    let nonce = fresh_nonce();
    let downloading = report(JobStatus::Downloading);
    assert_eq!(
        reported(store, job.id, downloading, Some(&nonce)).await,
        TransitionOutcome::Applied {
            status: JobStatus::Downloading,
            progress: 0.0,
            calls_back: false,
            pushes: false,
        },
        "a legal report moves the job (one without a callback_url calls nothing back, an \
         unwatched one pushes nothing)"
    );
    assert_eq!(
        reported(store, job.id, report(JobStatus::Rendering), Some(&nonce)).await,
        TransitionOutcome::NonceReused,
        "a nonce is spent once"
    );
    assert_eq!(
        reported(store, job.id, report(JobStatus::Completed), None).await,
        TransitionOutcome::Illegal {
            current: JobStatus::Downloading
        },
        "an illegal move is refused, naming the current state"
    );
    assert_eq!(
        reported(store, JobId::new(), report(JobStatus::Rendering), None).await,
        TransitionOutcome::UnknownJob,
        "a report of an unknown job changes nothing"
    );
    let rendering = Transition {
        progress: Some(40.0),
        ..report(JobStatus::Rendering)
    };
    reported(store, job.id, rendering, None).await;
    let record = found(store, job.id).await;
    assert_eq!(
        (record.status, record.progress, record.queue_position),
        (JobStatus::Rendering, 40.0, None),
        "a read shows the reported state and progress, and no place in the queue"
    );

    // A job with a callback: a change says whether it queued one (`queue_job_callback`): every
    // status change does, a progress update within 5 s of the last callback does not.
    let mut calling = new_job(&caller, "contract-calls-back");
    calling.callback = Some(CallbackUrl::parse("https://example.com/hook", false).expect("a URL"));
    admitted(store, &calling).await;
    let calls_back = async |status: JobStatus, progress: f32| {
        let moved = Transition {
            progress: Some(progress),
            ..report(status)
        };
        match reported(store, calling.id, moved, None).await {
            TransitionOutcome::Applied { calls_back, .. } => calls_back,
            other => panic!("a legal report is applied, got {other:?}"),
        }
    };
    assert!(
        calls_back(JobStatus::Downloading, 0.0).await,
        "a status change queues a callback"
    );
    assert!(calls_back(JobStatus::Rendering, 10.0).await);
    assert!(
        !calls_back(JobStatus::Rendering, 20.0).await,
        "a progress update right after one queues none"
    );
}

async fn housekeeping<S: JobAdmission + JobReads + JobTransitions + JobHousekeeping>(store: &S) {
    let caller = fresh_caller();
    let queued = new_job(&caller, "contract-expire");
    admitted(store, &queued).await;
    assert_eq!(
        store
            .expire_queued(Duration::from_secs(3600))
            .await
            .expect("answered"),
        0,
        "a young queued job is not expired"
    );
    // Any time past its admission is more than a zero TTL.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(store.expire_queued(Duration::ZERO).await.expect("answered") >= 1);
    let record = found(store, queued.id).await;
    assert_eq!(
        (record.status, record.error.is_some()),
        (JobStatus::Expired, true),
        "a queued job past its TTL expires, saying why"
    );

    let active = new_job(&caller, "contract-stall");
    admitted(store, &active).await;
    reported(store, active.id, report(JobStatus::Rendering), None).await;
    store.fail_stalled(Duration::ZERO).await.expect("answered");
    assert_eq!(
        found(store, active.id).await.status,
        JobStatus::Rendering,
        "a job within its reported deadline is not failed"
    );
    let overdue = new_job(&caller, "contract-overdue");
    admitted(store, &overdue).await;
    let short = Transition {
        deadline_in: Some(Duration::from_millis(1)),
        ..report(JobStatus::Rendering)
    };
    reported(store, overdue.id, short, None).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        store
            .fail_stalled(Duration::from_secs(3600))
            .await
            .expect("answered")
            >= 1,
        "a job past its reported deadline is failed"
    );
    let record = found(store, overdue.id).await;
    assert_eq!(
        (record.status, record.error.as_deref()),
        (JobStatus::Failed, Some("timed out")),
        "however long the stall timeout, saying why"
    );
    store
        .delete_ended(Duration::ZERO, 1_000_000)
        .await
        .expect("answered");
    assert!(
        store.find(active.id).await.expect("answered").is_some(),
        "an active job is never deleted"
    );
    assert_eq!(
        store.find(queued.id).await.expect("answered"),
        None,
        "an ended job past its retention is deleted"
    );
    assert_eq!(
        store
            .delete_ended(Duration::ZERO, 0)
            .await
            .expect("answered")
            .jobs,
        0,
        "a batch of 0 deletes nothing"
    );
    store.prune_nonces(1_000_000).await.expect("answered");
    store.prune_fences(1_000_000).await.expect("answered");
}
