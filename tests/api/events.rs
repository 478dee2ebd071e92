//! Live job events over a real WebSocket (docs/API.md "Live events"): the dev server serves
//! the same protocol as API Gateway's WebSocket API, through the same use case, with the
//! simulated farm walking jobs through their changes.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use osurender_core::domain::key::KeyKind;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{accepted_job, header, problem, wake_queue, TestApp};
use crate::support::replays::valid_form;

/// A farm that renders a replay in well under a second per step, woken as on AWS (a status
/// change wakes the dispatcher through the wake queue; no timer sweeps).
async fn farm(extra: &[(&str, &str)]) -> TestApp {
    let wakes = wake_queue().await;
    let mut vars = vec![
        ("SIMULATE_WORKERS", "1"),
        ("RENDER_SPEED", "40"),
        ("RENDER_OVERHEAD_SECS", "0"),
        ("RELEASE_AHEAD", "0"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
        ("CALLBACK_WAKE_QUEUE_URL", wakes.as_str()),
    ];
    vars.extend_from_slice(extra);
    TestApp::spawn(&vars).await
}

/// The `job` frames among `frames`.
fn jobs(frames: &[Value]) -> Vec<&Value> {
    frames.iter().filter(|f| f["type"] == "job").collect()
}

fn assert_in_order(frames: &[&Value]) {
    let sequences: Vec<i64> = frames
        .iter()
        .map(|f| f["sequence"].as_i64().unwrap())
        .collect();
    assert!(
        sequences.windows(2).all(|pair| pair[0] < pair[1]),
        "sequences grow: {sequences:?}"
    );
    // Progress is per state (0–100 within each): it never goes back within one.
    for pair in frames.windows(2) {
        if pair[0]["status"] == pair[1]["status"] {
            assert!(
                pair[0]["progress"].as_f64() <= pair[1]["progress"].as_f64(),
                "progress never goes back within a state: {} then {}",
                pair[0],
                pair[1]
            );
        }
    }
}

#[tokio::test]
async fn a_job_is_followed_from_subscribe_to_completed_and_a_reconnect_starts_from_its_state() {
    let app = farm(&[]).await;
    let response = app.render("198.51.100.20", valid_form()).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    let job = body["job_id"].as_str().unwrap().to_owned();
    // The 202 and every read name where to follow the job.
    assert_eq!(body["links"]["events"], app.events_url());
    assert_eq!(app.job(&job).await["links"]["events"], app.events_url());

    let mut socket = app.events("198.51.100.20").await;
    socket.subscribe_job(&job).await;
    let subscribed = socket.next().await;
    assert_eq!(subscribed, json!({ "type": "subscribed", "job_id": job }));
    let first = socket.next().await;
    assert_eq!(first["type"], "job", "the job's state comes first: {first}");
    assert_eq!(first["job_id"], job);

    let mut frames = vec![first];
    frames.extend(socket.until_status(&job, "completed").await);
    let changes = jobs(&frames);
    assert_in_order(&changes);
    let statuses: Vec<&str> = changes
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert!(
        statuses.contains(&"rendering"),
        "the render's progress is pushed: {statuses:?}"
    );
    let done = changes.last().unwrap();
    assert_eq!(done["progress"], 100.0);
    assert!(done["links"]["video"].as_str().is_some(), "{done}");
    assert!(done.get("error_code").is_none(), "{done}");
    assert!(
        done["replay"].is_object(),
        "the callback body's replay: {done}"
    );

    // After a reconnect, subscribing again gives the current state first, at the same sequence.
    drop(socket);
    let mut again = app.events("198.51.100.20").await;
    again.subscribe_job(&job).await;
    assert_eq!(again.next().await["type"], "subscribed");
    let state = again.next().await;
    assert_eq!(state["status"], "completed");
    assert_eq!(state["sequence"], done["sequence"]);
    assert!(again
        .next_within(Duration::from_millis(500))
        .await
        .is_none());
}

#[tokio::test]
async fn a_keys_subscription_follows_the_jobs_it_submits_after_subscribing() {
    let app = farm(&[("SIMULATE_WORKERS", "0")]).await;
    let key = app.create_key("60/minute", 5).await;
    let mut socket = app.events("198.51.100.21").await;
    socket.subscribe_key(&key.bearer).await;
    let subscribed = socket.next().await;
    assert_eq!(subscribed["type"], "subscribed");
    assert_eq!(subscribed["key_id"], key.id.to_string());
    assert!(
        !subscribed.to_string().contains("osr_live_"),
        "the key itself is never sent back: {subscribed}"
    );
    // No job yet: nothing else comes.
    assert!(socket
        .next_within(Duration::from_millis(500))
        .await
        .is_none());

    let one = app
        .submit_with("198.51.100.21", &key.bearer, valid_form())
        .await;
    let two = app
        .submit_with("198.51.100.21", &key.bearer, valid_form())
        .await;
    let mut seen = Vec::new();
    while !(seen.contains(&one) && seen.contains(&two)) {
        let frame = socket.next().await;
        assert_eq!(frame["type"], "job", "{frame}");
        assert_eq!(frame["status"], "queued", "{frame}");
        seen.push(frame["job_id"].as_str().unwrap().to_owned());
    }
    // A worker's report on one of them is pushed too.
    app.report_ok(&one, json!({ "status": "downloading", "progress": 5 }))
        .await;
    let frames = socket.until_status(&one, "downloading").await;
    assert!(frames
        .iter()
        .all(|f| f["job_id"] == one || f["job_id"] == two));

    // Unsubscribed, the key's later jobs are no longer pushed.
    socket
        .send(json!({ "action": "unsubscribe", "key": key.bearer.trim_start_matches("Bearer ") }))
        .await;
    let unsubscribed = socket.next().await;
    assert_eq!(unsubscribed["type"], "unsubscribed", "{unsubscribed}");
    app.submit_with("198.51.100.21", &key.bearer, valid_form())
        .await;
    assert!(socket.next_within(Duration::from_secs(2)).await.is_none());
}

#[tokio::test]
async fn one_keys_subscription_never_shows_another_keys_jobs() {
    let app = farm(&[("SIMULATE_WORKERS", "0")]).await;
    let alice = app.create_key("60/minute", 5).await;
    let bob = app.create_key("60/minute", 5).await;
    let mut alices = app.events("198.51.100.22").await;
    alices.subscribe_key(&alice.bearer).await;
    assert_eq!(alices.next().await["type"], "subscribed");
    let mut bobs = app.events("198.51.100.23").await;
    bobs.subscribe_key(&bob.bearer).await;
    assert_eq!(bobs.next().await["type"], "subscribed");

    let bobs_job = app
        .submit_with("198.51.100.23", &bob.bearer, valid_form())
        .await;
    let anonymous = app.submit("198.51.100.22").await;
    let alices_job = app
        .submit_with("198.51.100.22", &alice.bearer, valid_form())
        .await;
    // Alice's connection sees her job and nothing before it: not Bob's, not the anonymous one
    // from her own address.
    let frame = alices.next().await;
    assert_eq!(frame["job_id"], alices_job, "{frame}");
    let frame = bobs.next().await;
    assert_eq!(frame["job_id"], bobs_job, "{frame}");
    for socket in [&mut alices, &mut bobs] {
        while let Some(frame) = socket.next_within(Duration::from_secs(1)).await {
            assert_ne!(frame["job_id"], anonymous, "{frame}");
        }
    }
    // Subscribing to Bob's key needs Bob's key: a wrong one is refused.
    let forged = format!("{}x", alice.bearer.trim_start_matches("Bearer "));
    alices
        .send(json!({ "action": "subscribe", "key": forged }))
        .await;
    assert_eq!(alices.error_code().await, "invalid_api_key");
}

#[tokio::test]
async fn bad_frames_get_error_frames_and_the_connection_stays_open() {
    let app = farm(&[
        ("SIMULATE_WORKERS", "0"),
        ("RATE_LIMIT_EVENTS_FRAMES", "1000/second"),
        ("RATE_LIMIT_RENDER", "1000/minute"),
        ("MAX_ACTIVE_JOBS_PER_IP", "1000"),
        ("MAX_QUEUED", "1000"),
    ])
    .await;
    let mut socket = app.events("198.51.100.24").await;
    for bad in [
        "not json",
        r#"{"action":"dance"}"#,
        r#"{"action":"subscribe"}"#,
        r#"{"action":"subscribe","job_id":"not-a-uuid"}"#,
        r#"["subscribe"]"#,
    ] {
        socket.send_text(bad).await;
        assert_eq!(socket.error_code().await, "invalid_message", "{bad}");
    }
    // A page's keep-alive.
    socket.send(json!({ "action": "ping" })).await;
    assert_eq!(socket.next().await, json!({ "type": "pong" }));
    let oversized = json!({ "action": "subscribe", "job_id": "x".repeat(5000) });
    socket.send(oversized).await;
    assert_eq!(socket.error_code().await, "invalid_message");
    socket
        .subscribe_job("00000000-0000-4000-8000-000000000000")
        .await;
    assert_eq!(socket.error_code().await, "not_found");
    socket.subscribe_key("osr_live_nonsense").await;
    assert_eq!(socket.error_code().await, "invalid_api_key");
    let unknown = format!("osr_live_{}", "A".repeat(43));
    socket.subscribe_key(&unknown).await;
    assert_eq!(socket.error_code().await, "invalid_api_key");

    // The connection is still open and still answers: 100 subscriptions, then a refusal.
    let mut jobs = Vec::new();
    for n in 0..101 {
        jobs.push(app.submit(&format!("198.51.101.{n}")).await);
    }
    for job in &jobs[..100] {
        socket.follow_job(job).await;
    }
    socket.subscribe_job(&jobs[100]).await;
    assert_eq!(socket.error_code().await, "too_many_subscriptions");
    // One already held is no new one.
    socket.follow_job(&jobs[0]).await;
}

#[tokio::test]
async fn frames_over_the_connections_rate_are_refused_with_an_error_frame() {
    let app = farm(&[
        ("SIMULATE_WORKERS", "0"),
        ("RATE_LIMIT_EVENTS_FRAMES", "3/minute"),
    ])
    .await;
    let mut socket = app.events("198.51.100.25").await;
    let job = app.submit("198.51.100.25").await;
    for _ in 0..3 {
        socket.follow_job(&job).await;
    }
    socket.subscribe_job(&job).await;
    assert_eq!(socket.error_code().await, "rate_limited");
    // Another connection has its own window.
    let mut other = app.events("198.51.100.25").await;
    other.follow_job(&job).await;
}

#[tokio::test]
async fn connections_over_the_limits_are_refused_with_429() {
    let app = farm(&[
        ("SIMULATE_WORKERS", "0"),
        ("RATE_LIMIT_EVENTS_CONNECT", "2/minute"),
        ("RATE_LIMIT_EVENTS_CONNECT_NETWORK", "3/minute"),
    ])
    .await;
    let _one = app.events("198.51.100.26").await;
    let _two = app.events("198.51.100.26").await;
    assert_eq!(
        app.try_events("198.51.100.26").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    // The refusal is the API's: problem+json with Retry-After.
    let refused = app
        .http
        .get(app.url("/v1/events"))
        .header("CF-Connecting-IP", "198.51.100.26")
        .header("Connection", "Upgrade")
        .header("Upgrade", "websocket")
        .header("Sec-WebSocket-Version", "13")
        .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert!(header(&refused, "retry-after").is_some_and(|secs| secs > 0));
    problem(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Another address of the network has its own window, until the network's is spent.
    let _three = app.events("198.51.100.27").await;
    assert_eq!(
        app.try_events("198.51.100.28").await.err(),
        Some(StatusCode::TOO_MANY_REQUESTS)
    );
    // A plain GET is told what the route is, as a problem.
    let plain = app.get("/v1/events").await;
    problem(plain, StatusCode::BAD_REQUEST, "invalid_body").await;
}

#[tokio::test]
async fn a_completion_is_pushed_within_a_second_of_the_database_having_it() {
    let app = farm(&[]).await;
    let job = accepted_job(app.render("198.51.100.29", valid_form()).await).await;
    let mut socket = app.events("198.51.100.29").await;
    socket.subscribe_job(&job).await;
    let frames = socket.until_status(&job, "completed").await;
    let arrived: DateTime<Utc> = Utc::now();
    assert!(!jobs(&frames).is_empty());
    let stored: DateTime<Utc> = app
        .scalar_with(
            "SELECT updated_at FROM jobs WHERE id = $1::text::uuid AND status = 'completed'",
            &[&job],
        )
        .await;
    let after = arrived - stored;
    assert!(
        after <= chrono::Duration::seconds(1),
        "completed in the database at {stored}, pushed at {arrived} ({after})"
    );
}

#[tokio::test]
async fn a_sandbox_keys_jobs_stream_their_simulated_progression() {
    let app = farm(&[("SIMULATE_WORKERS", "0")]).await;
    let key = app.create_key_of(KeyKind::Sandbox, "60/minute", 2).await;
    let job = app
        .submit_with("198.51.100.30", &key.bearer, valid_form())
        .await;
    let mut socket = app.events("198.51.100.30").await;
    socket.subscribe_key(&key.bearer).await;
    assert_eq!(socket.next().await["type"], "subscribed");
    let started = Instant::now();
    let frames = socket.until_status(&job, "completed").await;
    let changes = jobs(&frames);
    assert_in_order(&changes);
    let statuses: Vec<&str> = changes
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert!(statuses.contains(&"rendering"), "{statuses:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a sandbox job completes in about 10 s"
    );
}
