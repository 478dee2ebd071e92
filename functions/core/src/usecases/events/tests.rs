//! The live events' use case against the in-memory adapters: what a connection is answered,
//! what a push reaches, and what a slow or closed connection does to the others.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver as Receiver;

use super::*;
use crate::adapters::memory::LocalSockets;
use crate::adapters::memory::Memory;
use crate::domain::caller::Caller;
use crate::ports::jobs::{JobReport, Nonce, Transition};
use crate::support::config::Config;

fn app_with(vars: &[(&str, &str)]) -> (App, Memory) {
    let config = Config::from_lookup(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    });
    App::in_memory(config.expect("a test's config"))
}

fn app() -> (App, Memory) {
    app_with(&[])
}

/// A connection opened from its own address, and what is pushed to it.
async fn connected(app: &App, sockets: &LocalSockets, n: u8) -> (ConnectionId, Receiver<String>) {
    let id = ConnectionId::parse(&format!("conn-{n}")).unwrap();
    let caller = Caller::anonymous_at(&format!("198.51.{n}.7"));
    connect(app, &id, &caller).await.expect("connected");
    let frames = sockets.register(&id);
    (id, frames)
}

fn frames(received: &mut Receiver<String>) -> Vec<Value> {
    let mut frames = Vec::new();
    while let Ok(frame) = received.try_recv() {
        frames.push(serde_json::from_str(&frame).expect("a JSON frame"));
    }
    frames
}

fn subscribe(job: JobId) -> Vec<u8> {
    format!(r#"{{"action":"subscribe","job_id":"{job}"}}"#).into_bytes()
}

fn one_job(memory: &Memory, status: JobStatus) -> JobId {
    memory.database.occupy(status, 1);
    *memory.database.job_ids().last().expect("a job")
}

async fn move_job(app: &App, job: JobId, to: JobStatus, progress: f32) {
    let transition = Transition {
        to,
        progress: Some(progress),
        video_key: (to == JobStatus::Completed).then(|| "videos/x.mp4".to_owned()),
        thumb_key: None,
        error: None,
        error_code: None,
        deadline_in: None,
    };
    let nonce = Nonce {
        value: uuid::Uuid::new_v4().simple().to_string(),
        expires_at: Utc::now() + chrono::Duration::minutes(10),
    };
    let report = JobReport {
        id: job,
        transition: &transition,
        nonce: &nonce,
    };
    app.transitions.transition(&report).await.expect("moved");
}

#[tokio::test]
async fn a_job_subscription_answers_subscribed_then_the_jobs_state() {
    let (app, memory) = app();
    let job = one_job(&memory, JobStatus::Queued);
    let (id, mut received) = connected(&app, &memory.sockets, 1).await;
    receive(&app, &id, &subscribe(job)).await;
    let frames = frames(&mut received);
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0]["type"], "subscribed");
    assert_eq!(frames[0]["job_id"], job.to_string());
    assert_eq!(frames[1]["type"], "job");
    assert_eq!(frames[1]["status"], "queued");
    assert!(frames[1]["sequence"].is_i64(), "{frames:?}");
}

#[tokio::test]
async fn an_unknown_job_is_not_found_and_subscribes_nothing() {
    let (app, memory) = app();
    let (id, mut received) = connected(&app, &memory.sockets, 1).await;
    let job = JobId::new();
    receive(&app, &id, &subscribe(job)).await;
    let frames = frames(&mut received);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["type"], "error");
    assert_eq!(frames[0]["code"], "not_found");
    let followers = app.connections.subscribers(&Topic::Job(job), 10).await;
    assert_eq!(followers.unwrap(), vec![]);
}

#[tokio::test]
async fn a_bad_frame_is_answered_and_the_connection_still_serves() {
    let (app, memory) = app();
    let job = one_job(&memory, JobStatus::Queued);
    let (id, mut received) = connected(&app, &memory.sockets, 1).await;
    for (frame, code) in [
        (&b"{not json"[..], "invalid_message"),
        (br#"{"action":"dance","job_id":"x"}"#, "invalid_message"),
        (br#"{"action":"subscribe"}"#, "invalid_message"),
        (
            br#"{"action":"subscribe","key":"osr_live_nope"}"#,
            "invalid_api_key",
        ),
    ] {
        receive(&app, &id, frame).await;
        let answer = frames(&mut received);
        assert_eq!(answer.len(), 1, "{answer:?}");
        assert_eq!(answer[0]["code"], code, "{answer:?}");
    }
    receive(&app, &id, &subscribe(job)).await;
    assert_eq!(frames(&mut received)[0]["type"], "subscribed");
}

#[tokio::test]
async fn a_connection_holds_at_most_its_subscriptions() {
    let (app, memory) = app_with(&[("RATE_LIMIT_EVENTS_FRAMES", "1000/second")]);
    memory
        .database
        .occupy(JobStatus::Queued, MAX_SUBSCRIPTIONS + 1);
    let jobs = memory.database.job_ids();
    let (id, mut received) = connected(&app, &memory.sockets, 1).await;
    for job in &jobs[..MAX_SUBSCRIPTIONS] {
        receive(&app, &id, &subscribe(*job)).await;
    }
    assert!(frames(&mut received).iter().all(|f| f["type"] != "error"));
    receive(&app, &id, &subscribe(jobs[MAX_SUBSCRIPTIONS])).await;
    let answer = frames(&mut received);
    assert_eq!(answer[0]["code"], "too_many_subscriptions", "{answer:?}");
    // One given back makes room again.
    let first = jobs[0];
    let unsubscribe = format!(r#"{{"action":"unsubscribe","job_id":"{first}"}}"#);
    receive(&app, &id, unsubscribe.as_bytes()).await;
    assert_eq!(frames(&mut received)[0]["type"], "unsubscribed");
    receive(&app, &id, &subscribe(jobs[MAX_SUBSCRIPTIONS])).await;
    assert_eq!(frames(&mut received)[0]["type"], "subscribed");
}

#[tokio::test]
async fn frames_over_the_connections_rate_are_refused_unread() {
    let (app, memory) = app_with(&[("RATE_LIMIT_EVENTS_FRAMES", "2/minute")]);
    let job = one_job(&memory, JobStatus::Queued);
    let (id, mut received) = connected(&app, &memory.sockets, 1).await;
    for _ in 0..3 {
        receive(&app, &id, b"junk").await;
    }
    receive(&app, &id, &subscribe(job)).await;
    let codes: Vec<Value> = frames(&mut received)
        .iter()
        .map(|f| f["code"].clone())
        .collect();
    // Within one window: two read, the rest refused unread (the subscribe included).
    assert!(codes.len() >= 3, "{codes:?}");
    assert_eq!(
        &codes[..2],
        [Value::from("invalid_message"), "invalid_message".into()]
    );
    assert!(
        codes[2..].iter().all(|code| code == "rate_limited"),
        "{codes:?}"
    );
}

#[tokio::test]
async fn connects_over_the_addresss_limit_are_refused() {
    let (app, _memory) = app_with(&[("RATE_LIMIT_EVENTS_CONNECT", "2/minute")]);
    let caller = Caller::anonymous_at("198.51.100.7");
    for n in 0..2 {
        let id = ConnectionId::parse(&format!("c{n}")).unwrap();
        connect(&app, &id, &caller).await.expect("under the limit");
    }
    let id = ConnectionId::parse("c2").unwrap();
    let refused = connect(&app, &id, &caller).await;
    assert!(
        matches!(refused, Err(Rejection::RateLimited(..))),
        "{refused:?}"
    );
    // Another address is counted apart.
    connect(&app, &id, &Caller::anonymous_at("198.51.101.7"))
        .await
        .expect("another address");
}

#[tokio::test]
async fn a_watched_jobs_change_reaches_its_subscribers_and_no_one_else() {
    let (app, memory) = app();
    let watched = one_job(&memory, JobStatus::Queued);
    let other = one_job(&memory, JobStatus::Queued);
    let (a, mut to_a) = connected(&app, &memory.sockets, 1).await;
    let (b, mut to_b) = connected(&app, &memory.sockets, 2).await;
    receive(&app, &a, &subscribe(watched)).await;
    receive(&app, &b, &subscribe(other)).await;
    let before = frames(&mut to_a)[1]["sequence"].as_i64().unwrap();
    frames(&mut to_b);

    move_job(&app, watched, JobStatus::Rendering, 40.0).await;
    let report = sweep_pushes(&app).await.unwrap();
    assert_eq!((report.claimed, report.delivered), (1, 1), "{report:?}");
    let pushed = frames(&mut to_a);
    assert_eq!(pushed.len(), 1, "{pushed:?}");
    assert_eq!(pushed[0]["status"], "rendering");
    assert_eq!(pushed[0]["progress"], 40.0);
    assert!(pushed[0]["sequence"].as_i64().unwrap() > before);
    assert_eq!(frames(&mut to_b), Vec::<Value>::new());

    move_job(&app, watched, JobStatus::Completed, 100.0).await;
    sweep_pushes(&app).await.unwrap();
    let done = frames(&mut to_a);
    assert_eq!(done[0]["status"], "completed");
    assert_eq!(
        done[0]["links"]["video"],
        format!("/v1/jobs/{watched}/video")
    );
    // Nothing is left to push.
    assert_eq!(sweep_pushes(&app).await.unwrap().claimed, 0);
}

#[tokio::test]
async fn a_closed_connection_is_forgotten_when_a_push_finds_it_gone() {
    let (app, memory) = app();
    let job = one_job(&memory, JobStatus::Queued);
    let (a, _to_a) = connected(&app, &memory.sockets, 1).await;
    let (b, to_b) = connected(&app, &memory.sockets, 2).await;
    receive(&app, &a, &subscribe(job)).await;
    receive(&app, &b, &subscribe(job)).await;
    drop(to_b);
    memory.sockets.unregister(&b);

    move_job(&app, job, JobStatus::Rendering, 10.0).await;
    let report = sweep_pushes(&app).await.unwrap();
    assert_eq!((report.delivered, report.gone), (1, 1), "{report:?}");
    let left = app.connections.subscribers(&Topic::Job(job), 10).await;
    assert_eq!(left.unwrap(), vec![a]);
}

/// Never answers for one connection; passes the others on.
struct Stalled {
    sockets: Arc<LocalSockets>,
    stalled: ConnectionId,
}

#[async_trait]
impl Pusher for Stalled {
    async fn push(&self, id: &ConnectionId, frame: &str) -> Result<Pushed, PushError> {
        if *id == self.stalled {
            std::future::pending::<()>().await;
        }
        self.sockets.push(id, frame).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_never_answers_holds_back_no_other() {
    let (mut app, memory) = app();
    let job = one_job(&memory, JobStatus::Queued);
    let (a, _to_a) = connected(&app, &memory.sockets, 1).await;
    let (b, mut to_b) = connected(&app, &memory.sockets, 2).await;
    receive(&app, &a, &subscribe(job)).await;
    receive(&app, &b, &subscribe(job)).await;
    frames(&mut to_b);
    app.pusher = Some(Arc::new(Stalled {
        sockets: memory.sockets.clone(),
        stalled: a,
    }));

    move_job(&app, job, JobStatus::Rendering, 10.0).await;
    let report = sweep_pushes(&app).await.unwrap();
    assert_eq!((report.delivered, report.failed), (1, 1), "{report:?}");
    assert_eq!(frames(&mut to_b)[0]["status"], "rendering");
}
