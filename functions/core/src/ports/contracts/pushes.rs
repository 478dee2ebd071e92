//! The push queue's guarantees (ports/events.rs `PushQueue`), with the jobs a push is queued
//! for: a watched job's (or a watched key's job's) insert and each change of its status or
//! progress queue one push per job, coalesced; a claim leases it; a push marked sent for an
//! older state stays queued. Give it a store of its own (`next_due` reads the whole queue).

use std::time::Duration;

use chrono::Utc;

use super::fresh_caller;
use super::jobs::{admitted, found, new_job, report, reported};
use crate::domain::client::ClientKey;
use crate::domain::events::Topic;
use crate::domain::job::{JobId, JobStatus};
use crate::domain::KeyId;
use crate::ports::events::{DuePush, PushQueue};
use crate::ports::jobs::{
    JobAdmission, JobReads, JobTransitions, NewJob, Transition, TransitionOutcome,
};

/// Short enough to wait out, long enough that a claim right after still finds it held.
const LEASE: Duration = Duration::from_millis(400);
const HOUR: Duration = Duration::from_secs(3600);

/// The jobs a push queue is filled by (one database with it): admitted, read and moved here.
pub trait PushedJobs: JobAdmission + JobReads + JobTransitions {}
impl<S: JobAdmission + JobReads + JobTransitions> PushedJobs for S {}

/// `q` is filled by `store`'s jobs (one database).
pub async fn suite<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    assert_eq!(next_due(q).await, None, "a fresh store queues nothing");
    an_unwatched_change_queues_nothing(q, store).await;
    a_watched_change_queues_one_push(q, store).await;
    changes_coalesce_and_a_stale_push_keeps_the_row(q, store).await;
    a_claim_leases(q, store).await;
    a_key_covers_its_later_jobs_only(q, store).await;
    push_at_queues_or_brings_forward(q, store).await;
    an_expired_watch_queues_nothing(q, store).await;
    pruning_is_bounded(q, store).await;
}

async fn next_due(q: &dyn PushQueue) -> Option<Duration> {
    q.next_due().await.expect("answered")
}

async fn claim(q: &dyn PushQueue, lease: Duration) -> Vec<DuePush> {
    q.claim(1000, lease).await.expect("answered")
}

async fn watch(q: &dyn PushQueue, topic: &Topic) {
    let until = Utc::now() + chrono::Duration::from_std(HOUR).unwrap();
    q.watch(topic, until).await.expect("answered");
}

/// Empties the queue of `job`'s push, whatever its sequence.
async fn drop_push(q: &dyn PushQueue, job: JobId) {
    q.pushed(job, i64::MAX).await.expect("answered");
}

async fn job_of<S: JobAdmission>(store: &S, client: Option<&ClientKey>) -> NewJob {
    let mut job = new_job(&fresh_caller(), &format!("pushes {}", uuid::Uuid::new_v4()));
    if let Some(client) = client {
        job.client = client.clone();
        job.network = None;
        job.wide_network = None;
    }
    admitted(store, &job).await;
    job
}

/// A job of its own, admitted and watched.
async fn watched_job<S: JobAdmission>(q: &dyn PushQueue, store: &S) -> NewJob {
    let job = job_of(store, None).await;
    watch(q, &Topic::Job(job.id)).await;
    job
}

/// A report of `status` at `progress`; whether it queued a push.
async fn moved(store: &dyn JobTransitions, id: JobId, status: JobStatus, progress: f32) -> bool {
    let transition = Transition {
        progress: Some(progress),
        ..report(status)
    };
    match reported(store, id, transition, None).await {
        TransitionOutcome::Applied { pushes, .. } => pushes,
        other => panic!("a legal report is applied, got {other:?}"),
    }
}

fn jobs(claimed: &[DuePush]) -> Vec<JobId> {
    claimed.iter().map(|push| push.job).collect()
}

async fn an_unwatched_change_queues_nothing<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let job = job_of(store, None).await;
    assert!(!moved(store, job.id, JobStatus::Downloading, 0.0).await);
    assert!(!moved(store, job.id, JobStatus::Rendering, 10.0).await);
    assert_eq!(
        found(store, job.id).await.sequence,
        2,
        "each change of status or progress counts one, watched or not"
    );
    assert_eq!(claim(q, LEASE).await, [], "an unwatched job queues no push");
    assert_eq!(next_due(q).await, None);
}

async fn a_watched_change_queues_one_push<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let job = watched_job(q, store).await;
    assert_eq!(claim(q, LEASE).await, [], "a watch alone queues nothing");
    assert!(
        moved(store, job.id, JobStatus::Downloading, 0.0).await,
        "a watched job's change says it queued a push"
    );
    assert_eq!(next_due(q).await, Some(Duration::ZERO), "due now");
    let claimed = claim(q, LEASE).await;
    assert_eq!(
        claimed,
        [DuePush {
            job: job.id,
            client: job.client.clone(),
            attempts: 1,
        }],
        "the change is claimed, with its job's client"
    );
    let sequence = found(store, job.id).await.sequence;
    assert_eq!(sequence, 1);
    q.pushed(job.id, sequence).await.unwrap();
    assert_eq!(next_due(q).await, None, "a push sent is removed");
    assert!(
        !moved(store, job.id, JobStatus::Downloading, 0.0).await,
        "a report that changes nothing queues nothing"
    );
    assert_eq!(found(store, job.id).await.sequence, 1, "nor counts");
}

async fn changes_coalesce_and_a_stale_push_keeps_the_row<S: PushedJobs>(
    q: &dyn PushQueue,
    store: &S,
) {
    let job = watched_job(q, store).await;
    moved(store, job.id, JobStatus::Downloading, 0.0).await;
    moved(store, job.id, JobStatus::Rendering, 10.0).await;
    moved(store, job.id, JobStatus::Rendering, 20.0).await;
    assert_eq!(
        jobs(&claim(q, LEASE).await),
        [job.id],
        "three changes are one push"
    );
    let sent = found(store, job.id).await.sequence;
    assert!(moved(store, job.id, JobStatus::Rendering, 30.0).await);
    let claimed = claim(q, LEASE).await;
    assert_eq!(
        jobs(&claimed),
        [job.id],
        "a change while the push is leased makes it due again"
    );
    assert_eq!(
        claimed[0].attempts, 1,
        "a change starts the push's attempts over"
    );
    q.pushed(job.id, sent).await.unwrap();
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    assert_eq!(
        jobs(&claim(q, LEASE).await),
        [job.id],
        "the push of an older state leaves the newer one queued"
    );
    q.pushed(job.id, found(store, job.id).await.sequence)
        .await
        .unwrap();
    assert_eq!(next_due(q).await, None);
}

async fn a_claim_leases<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let job = watched_job(q, store).await;
    moved(store, job.id, JobStatus::Downloading, 0.0).await;
    assert_eq!(jobs(&claim(q, LEASE).await), [job.id]);
    assert_eq!(claim(q, LEASE).await, [], "leased: not claimed again");
    let left = next_due(q).await.expect("still queued");
    assert!(
        left > Duration::ZERO && left <= LEASE,
        "due again when its lease ends: {left:?}"
    );
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let again = claim(q, LEASE).await;
    assert_eq!(jobs(&again), [job.id], "an unfinished push is due again");
    assert_eq!(again[0].attempts, 2, "its claims are counted");
    assert_eq!(q.claim(0, LEASE).await.unwrap(), [], "a limit is kept");
    drop_push(q, job.id).await;
    assert_eq!(next_due(q).await, None);
}

async fn a_key_covers_its_later_jobs_only<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let key = KeyId::new().client();
    let earlier = job_of(store, Some(&key)).await;
    watch(q, &Topic::Key(key.clone())).await;
    let later = job_of(store, Some(&key)).await;
    let other_key = job_of(store, Some(&KeyId::new().client())).await;
    let anonymous = job_of(store, None).await;
    let claimed = claim(q, LEASE).await;
    assert_eq!(
        claimed,
        [DuePush {
            job: later.id,
            client: key.clone(),
            attempts: 1,
        }],
        "a watched key's job admitted later is queued; no other client's"
    );
    drop_push(q, later.id).await;
    assert!(moved(store, earlier.id, JobStatus::Downloading, 0.0).await);
    assert!(!moved(store, other_key.id, JobStatus::Downloading, 0.0).await);
    assert!(!moved(store, anonymous.id, JobStatus::Downloading, 0.0).await);
    assert_eq!(
        jobs(&claim(q, LEASE).await),
        [earlier.id],
        "each change of the key's jobs is queued, those admitted before the watch too"
    );
    drop_push(q, earlier.id).await;
    assert_eq!(next_due(q).await, None);
}

async fn push_at_queues_or_brings_forward<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let job = job_of(store, None).await;
    let in_an_hour = Utc::now() + chrono::Duration::from_std(HOUR).unwrap();
    q.push_at(job.id, in_an_hour).await.unwrap();
    let left = next_due(q).await.expect("queued");
    assert!(
        left > HOUR - Duration::from_secs(60) && left <= HOUR,
        "due when asked: {left:?}"
    );
    assert_eq!(claim(q, LEASE).await, [], "not due yet");
    let later = in_an_hour + chrono::Duration::from_std(HOUR).unwrap();
    q.push_at(job.id, later).await.unwrap();
    assert!(
        next_due(q).await.unwrap() <= HOUR,
        "a queued push is never put back"
    );
    q.push_at(job.id, Utc::now()).await.unwrap();
    let claimed = claim(q, LEASE).await;
    assert_eq!(jobs(&claimed), [job.id], "brought forward, it is due");
    assert_eq!(claimed[0].client, job.client);
    q.push_at(job.id, in_an_hour).await.unwrap();
    let left = next_due(q).await.expect("queued");
    assert!(
        left > LEASE,
        "a claimed push's claimer sets its next time: {left:?}"
    );
    q.push_at(JobId::new(), Utc::now())
        .await
        .expect("a push of no job is nothing");
    drop_push(q, job.id).await;
    assert_eq!(next_due(q).await, None);
}

async fn an_expired_watch_queues_nothing<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let job = job_of(store, None).await;
    let ended = Utc::now() - chrono::Duration::seconds(1);
    q.watch(&Topic::Job(job.id), ended).await.unwrap();
    assert!(!moved(store, job.id, JobStatus::Downloading, 0.0).await);
    assert_eq!(next_due(q).await, None, "a watch that ended queues nothing");
    watch(q, &Topic::Job(job.id)).await;
    assert!(
        moved(store, job.id, JobStatus::Rendering, 5.0).await,
        "watched again, it queues"
    );
    drop_push(q, job.id).await;
}

async fn pruning_is_bounded<S: PushedJobs>(q: &dyn PushQueue, store: &S) {
    let ended = Utc::now() - chrono::Duration::seconds(1);
    for _ in 0..3 {
        let topic = Topic::Job(JobId::new());
        q.watch(&topic, ended).await.unwrap();
    }
    let kept = JobId::new();
    watch(q, &Topic::Job(kept)).await;
    let pruned = q.prune_watches(2).await.unwrap();
    assert_eq!(pruned, 2, "at most the limit");
    let rest = q.prune_watches(100).await.unwrap();
    assert_eq!(
        rest, 1,
        "the ended ones only (the expired-watch job was watched again)"
    );
    assert_eq!(q.prune_watches(100).await.unwrap(), 0);
    let job = job_of(store, None).await;
    q.watch(
        &Topic::Job(job.id),
        Utc::now() + chrono::Duration::seconds(60),
    )
    .await
    .unwrap();
    assert_eq!(
        q.prune_watches(100).await.unwrap(),
        0,
        "an open watch stays"
    );
}
