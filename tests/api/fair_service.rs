//! Fair service over HTTP (DESIGN.md "Fair service"), on the dev server's simulated farm of
//! `RENDER_SLOTS` workers reporting through the signed webhook: the farm serves clients in
//! fair order of render time, its estimates come true, and a busy farm does not turn admission
//! into a race.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::Value;
use tokio_postgres::Row;

use crate::support::app::{accepted_job, TestApp};
use crate::support::replays::{played_frames, render_form, Play};

/// A valid replay of about `secs` of play that no other call returns (a trailer of its own).
fn replay_of(secs: usize) -> Vec<u8> {
    let mut replay = Play::new("fair player", played_frames(secs * 50, 20)).osr();
    replay.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    replay
}

fn form_of(secs: usize) -> reqwest::multipart::Form {
    render_form(replay_of(secs), "play.osr", &[])
}

/// Waits until every job of the database has ended (`limit` at most).
async fn until_all_ended(app: &TestApp, limit: Duration) {
    let give_up = Instant::now() + limit;
    let active = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'downloading', 'rendering')";
    while app.count(active).await > 0 {
        assert!(
            Instant::now() < give_up,
            "the farm did not finish within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A job's start: its id, status and when a worker first reported it.
struct JobStart {
    id: String,
    status: String,
    started_at: Option<DateTime<Utc>>,
}

impl JobStart {
    fn from_row(row: &Row) -> Self {
        JobStart {
            id: row.get("id"),
            status: row.get("status"),
            started_at: row.get("started_at"),
        }
    }
}

/// Each job's start, in the order the farm started them.
async fn starts(app: &TestApp) -> Vec<JobStart> {
    app.db
        .query(
            "SELECT id::text AS id, status::text AS status, started_at FROM jobs \
              ORDER BY started_at NULLS LAST, id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(JobStart::from_row)
        .collect()
}

/// When each job started, by id; every job must have.
async fn start_of(app: &TestApp) -> HashMap<String, DateTime<Utc>> {
    starts(app)
        .await
        .into_iter()
        .map(|start| (start.id, start.started_at.expect("a start")))
        .collect()
}

/// How many jobs started after `admitted_at` and before `job` did.
fn starts_between(
    start_of: &HashMap<String, DateTime<Utc>>,
    job: &str,
    admitted_at: DateTime<Utc>,
) -> usize {
    let own = start_of[job];
    start_of
        .values()
        .filter(|at| **at > admitted_at && **at < own)
        .count()
}

/// A bot key with 60 jobs queued, then six players submitting one job each: each player's
/// job starts within a few starts of its admission (not after 56–61 of the bot's, as in
/// arrival order), and every bot job still completes.
#[tokio::test]
async fn a_players_job_starts_within_a_few_starts_behind_a_bots_sixty_queued_jobs() {
    let app = TestApp::spawn(&[
        ("SIMULATE_WORKERS", "1"),
        ("RENDER_SLOTS", "2"),
        ("RELEASE_AHEAD", "0"),
        ("RENDER_OVERHEAD_SECS", "0"),
        // A 10 s replay renders in a quarter of a second.
        ("RENDER_SPEED", "40"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
    ])
    .await;
    let bot = app.create_key("1000/minute", 60).await;
    let mut bot_jobs = Vec::new();
    for _ in 0..60 {
        bot_jobs.push(
            app.submit_with("203.0.113.60", &bot.bearer, form_of(10))
                .await,
        );
    }
    let mut players = Vec::new();
    for n in 0..6 {
        let admitted_at = Utc::now();
        let response = app.render(&format!("198.51.{n}.7"), form_of(10)).await;
        let job = accepted_job(response).await;
        let told = app.job(&job).await;
        players.push((job, admitted_at, told["queue_position"].as_i64()));
    }
    until_all_ended(&app, Duration::from_secs(90)).await;
    for start in starts(&app).await {
        assert_eq!(start.status, "completed", "job {} completed", start.id);
    }
    let start_of = start_of(&app).await;
    for (job, admitted_at, position) in &players {
        let between = starts_between(&start_of, job, *admitted_at);
        assert!(
            between <= 7,
            "player job {job} started after {between} other starts since its admission \
             (six players arrived together)"
        );
        // Where it was told it stood: among the other players, not behind the bot's queue.
        let position = position.unwrap_or(0);
        assert!(
            position <= 8,
            "player job {job} was told queue_position {position}"
        );
    }
    assert_eq!(bot_jobs.len(), 60);
}

/// The estimates a client acts on come true: with the simulated farm, a queued job's
/// `estimated_start` is within ±50% of when it starts, and `GET /v1/status` says 0 when a slot
/// is free.
#[tokio::test]
async fn estimates_fall_within_half_of_what_happens() {
    let app = TestApp::spawn(&[
        ("SIMULATE_WORKERS", "1"),
        ("RENDER_SLOTS", "2"),
        ("RELEASE_AHEAD", "0"),
        ("RENDER_OVERHEAD_SECS", "0"),
        // A 20 s replay renders in one second, as the model assumes before it has measured.
        ("RENDER_SPEED", "20"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
    ])
    .await;
    let status: Value = app.get("/v1/status").await.json().await.unwrap();
    assert_eq!(status["estimated_start_secs"], 0, "an idle farm: {status}");
    assert_eq!(
        status["estimated_start"], status["as_of"],
        "an idle farm starts a job at once: {status}"
    );
    assert_eq!(status["slots_in_use"], 0, "{status}");
    let key = app.create_key("1000/minute", 60).await;
    let mut told = Vec::new();
    for _ in 0..12 {
        let job = app
            .submit_with("203.0.113.61", &key.bearer, form_of(20))
            .await;
        let read_at = Utc::now();
        let view = app.job(&job).await;
        let estimate = match view["estimated_start"].as_str() {
            Some(at) => DateTime::parse_from_rfc3339(at)
                .unwrap()
                .with_timezone(&Utc),
            None => read_at, // no longer queued: it started
        };
        told.push((job, read_at, estimate));
    }
    until_all_ended(&app, Duration::from_secs(60)).await;
    let start_of = start_of(&app).await;
    let secs = |d: chrono::Duration| d.num_milliseconds() as f64 / 1000.0;
    for (job, read_at, estimate) in &told {
        let expected = secs(*estimate - *read_at).max(0.0);
        let actual = secs(start_of[job] - *read_at).max(0.0);
        // Half a second of slack for a job due at once (polling, the reports' round trips).
        let allowed = (expected * 0.5).max(0.5);
        assert!(
            (actual - expected).abs() <= allowed,
            "job {job}: estimated to start in {expected:.2} s, started in {actual:.2} s"
        );
    }
}

/// A race for a busy farm: all the farm's slots busy (`MAX_RENDERING` at its default, above
/// the farm's room) and an attacker submitting at 10 requests a second with a key that admits
/// all of them. Keys and honest anonymous clients are admitted as with no attacker (202, never
/// 503 `render_capacity`), and they are served their fair share: each honest client's first
/// job starts within a few starts of its admission, not behind the attacker's queue.
#[tokio::test]
async fn a_busy_farm_is_no_race_keys_and_honest_clients_are_admitted_and_served() {
    let app = TestApp::spawn(&[
        ("SIMULATE_WORKERS", "1"),
        ("RENDER_SLOTS", "2"),
        ("RELEASE_AHEAD", "0"),
        ("RENDER_OVERHEAD_SECS", "0"),
        // A 30 s replay renders in a second.
        ("RENDER_SPEED", "30"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
    ])
    .await;
    let attacker = app.create_key("1000/minute", 100).await;
    // The attacker takes both slots first.
    for _ in 0..2 {
        app.submit_with("192.0.2.66", &attacker.bearer, form_of(30))
            .await;
    }
    let attack = {
        let (http, url) = (app.http.clone(), app.url("/v1/render"));
        let bearer = attacker.bearer.clone();
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            for _ in 0..40 {
                let response = http
                    .post(&url)
                    .header("CF-Connecting-IP", "192.0.2.66")
                    .header("Authorization", &bearer)
                    .multipart(form_of(30))
                    .send()
                    .await
                    .unwrap();
                statuses.push(response.status());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            statuses
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let key = app.create_key("100/minute", 3).await;
    let mut honest = Vec::new();
    for _ in 0..3 {
        let job = app
            .submit_with("203.0.113.62", &key.bearer, form_of(30))
            .await;
        honest.push((job, Utc::now()));
    }
    for n in 0..3 {
        let response = app
            .render(&format!("198.51.{}.9", 100 + n), form_of(30))
            .await;
        assert_eq!(
            response.status(),
            StatusCode::ACCEPTED,
            "an honest anonymous client is admitted while the farm is busy"
        );
        honest.push((accepted_job(response).await, Utc::now()));
    }
    let attacked = attack.await.unwrap();
    assert!(
        attacked
            .iter()
            .all(|status| *status == StatusCode::ACCEPTED),
        "nobody is refused for a busy farm: the attacker got {attacked:?}"
    );
    until_all_ended(&app, Duration::from_secs(120)).await;
    let start_of = start_of(&app).await;
    // Five clients wait for two slots: each honest client's first job starts within the starts
    // of the others' heads, not behind a backlog.
    for (job, admitted_at) in honest.iter().take(1).chain(honest.iter().skip(3)) {
        let between = starts_between(&start_of, job, *admitted_at);
        assert!(
            between <= 6,
            "honest job {job} started after {between} other starts since its admission"
        );
    }
}

/// Each render event carries its client as the SQS message group (a fair queue on AWS serves
/// one client's burst no sooner than another's): an anonymous client's network, or the key.
#[tokio::test]
async fn render_events_carry_their_client_as_the_message_group() {
    let app = TestApp::spawn(&[]).await;
    let anonymous = accepted_job(app.render("198.51.100.23", form_of(10)).await).await;
    let key = app.create_key("100/minute", 5).await;
    let keyed = app
        .submit_with("198.51.100.24", &key.bearer, form_of(10))
        .await;
    let url = app.queue_url().await;
    let mut groups = HashMap::new();
    let give_up = Instant::now() + Duration::from_secs(10);
    while groups.len() < 2 && Instant::now() < give_up {
        let received = app
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
            )
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for message in received.messages() {
            let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
            let group = message
                .attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                })
                .cloned();
            groups.insert(body["job_id"].as_str().unwrap().to_owned(), group);
        }
    }
    assert_eq!(
        groups.get(&anonymous).cloned().flatten().as_deref(),
        Some("198.51.100.0/24"),
        "{groups:?}"
    );
    assert_eq!(
        groups.get(&keyed).cloned().flatten(),
        Some(key.client()),
        "{groups:?}"
    );
}

/// After a rollback, the earlier release's code never calls release_jobs: its first admission
/// (admit_job without `render_cost`) hands every held job to the render queue, so no job this
/// release admitted waits forever.
#[tokio::test]
async fn an_earlier_releases_admission_releases_every_held_job() {
    let app = TestApp::spawn(&[("RENDER_SLOTS", "1"), ("RELEASE_AHEAD", "0")]).await;
    accepted_job(app.render("198.51.100.31", form_of(10)).await).await;
    let held = accepted_job(app.render("198.51.100.32", form_of(10)).await).await;
    let held_events = "SELECT count(*) FROM outbox_events WHERE available_at = 'infinity'";
    assert_eq!(
        app.count(held_events).await,
        1,
        "one slot: the second job is held"
    );
    // The earlier release's argument: the keys it knew, no render_cost or fair_weight.
    let old_release = serde_json::json!({
        "id": uuid::Uuid::new_v4(), "client_ip": "198.51.100.33", "client_lock": 33,
        "global_lock": 1, "skin": "Default", "config": {}, "replay_key": "replays/old.osr",
        "replay_sha256": "00".repeat(32), "max_queued": 100, "max_rendering": 20,
        "max_active_per_client": 2, "lock_timeout_ms": 1000, "event_payload": {},
        "event_lease_ms": 30000,
    });
    let verdict: String = app
        .scalar_with("SELECT verdict FROM admit_job($1)", &[&old_release])
        .await;
    assert_eq!(verdict, "admitted");
    assert_eq!(app.count(held_events).await, 0, "nothing is held any more");
    let released = app
        .count(&format!(
            "SELECT count(*) FROM jobs WHERE id = '{held}' AND released_at IS NOT NULL"
        ))
        .await;
    assert_eq!(released, 1, "the held job is released");
}
