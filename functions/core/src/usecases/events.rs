//! Live job events (docs/API.md "Live events"): a WebSocket's connect, frames and disconnect,
//! and the dispatcher's pushes of watched jobs' changes.
//!
//! A subscription is kept in the connection store (DynamoDB), and its topic marked watched in
//! the push queue (Postgres): from then on the database queues a push for each change of a
//! watched job, coalesced per job, and the dispatcher sends the job's current state to every
//! subscriber. Replies to a client's frames go through the same pusher.

use std::time::Duration;

use chrono::Utc;
use futures_util::stream::{self, StreamExt};

use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::events::{
    ClientFrame, ConnectionId, ErrorCode, InvalidFrame, JobEvent, ServerFrame, Subject, Target,
    Topic, MAX_SUBSCRIPTIONS,
};
use crate::domain::failure::FailureCode;
use crate::domain::job::{JobId, JobStatus};
use crate::domain::key::{ApiKey, KeyKind};
use crate::domain::rate::LimitScope;
use crate::domain::sandbox;
use crate::ports::events::{DuePush, PushError, Pushed, Pusher, Subscribed, CONNECTION_TTL};
use crate::ports::jobs::{JobQuery, JobRecord};
use crate::ports::limiter::Hit;
use crate::ports::StoreError;
use crate::support::config::Config;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::callbacks;
use crate::usecases::jobs::Links;
use crate::usecases::keys::caller::KEY_LOOKUP_ENDPOINT;
use crate::usecases::keys::lookup::KeyRefusal;
use crate::usecases::request::{check_rate_limit, check_rate_windows, epoch_secs, Counted, Window};

/// The rate-limited endpoint name of connects (per address and per network).
pub const CONNECT_ENDPOINT: &str = "events_connect";
/// The same of a connection's frames.
pub const FRAMES_ENDPOINT: &str = "events_frames";

/// Pushes claimed per sweep, and how many jobs are pushed at once.
const PUSH_BATCH: i64 = 200;
const JOBS_IN_FLIGHT: usize = 16;
/// Frames in flight at once, over all connections; each waits at most `PUSH_TIMEOUT`, so a slow
/// or dead connection holds back no other.
const FRAMES_IN_FLIGHT: usize = 50;
const PUSH_TIMEOUT: Duration = Duration::from_secs(3);
/// A claimed push not finished within this is due again (its dispatcher died).
const PUSH_LEASE: Duration = Duration::from_secs(30);
/// Claims of one push whose subscribers could not be read before it is given up (the next
/// change queues it again).
const MAX_PUSH_ATTEMPTS: i32 = 5;
/// The most subscribers of one topic a push reaches.
const MAX_SUBSCRIBERS: usize = 10_000;
/// The most of a key's jobs sent when it is subscribed to: its newest.
const KEY_SNAPSHOT: i64 = 100;

/// `$connect`: counted against the address's and its network's windows; a refusal is the
/// connection's 429.
pub async fn connect(app: &App, id: &ConnectionId, caller: &Caller) -> Result<(), Rejection> {
    let limits = &app.config.rate_limits;
    let windows = [
        Window {
            endpoint: CONNECT_ENDPOINT,
            limit: limits.events_connect,
            counted: Counted::Address,
        },
        Window {
            endpoint: CONNECT_ENDPOINT,
            limit: limits.events_connect_network,
            counted: Counted::Network,
        },
    ];
    check_rate_windows(app, caller, &windows).await?;
    app.connections
        .open(id, Utc::now() + CONNECTION_TTL)
        .await
        .map_err(|error| {
            tracing::error!(%error, "recording a connection failed");
            Rejection::LimiterUnavailable
        })
}

/// `$disconnect`: the connection and its subscriptions are forgotten (best effort: what is
/// left expires with the connection's TTL, and a push to it is answered `Gone`).
pub async fn disconnect(app: &App, id: &ConnectionId) {
    if let Err(error) = app.connections.close(id).await {
        tracing::warn!(%error, %id, "forgetting a closed connection failed");
    }
}

/// A client frame: answered by frames pushed to the connection.
pub async fn receive(app: &App, id: &ConnectionId, frame: &[u8]) {
    let Some(pusher) = &app.pusher else {
        tracing::error!("a frame arrived where no pusher is configured (EVENTS_MANAGEMENT_URL)");
        return;
    };
    for reply in answer(app, id, frame).await {
        match pusher.push(id, &reply.to_json()).await {
            Ok(Pushed::Delivered) => {}
            Ok(Pushed::Gone) => return disconnect(app, id).await,
            Err(error) => {
                tracing::warn!(%error, %id, "answering a frame failed");
                return;
            }
        }
    }
}

/// What a frame is answered with.
async fn answer(app: &App, id: &ConnectionId, frame: &[u8]) -> Vec<ServerFrame> {
    if let Err(refused) = count_frame(app, id).await {
        return vec![refused];
    }
    match ClientFrame::parse(frame) {
        Err(InvalidFrame(why)) => vec![ServerFrame::error(ErrorCode::InvalidMessage, why)],
        Ok(Err(malformed)) => vec![ServerFrame::error(
            ErrorCode::InvalidApiKey,
            malformed.to_string(),
        )],
        Ok(Ok(ClientFrame::Subscribe(Target::Job(job)))) => subscribe_job(app, id, job)
            .await
            .unwrap_or_else(|refused| vec![refused]),
        Ok(Ok(ClientFrame::Subscribe(Target::Key(key)))) => subscribe_key(app, id, &key)
            .await
            .unwrap_or_else(|refused| vec![refused]),
        Ok(Ok(ClientFrame::Ping)) => vec![ServerFrame::Pong],
        Ok(Ok(ClientFrame::Unsubscribe(target))) => unsubscribe(app, id, &target)
            .await
            .map_or_else(|refused| vec![refused], |done| vec![done]),
    }
}

/// The connection's frame window (`RATE_LIMIT_EVENTS_FRAMES`).
async fn count_frame(app: &App, id: &ConnectionId) -> Result<(), ServerFrame> {
    let limit = app.config.rate_limits.events_frames;
    let hit = Hit {
        endpoint: FRAMES_ENDPOINT,
        client: &id.frame_counter(),
        limit,
        now: epoch_secs(),
    };
    match app.limiter.hit(hit).await {
        Ok(rate) if rate.allowed => Ok(()),
        Ok(rate) => Err(ServerFrame::error(
            ErrorCode::RateLimited,
            format!(
                "at most {} frames per {} s on one connection; this one was not read (retry in {} s)",
                limit.requests,
                limit.period_secs,
                rate.retry_after
            ),
        )),
        Err(_) if app.config.rate_limits.fail_open => Ok(()),
        Err(error) => {
            tracing::error!(%error, "rate limiter unavailable");
            Err(unavailable())
        }
    }
}

/// A job's subscription: its state first, then its changes.
async fn subscribe_job(
    app: &App,
    id: &ConnectionId,
    job: JobId,
) -> Result<Vec<ServerFrame>, ServerFrame> {
    // Read first, so an id that names nothing costs no write.
    find(app, job).await?;
    let topic = Topic::Job(job);
    follow(app, id, &topic).await?;
    // Read again after the subscription holds: a change since then is pushed, so none falls
    // between the state sent here and the pushes.
    let record = find(app, job).await?;
    if schedule_sandbox_step(app, &record).await {
        // The sweep it runs asks to be woken again when the step falls due.
        callbacks::wake_dispatcher(app).await;
    }
    Ok(vec![
        ServerFrame::Subscribed(Subject::Job { job_id: job }),
        ServerFrame::Job(job_event(&app.config, &record)),
    ])
}

/// A key's subscription: its newest active jobs' states, then every change of its jobs, those
/// admitted later included.
async fn subscribe_key(
    app: &App,
    id: &ConnectionId,
    key: &ApiKey,
) -> Result<Vec<ServerFrame>, ServerFrame> {
    let (key_id, client) = key_client(app, id, key).await?;
    follow(app, id, &Topic::Key(client.clone())).await?;
    let query = JobQuery {
        status: None,
        player: None,
        beatmap_md5: None,
        sandbox: key.kind() == KeyKind::Sandbox,
        limit: KEY_SNAPSHOT,
        after: None,
    };
    let page = app
        .job_reads
        .list(&client, &query)
        .await
        .map_err(store_failed)?;
    let mut frames = vec![ServerFrame::Subscribed(Subject::Key { key_id })];
    let mut scheduled = false;
    for record in page.jobs.into_iter().filter(|job| job.status.is_active()) {
        scheduled |= schedule_sandbox_step(app, &record).await;
        frames.push(ServerFrame::Job(job_event(&app.config, &record)));
    }
    if scheduled {
        callbacks::wake_dispatcher(app).await;
    }
    Ok(frames)
}

async fn unsubscribe(
    app: &App,
    id: &ConnectionId,
    target: &Target,
) -> Result<ServerFrame, ServerFrame> {
    let (topic, subject) = match target {
        Target::Job(job) => (Topic::Job(*job), Subject::Job { job_id: *job }),
        Target::Key(key) => {
            let (key_id, client) = key_client(app, id, key).await?;
            (Topic::Key(client), Subject::Key { key_id })
        }
    };
    app.connections
        .unsubscribe(id, &topic)
        .await
        .map_err(store_failed)?;
    Ok(ServerFrame::Unsubscribed(subject))
}

/// The key's id and client, if it is a key that counts. A lookup the instance cache cannot
/// answer is counted in the connection's own `RATE_LIMIT_KEY_LOOKUP` window.
async fn key_client(
    app: &App,
    id: &ConnectionId,
    key: &ApiKey,
) -> Result<(String, ClientKey), ServerFrame> {
    let limit = app.config.rate_limits.key_lookup;
    let counter = id.frame_counter();
    let before_read = async {
        check_rate_limit(app, KEY_LOOKUP_ENDPOINT, limit, &counter)
            .await
            .map(|_| ())
    };
    let bearer = format!("Bearer {}", key.expose());
    match app.keys.authenticate(&bearer, before_read).await {
        Ok(record) => {
            let key_id = record.summary.id;
            Ok((key_id.to_string(), key_id.client()))
        }
        Err(KeyRefusal::Malformed(malformed)) => Err(ServerFrame::error(
            ErrorCode::InvalidApiKey,
            malformed.to_string(),
        )),
        Err(KeyRefusal::Unknown) => Err(ServerFrame::error(
            ErrorCode::InvalidApiKey,
            "unknown API key",
        )),
        Err(KeyRefusal::Revoked) => Err(ServerFrame::error(
            ErrorCode::InvalidApiKey,
            "this API key has been revoked",
        )),
        Err(KeyRefusal::Held(_)) => Err(ServerFrame::error(
            ErrorCode::RateLimited,
            "too many lookups of unknown keys on this connection",
        )),
        Err(KeyRefusal::Unavailable(error)) => Err(store_failed(error)),
    }
}

/// Watches `topic`, then subscribes the connection to it: a change between the two is pushed
/// to no one yet, never lost to this subscriber, whose state is read after both.
async fn follow(app: &App, id: &ConnectionId, topic: &Topic) -> Result<(), ServerFrame> {
    let until = Utc::now() + CONNECTION_TTL;
    app.pushes.watch(topic, until).await.map_err(store_failed)?;
    match app
        .connections
        .subscribe(id, topic, MAX_SUBSCRIPTIONS, until)
        .await
        .map_err(store_failed)?
    {
        Subscribed::Added | Subscribed::Already => Ok(()),
        Subscribed::Full => Err(ServerFrame::error(
            ErrorCode::TooManySubscriptions,
            format!("at most {MAX_SUBSCRIPTIONS} subscriptions on one connection"),
        )),
    }
}

async fn find(app: &App, job: JobId) -> Result<JobRecord, ServerFrame> {
    match app.job_reads.find(job).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(ServerFrame::error(
            ErrorCode::NotFound,
            format!("no job {job}"),
        )),
        Err(error) => Err(store_failed(error)),
    }
}

fn store_failed(error: StoreError) -> ServerFrame {
    tracing::error!(%error, "a live-event frame's store call failed");
    unavailable()
}

fn unavailable() -> ServerFrame {
    ServerFrame::error(
        ErrorCode::Unavailable,
        "the service could not answer; send the frame again",
    )
}

/// A sandbox job's steps are its age's, not changes the database sees: while it is watched,
/// a push is queued for its next one (then the dispatcher is to be woken: whether it is).
async fn schedule_sandbox_step(app: &App, record: &JobRecord) -> bool {
    let Some(at) = next_sandbox_step(record) else {
        return false;
    };
    match app.pushes.push_at(record.id, at).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, job = %record.id, "queuing a sandbox job's next push failed");
            false
        }
    }
}

fn next_sandbox_step(record: &JobRecord) -> Option<chrono::DateTime<Utc>> {
    if !record.sandbox {
        return None;
    }
    let age = (Utc::now() - record.created_at)
        .to_std()
        .unwrap_or_default();
    let next = sandbox::step_at(age).1?;
    Some(record.created_at + chrono::Duration::from_std(next).ok()?)
}

/// A job's sequence: its stored count of changes, and for a sandbox job the steps of its
/// schedule it shows too (they change what it shows, not its row).
fn sequence(record: &JobRecord) -> i64 {
    match record.sandbox {
        true => record.sequence + sandbox::step_of(record.status, record.progress),
        false => record.sequence,
    }
}

/// A job's state as a `job` frame carries it.
pub fn job_event(config: &Config, record: &JobRecord) -> JobEvent {
    let links = (record.status == JobStatus::Completed)
        .then(|| serde_json::to_value(Links::of(config, record, false)).ok())
        .flatten();
    JobEvent {
        job_id: record.id,
        status: record.status,
        progress: record.progress,
        sequence: sequence(record),
        replay: record.replay.clone(),
        links,
        error_code: record.failure().map(FailureCode::as_str),
        retryable: record.failure().map(FailureCode::retryable),
        client_reference: record.client_reference.clone(),
    }
}

/// What one push sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PushReport {
    /// Jobs claimed.
    pub claimed: u64,
    /// Frames delivered.
    pub delivered: u64,
    /// Connections found closed (and forgotten).
    pub gone: u64,
    /// Frames not delivered (no answer, refused), and jobs whose push failed.
    pub failed: u64,
}

impl PushReport {
    fn add(mut self, other: Self) -> Self {
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.gone += other.gone;
        self.failed += other.failed;
        self
    }
}

/// The dispatcher's sweep: each due push sends its job's current state to its subscribers
/// and its key's. Nothing is pushed where no pusher is configured.
pub async fn sweep_pushes(app: &App) -> Result<PushReport, StoreError> {
    let Some(pusher) = &app.pusher else {
        return Ok(PushReport::default());
    };
    let due = app.pushes.claim(PUSH_BATCH, PUSH_LEASE).await?;
    let claimed = due.len() as u64;
    let report = stream::iter(due)
        .map(|push| push_job(app, pusher.as_ref(), push))
        .buffer_unordered(JOBS_IN_FLIGHT)
        .fold(
            PushReport::default(),
            |total, one| async move { total.add(one) },
        )
        .await;
    Ok(PushReport { claimed, ..report })
}

async fn push_job(app: &App, pusher: &dyn Pusher, push: DuePush) -> PushReport {
    let failed = PushReport {
        failed: 1,
        ..PushReport::default()
    };
    let record = match app.job_reads.find(push.job).await {
        Ok(Some(record)) => record,
        // Deleted since: its push row went with it.
        Ok(None) => return PushReport::default(),
        Err(error) => {
            tracing::warn!(%error, job = %push.job, "reading a watched job failed");
            return failed;
        }
    };
    let targets = match subscribers(app, &push).await {
        Ok(targets) => targets,
        Err(error) if push.attempts < MAX_PUSH_ATTEMPTS => {
            tracing::warn!(%error, job = %push.job, "reading a job's subscribers failed");
            return failed;
        }
        Err(error) => {
            tracing::error!(%error, job = %push.job, "giving a job's push up");
            finish(app, &record).await;
            return failed;
        }
    };
    let frame = ServerFrame::Job(job_event(&app.config, &record)).to_json();
    let report = stream::iter(targets)
        .map(|id| {
            let frame = &frame;
            async move {
                let sent = tokio::time::timeout(PUSH_TIMEOUT, pusher.push(&id, frame)).await;
                let outcome = match sent {
                    Ok(Ok(Pushed::Delivered)) => PushReport {
                        delivered: 1,
                        ..PushReport::default()
                    },
                    Ok(Ok(Pushed::Gone)) => {
                        disconnect(app, &id).await;
                        PushReport {
                            gone: 1,
                            ..PushReport::default()
                        }
                    }
                    Ok(Err(error)) => {
                        log_push_error(&error, &id);
                        failed
                    }
                    Err(_) => {
                        tracing::warn!(%id, "a push had no answer within {PUSH_TIMEOUT:?}");
                        failed
                    }
                };
                outcome
            }
        })
        .buffer_unordered(FRAMES_IN_FLIGHT)
        .fold(
            PushReport::default(),
            |total, one| async move { total.add(one) },
        )
        .await;
    finish(app, &record).await;
    report
}

fn log_push_error(error: &PushError, id: &ConnectionId) {
    match error {
        PushError::Forbidden => {
            tracing::error!(%error, %id, "the Management API refused a push: check ManageConnections")
        }
        _ => tracing::warn!(%error, %id, "a push failed"),
    }
}

/// The job's subscribers and, for a key's job, its key's, each once.
async fn subscribers(app: &App, push: &DuePush) -> Result<Vec<ConnectionId>, StoreError> {
    let mut topics = vec![Topic::Job(push.job)];
    if push.client.scope() == LimitScope::Key {
        topics.push(Topic::Key(push.client.clone()));
    }
    let mut targets = Vec::new();
    for topic in &topics {
        targets.extend(app.connections.subscribers(topic, MAX_SUBSCRIBERS).await?);
    }
    targets.sort();
    targets.dedup();
    Ok(targets)
}

/// The push went out: a sandbox job's next step is queued, anything else's push removed
/// unless a later change queued it again.
async fn finish(app: &App, record: &JobRecord) {
    let done = match next_sandbox_step(record) {
        Some(at) => app.pushes.push_at(record.id, at).await,
        None => app.pushes.pushed(record.id, record.sequence).await,
    };
    if let Err(error) = done {
        // The lease runs out and the push goes out again: a duplicate the client drops.
        tracing::warn!(%error, job = %record.id, "marking a push done failed");
    }
}

#[cfg(test)]
mod tests;
