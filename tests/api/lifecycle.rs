//! The job lifecycle: signed worker reports, status reads, the outbox's delivery to the render
//! queue, the janitor, and `/health`.

use std::time::Duration;

use futures_util::future::join_all;
use osurender_core::usecases::lifecycle::sign;
use osurender_core::{usecases::janitor, usecases::outbox};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{header, problem, TestApp, WEBHOOK_SECRET};
use crate::support::jobs::{fresh_nonce, item_ids, now, signed_body, READER};
use crate::support::keys::TestKey;
use crate::support::queue::{counts, exactly_once};
use crate::support::replays::valid_form;

const ROOMY: (&str, &str) = ("RATE_LIMIT_RENDER", "1000/hour");

impl TestApp {
    async fn queue_positions(&self, jobs: &[String]) -> Vec<Option<i64>> {
        let mut positions = Vec::new();
        for job in jobs {
            positions.push(self.job(job).await["queue_position"].as_i64());
        }
        positions
    }

    /// The whole row, to show a refused report changed nothing.
    async fn row(&self, job_id: &str) -> String {
        self.scalar_with(
            "SELECT row_to_json(j)::text FROM jobs j WHERE id = $1::text::uuid",
            &[&job_id],
        )
        .await
    }

    async fn status_of(&self, job_id: &str) -> String {
        self.scalar_with(
            "SELECT status::text FROM jobs WHERE id = $1::text::uuid",
            &[&job_id],
        )
        .await
    }

    /// Whether `condition` holds of the job's row.
    async fn job_where(&self, job_id: &str, condition: &str) -> bool {
        self.scalar_with(
            &format!("SELECT {condition} FROM jobs WHERE id = $1::text::uuid"),
            &[&job_id],
        )
        .await
    }
}

#[tokio::test]
async fn a_job_walks_to_completed_and_frees_its_clients_slot() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "2"), ROOMY]).await;
    let ip = "203.0.113.110";
    let first = app.submit(ip).await;
    app.submit(ip).await;
    let full = app.render(ip, valid_form()).await;
    problem(full, StatusCode::TOO_MANY_REQUESTS, "too_many_active_jobs").await;

    let job = app.job(&first).await;
    assert_eq!(job["status"], "queued");
    assert_eq!(job["queue_position"], 1);
    assert_eq!(job["artifacts"], Value::Null);

    let steps = [
        (
            json!({ "status": "downloading", "progress": 0 }),
            "downloading",
            0.0,
        ),
        (
            json!({ "status": "downloading", "progress": 80 }),
            "downloading",
            80.0,
        ),
        // A new state without a progress starts at 0; the same state keeps its progress.
        (json!({ "status": "rendering" }), "rendering", 0.0),
        (
            json!({ "status": "rendering", "progress": 65.5 }),
            "rendering",
            65.5,
        ),
        (json!({ "status": "rendering" }), "rendering", 65.5),
    ];
    for (report, status, progress) in steps {
        let response = app.report(&first, report).await;
        assert_eq!(response.status(), StatusCode::OK);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["status"], status);
        let job = app.job(&first).await;
        assert_eq!(job["status"], status);
        assert_eq!(job["progress"], progress);
        assert_eq!(job["queue_position"], Value::Null);
    }
    assert!(
        app.job_where(&first, "deadline_at > now()").await,
        "an in-flight job has a deadline for the janitor"
    );

    let video_key = app.put_rendered_video(&first).await;
    app.report_ok(
        &first,
        json!({ "status": "completed", "video_key": video_key, "thumb_key": "renders/t.jpg", "job_id": first }),
    )
    .await;
    let done = app.job(&first).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["progress"], 100.0);
    assert_eq!(done["error"], Value::Null);
    let video_url = done["artifacts"]["video_url"].as_str().unwrap();
    assert!(video_url.contains("X-Amz-Signature"), "{video_url}");
    assert!(done["artifacts"]["thumbnail_url"].as_str().is_some());
    assert_eq!(
        done["artifacts"]["thumb_url"], done["artifacts"]["thumbnail_url"],
        "the old name, one release"
    );
    assert!(done["artifacts"]["expires_at"].as_str().is_some());
    let video = reqwest::get(video_url).await.unwrap();
    assert_eq!(video.status(), StatusCode::OK);
    assert_eq!(&video.bytes().await.unwrap()[..], b"rendered video");
    assert!(app.job_where(&first, "deadline_at IS NULL").await);

    app.submit(ip).await;
}

/// A server, and a job of it a worker reports downloading; its row as that left it.
async fn a_downloading_job() -> (TestApp, String, String) {
    let app = TestApp::spawn(&[ROOMY]).await;
    let job = app.submit("203.0.113.120").await;
    app.report_ok(&job, json!({ "status": "downloading", "progress": 5 }))
        .await;
    let before = app.row(&job).await;
    (app, job, before)
}

/// Another secret, no signature, a signature of another body, not hex.
#[tokio::test]
async fn a_report_with_a_forged_signature_is_refused_and_changes_nothing() {
    let (app, job, before) = a_downloading_job().await;
    let body = signed_body(&job, json!({ "status": "rendering", "progress": 50 }));
    let forged = sign(b"not-the-webhook-secret-at-all", body.as_bytes());
    let other = sign(WEBHOOK_SECRET.as_bytes(), b"{}");
    for signature in [
        Some(forged.as_str()),
        None,
        Some(other.as_str()),
        Some("zz"),
    ] {
        let response = app.post_webhook(&job, &body, signature).await;
        assert!(response.headers().contains_key("www-authenticate"));
        problem(response, StatusCode::UNAUTHORIZED, "invalid_signature").await;
    }
    assert_eq!(
        app.row(&job).await,
        before,
        "no refused report changed the job"
    );
}

#[tokio::test]
async fn a_report_stamped_more_than_five_minutes_off_is_refused_and_changes_nothing() {
    let (app, job, before) = a_downloading_job().await;
    for skew in [-400i64, 400] {
        let mut fields = json!({ "status": "rendering", "nonce": fresh_nonce(), "job_id": job });
        fields["timestamp"] = json!(now() as i64 + skew);
        let body = fields.to_string();
        let signature = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
        let response = app.post_webhook(&job, &body, Some(&signature)).await;
        problem(response, StatusCode::UNAUTHORIZED, "stale_timestamp").await;
    }
    assert_eq!(
        app.row(&job).await,
        before,
        "no refused report changed the job"
    );
}

/// Downloading cannot complete without rendering; nothing makes a job queued.
#[tokio::test]
async fn an_illegal_transition_is_refused_and_changes_nothing() {
    let (app, job, before) = a_downloading_job().await;
    for fields in [
        json!({ "status": "completed", "video_key": "v.mp4" }),
        json!({ "status": "queued" }),
        json!({ "status": "expired" }),
    ] {
        let response = app.report(&job, fields).await;
        problem(response, StatusCode::CONFLICT, "illegal_transition").await;
    }
    assert_eq!(
        app.row(&job).await,
        before,
        "no refused report changed the job"
    );
}

/// Not JSON, a bad field, too large.
#[tokio::test]
async fn a_malformed_report_is_refused_and_changes_nothing() {
    let (app, job, before) = a_downloading_job().await;
    let not_json = "{\"status\":";
    let signature = sign(WEBHOOK_SECRET.as_bytes(), not_json.as_bytes());
    let response = app.post_webhook(&job, not_json, Some(&signature)).await;
    problem(response, StatusCode::BAD_REQUEST, "invalid_body").await;
    for fields in [
        json!({ "status": "rendering", "progress": 150 }),
        json!({ "status": "rendering", "job_id": "not-a-uuid" }),
        json!({ "status": "rendering", "nonce": "tiny" }),
        json!({ "status": "paused" }),
    ] {
        let response = app.report(&job, fields).await;
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }
    let huge = signed_body(
        &job,
        json!({ "status": "failed", "error": "x".repeat(20_000) }),
    );
    let signature = sign(WEBHOOK_SECRET.as_bytes(), huge.as_bytes());
    let response = app.post_webhook(&job, &huge, Some(&signature)).await;
    problem(response, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large").await;
    assert_eq!(
        app.row(&job).await,
        before,
        "no refused report changed the job"
    );
}

/// The same signed report twice, or its nonce with another body, or sent to another job.
#[tokio::test]
async fn a_replayed_report_is_refused_and_changes_neither_job() {
    let (app, job, _) = a_downloading_job().await;
    let nonce = fresh_nonce();
    let body = signed_body(
        &job,
        json!({ "status": "rendering", "progress": 20, "nonce": nonce }),
    );
    let signature = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
    let first = app.post_webhook(&job, &body, Some(&signature)).await;
    assert_eq!(first.status(), StatusCode::OK);
    let after_first = app.row(&job).await;
    let again = app.post_webhook(&job, &body, Some(&signature)).await;
    problem(again, StatusCode::UNAUTHORIZED, "nonce_reused").await;
    let response = app
        .report(
            &job,
            json!({ "status": "rendering", "progress": 90, "nonce": nonce }),
        )
        .await;
    problem(response, StatusCode::UNAUTHORIZED, "nonce_reused").await;
    let other_job = app.submit("203.0.113.121").await;
    let other_before = app.row(&other_job).await;
    let redirected = app.post_webhook(&other_job, &body, Some(&signature)).await;
    problem(redirected, StatusCode::FORBIDDEN, "wrong_job").await;
    assert_eq!(app.row(&job).await, after_first);
    assert_eq!(app.row(&other_job).await, other_before);
}

#[tokio::test]
async fn a_report_on_a_malformed_or_unknown_job_id_is_refused() {
    let app = TestApp::spawn(&[ROOMY]).await;
    let response = app
        .report("not-a-uuid", json!({ "status": "rendering" }))
        .await;
    problem(response, StatusCode::BAD_REQUEST, "invalid_job_id").await;
    let unknown = uuid::Uuid::new_v4().to_string();
    let response = app.report(&unknown, json!({ "status": "rendering" })).await;
    problem(response, StatusCode::NOT_FOUND, "not_found").await;
}

#[tokio::test]
async fn a_failed_job_says_why_and_refuses_every_later_report() {
    let (app, job, _) = a_downloading_job().await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 20 }))
        .await;
    app.report_ok(&job, json!({ "status": "failed", "error": "GPU on fire" }))
        .await;
    let failed = app.job(&job).await;
    assert_eq!(failed["error"], "GPU on fire");
    let ended = app.row(&job).await;
    for fields in [
        json!({ "status": "rendering" }),
        json!({ "status": "failed" }),
        json!({ "status": "completed", "video_key": "v.mp4" }),
    ] {
        let response = app.report(&job, fields).await;
        problem(response, StatusCode::CONFLICT, "illegal_transition").await;
    }
    assert_eq!(app.row(&job).await, ended);
}

/// The signed body names its job: without `job_id` a report is malformed (400); a genuine
/// report captured on its way to one job and replayed to another is refused (403) before its
/// nonce is spent, so neither job moves and it still applies to its own job afterwards.
#[tokio::test]
async fn a_report_applies_only_to_the_job_it_names() {
    let app = TestApp::spawn(&[ROOMY]).await;
    let target = app.submit("203.0.113.130").await;
    let victim = app.submit("203.0.113.131").await;
    let (target_before, victim_before) = (app.row(&target).await, app.row(&victim).await);

    // Left out, or null.
    let unnamed = signed_body(&target, json!({ "status": "downloading", "job_id": null }));
    let mut null_job: Value = serde_json::from_str(&unnamed).unwrap();
    null_job["job_id"] = Value::Null;
    for body in [unnamed, null_job.to_string()] {
        let signature = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
        let response = app.post_webhook(&target, &body, Some(&signature)).await;
        problem(response, StatusCode::BAD_REQUEST, "invalid_body").await;
    }

    let captured = signed_body(&target, json!({ "status": "downloading", "progress": 7 }));
    let signature = sign(WEBHOOK_SECRET.as_bytes(), captured.as_bytes());
    for _ in 0..3 {
        let replayed = app.post_webhook(&victim, &captured, Some(&signature)).await;
        problem(replayed, StatusCode::FORBIDDEN, "wrong_job").await;
    }
    // Named in any spelling of its UUID, another job is still another job.
    let upper = signed_body(
        &target,
        json!({ "status": "downloading", "job_id": victim.to_uppercase() }),
    );
    let response = app
        .post_webhook(
            &target,
            &upper,
            Some(&sign(WEBHOOK_SECRET.as_bytes(), upper.as_bytes())),
        )
        .await;
    problem(response, StatusCode::FORBIDDEN, "wrong_job").await;
    assert_eq!(app.row(&victim).await, victim_before);
    assert_eq!(app.row(&target).await, target_before);

    let delivered = app.post_webhook(&target, &captured, Some(&signature)).await;
    assert_eq!(delivered.status(), StatusCode::OK);
    assert_eq!(app.status_of(&target).await, "downloading");
    assert_eq!(app.row(&victim).await, victim_before);
}

#[tokio::test]
async fn one_report_delivered_ten_times_at_once_applies_once() {
    let (app, job) = a_rendering_job().await;
    // One applies, the rest are replays.
    let body = signed_body(&job, json!({ "status": "rendering", "progress": 50 }));
    let signature = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
    let statuses: Vec<StatusCode> = join_all((0..10).map(|_| async {
        app.post_webhook(&job, &body, Some(&signature))
            .await
            .status()
    }))
    .await;
    let applied = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let replayed = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!((applied, replayed), (1, 9));
}

/// A server, and a job of it a worker reports rendering.
async fn a_rendering_job() -> (TestApp, String) {
    let app = TestApp::spawn(&[ROOMY]).await;
    let job = app.submit("203.0.113.125").await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 1 }))
        .await;
    (app, job)
}

#[tokio::test]
async fn ten_workers_completing_a_job_at_once_are_one_winner_and_nine_conflicts() {
    let (app, job) = a_rendering_job().await;
    let statuses: Vec<StatusCode> = join_all((0..10).map(|i| {
        let fields = json!({ "status": "completed", "video_key": format!("v{i}.mp4") });
        let app = &app;
        let job = &job;
        async move { app.report(job, fields).await.status() }
    }))
    .await;
    let won = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let conflicts = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((won, conflicts), (1, 9));
    assert_eq!(app.status_of(&job).await, "completed");
}

#[tokio::test]
async fn queue_positions_count_queued_jobs_oldest_first() {
    let app = TestApp::spawn(&[ROOMY]).await;
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(app.submit(&format!("192.0.2.{}", 10 + i)).await);
    }
    assert_eq!(
        app.queue_positions(&jobs).await,
        [Some(1), Some(2), Some(3), Some(4)]
    );
    app.report_ok(&jobs[1], json!({ "status": "downloading" }))
        .await;
    assert_eq!(
        app.queue_positions(&jobs).await,
        [Some(1), None, Some(2), Some(3)]
    );
    app.report_ok(&jobs[0], json!({ "status": "failed" })).await;
    assert_eq!(
        app.queue_positions(&jobs).await,
        [None, None, Some(1), Some(2)]
    );
    let later = app.submit("192.0.2.20").await;
    assert_eq!(app.job(&later).await["queue_position"], 3);
}

#[tokio::test]
async fn the_janitor_frees_capacity_held_by_a_stalled_job() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "1"), ROOMY]).await;
    let ip = "203.0.113.130";
    let job = app.submit(ip).await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 30 }))
        .await;
    let core = app.instance().await;
    assert_eq!(
        janitor::run(&core).await.unwrap().timed_out,
        0,
        "not stalled yet"
    );
    problem(
        app.render(ip, valid_form()).await,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_jobs",
    )
    .await;

    // The stall timeout runs out: the job's deadline (set by its last report) is now past.
    app.db
        .execute(
            "UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1::text::uuid",
            &[&job],
        )
        .await
        .unwrap();
    let report = janitor::run(&core).await.unwrap();
    assert_eq!(report.timed_out, 1);
    let failed = app.job(&job).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"], "timed out");
    assert_eq!(
        janitor::run(&core).await.unwrap().timed_out,
        0,
        "idempotent"
    );

    // The late worker's report is refused; the client can submit again.
    let late = app
        .report(&job, json!({ "status": "completed", "video_key": "v.mp4" }))
        .await;
    problem(late, StatusCode::CONFLICT, "illegal_transition").await;
    app.submit(ip).await;
}

#[tokio::test]
async fn the_janitor_expires_jobs_queued_too_long_and_prunes_nonces() {
    let app = TestApp::spawn(&[("QUEUED_TTL", "1h"), ROOMY]).await;
    let old = app.submit("203.0.113.140").await;
    let young = app.submit("203.0.113.141").await;
    app.db
        .execute(
            "UPDATE jobs SET created_at = now() - interval '2 hours' WHERE id = $1::text::uuid",
            &[&old],
        )
        .await
        .unwrap();
    app.db
        .batch_execute(
            "INSERT INTO webhook_nonces VALUES ('old-nonce-1', now() - interval '1 minute'),
                                               ('live-nonce-1', now() + interval '1 minute')",
        )
        .await
        .unwrap();

    let report = janitor::run(&app.instance().await).await.unwrap();
    assert_eq!((report.expired, report.nonces_pruned), (1, 1));
    assert_eq!(app.status_of(&old).await, "expired");
    let expired = app.job(&old).await;
    assert_eq!(
        (&expired["error_code"], &expired["retryable"]),
        (&json!("queue_expired"), &json!(true)),
        "an expired job says why, as a failed one does: {expired}"
    );
    assert_eq!(app.status_of(&young).await, "queued");
    assert_eq!(app.job(&young).await["queue_position"], 1);
    assert_eq!(
        app.count("SELECT count(*) FROM webhook_nonces").await,
        1,
        "live nonces are kept"
    );
    let late = app.report(&old, json!({ "status": "downloading" })).await;
    problem(late, StatusCode::CONFLICT, "illegal_transition").await;
}

#[tokio::test]
async fn two_janitors_at_once_end_each_job_once() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "20"), ROOMY]).await;
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let job = app.submit("203.0.113.150").await;
        app.report_ok(&job, json!({ "status": "downloading" }))
            .await;
        stalled.push(job);
    }
    let mut queued = Vec::new();
    for _ in 0..5 {
        queued.push(app.submit("203.0.113.150").await);
    }
    app.db
        .batch_execute(
            "UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE status = 'downloading';
             UPDATE jobs SET created_at = now() - interval '7 hours' WHERE status = 'queued';",
        )
        .await
        .unwrap();

    let (a, b) = (app.instance().await, app.instance().await);
    let (first, second) = tokio::join!(janitor::run(&a), janitor::run(&b));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.timed_out + second.timed_out, 6);
    assert_eq!(first.expired + second.expired, 5);
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE status = 'failed' AND error = 'timed out'")
            .await,
        6
    );
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE status = 'expired'")
            .await,
        5
    );
    assert_eq!(janitor::run(&a).await.unwrap(), Default::default());
}

#[tokio::test]
async fn events_are_published_once_by_the_fast_path() {
    let app = TestApp::spawn(&[ROOMY]).await;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(app.submit(&format!("192.0.2.{}", 30 + i)).await);
    }
    assert_eq!(
        app.count(
            "SELECT count(*) FROM outbox_events WHERE status = 'dispatched' AND attempts = 1"
        )
        .await,
        3
    );
    let sweep = outbox::sweep(&app.instance().await).await.unwrap();
    assert_eq!(sweep.claimed, 0, "nothing left for the sweep");

    let delivered = app.drain_queue().await;
    assert_eq!(counts(&delivered), exactly_once(&app.event_ids().await));
    let mut delivered_jobs: Vec<String> = delivered
        .iter()
        .map(|m| m.body["payload"]["job_id"].as_str().unwrap().to_owned())
        .collect();
    delivered_jobs.sort();
    jobs.sort();
    assert_eq!(delivered_jobs, jobs);
    for message in &delivered {
        assert_eq!(message.body["job_id"], message.body["payload"]["job_id"]);
        let job_id = message.body["job_id"].as_str().unwrap();
        assert_eq!(
            message.body["payload"]["replay_key"],
            format!("replays/{job_id}.osr")
        );
        assert_eq!(message.body["payload"]["skin"], "Default");
    }
}

#[tokio::test]
async fn an_event_whose_fast_path_failed_is_delivered_by_the_sweep() {
    let app = TestApp::spawn(&[ROOMY]).await;
    app.delete_queue().await;
    for i in 0..3 {
        app.submit(&format!("192.0.2.{}", 40 + i)).await;
    }
    assert_eq!(
        app.count("SELECT count(*) FROM outbox_events WHERE status = 'pending'")
            .await,
        3
    );
    let core = app.instance().await;
    let early = outbox::sweep(&core).await.unwrap();
    assert_eq!(
        early.claimed, 0,
        "the fast path's lease still holds the events"
    );

    app.create_queue().await;
    app.age_outbox().await;
    let sweep = outbox::sweep(&core).await.unwrap();
    assert_eq!((sweep.claimed, sweep.dispatched), (3, 3));
    assert_eq!(
        app.count(
            "SELECT count(*) FROM outbox_events WHERE status = 'dispatched' AND attempts = 2"
        )
        .await,
        3
    );
    app.age_outbox().await;
    assert_eq!(outbox::sweep(&core).await.unwrap().claimed, 0);

    let delivered = app.drain_queue().await;
    assert_eq!(counts(&delivered), exactly_once(&app.event_ids().await));
}

/// An outbox event as a failed publish leaves it.
struct OutboxEvent {
    status: String,
    attempts: i32,
    has_error: bool,
    /// Due again 5 to 10 s from now.
    in_second_backoff: bool,
}

impl OutboxEvent {
    fn from_row(row: &tokio_postgres::Row) -> Self {
        OutboxEvent {
            status: row.get("status"),
            attempts: row.get("attempts"),
            has_error: row.get("has_error"),
            in_second_backoff: row.get("in_second_backoff"),
        }
    }
}

#[tokio::test]
async fn failed_publishes_back_off_and_give_up_after_the_last_attempt() {
    let app = TestApp::spawn(&[("OUTBOX_MAX_ATTEMPTS", "3"), ROOMY]).await;
    app.delete_queue().await;
    app.submit("192.0.2.50").await;
    let core = app.instance().await;

    app.age_outbox().await;
    let sweep = outbox::sweep(&core).await.unwrap();
    assert_eq!((sweep.claimed, sweep.retried, sweep.failed), (1, 1, 0));
    let event = app
        .db
        .query_one(
            "SELECT status, attempts, last_error IS NOT NULL AS has_error,
                    available_at BETWEEN now() + interval '5 seconds'
                                     AND now() + interval '10 seconds' AS in_second_backoff
               FROM outbox_events",
            &[],
        )
        .await
        .unwrap();
    let event = OutboxEvent::from_row(&event);
    assert_eq!(event.status, "pending");
    assert_eq!(event.attempts, 2);
    assert!(event.has_error, "the error is recorded");
    assert!(
        event.in_second_backoff,
        "the second failure waits backoff(2) = 10 s"
    );
    assert_eq!(
        outbox::sweep(&core).await.unwrap().claimed,
        0,
        "backing off"
    );

    app.age_outbox().await;
    let sweep = outbox::sweep(&core).await.unwrap();
    assert_eq!((sweep.claimed, sweep.retried, sweep.failed), (1, 0, 1));
    assert_eq!(
        app.count("SELECT count(*) FROM outbox_events WHERE status = 'failed'")
            .await,
        1
    );
}

#[tokio::test]
async fn the_janitor_fails_events_whose_publishers_died_on_every_attempt() {
    let app = TestApp::spawn(&[("OUTBOX_MAX_ATTEMPTS", "2"), ROOMY]).await;
    app.delete_queue().await;
    app.submit("192.0.2.55").await;
    // The last attempt was claimed, and its publisher died before recording anything.
    app.db
        .batch_execute("UPDATE outbox_events SET attempts = 2, available_at = now()")
        .await
        .unwrap();
    let core = app.instance().await;
    assert_eq!(outbox::sweep(&core).await.unwrap().claimed, 0);
    assert_eq!(janitor::run(&core).await.unwrap().outbox_failed, 1);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM outbox_events WHERE status = 'failed' AND last_error IS NOT NULL"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn two_dispatchers_at_once_send_each_event_once() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "100"), ROOMY]).await;
    app.delete_queue().await;
    let responses = join_all((0..30).map(|_| app.render("203.0.113.160", valid_form()))).await;
    assert!(responses.iter().all(|r| r.status() == StatusCode::ACCEPTED));
    app.create_queue().await;
    app.age_outbox().await;

    let (a, b) = (app.instance().await, app.instance().await);
    let (first, second) = tokio::join!(outbox::sweep(&a), outbox::sweep(&b));
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.claimed + second.claimed, 30);
    assert_eq!(first.dispatched + second.dispatched, 30);

    let delivered = app.drain_queue().await;
    let ids = app.event_ids().await;
    assert_eq!(ids.len(), 30);
    assert_eq!(counts(&delivered), exactly_once(&ids));
}

/// Five clients, each with a key and one job of it: the first two's jobs rendering at 12 %.
struct FiveClients {
    app: TestApp,
    ips: Vec<String>,
    keys: Vec<TestKey>,
    jobs: Vec<String>,
}

async fn five_clients_with_a_job_each() -> FiveClients {
    let app = TestApp::spawn(&[ROOMY]).await;
    let ips: Vec<String> = (0..5).map(|i| format!("198.51.100.{}", 60 + i)).collect();
    let (mut keys, mut jobs) = (Vec::new(), Vec::new());
    for ip in &ips {
        let key = app.create_key("60/hour", 20).await;
        jobs.push(app.submit_with(ip, &key.bearer, valid_form()).await);
        keys.push(key);
    }
    for job in &jobs[..2] {
        app.report_ok(job, json!({ "status": "rendering", "progress": 12 }))
            .await;
    }
    FiveClients {
        app,
        ips,
        keys,
        jobs,
    }
}

#[tokio::test]
async fn a_listing_shows_only_the_callers_jobs_and_never_a_client() {
    let FiveClients {
        app,
        ips,
        keys,
        jobs,
    } = five_clients_with_a_job_each().await;
    for ((ip, key), job) in ips.iter().zip(&keys).zip(&jobs) {
        let response = app.get_with(ip, &key.bearer, "/v1/jobs").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(header(&response, "x-ratelimit-limit"), Some(120));
        assert!(header(&response, "x-ratelimit-remaining").is_some());
        let text = response.text().await.unwrap();
        for ip in &ips {
            assert!(
                !text.contains(ip.as_str()),
                "a client address leaked: {text}"
            );
        }
        // No member names the client (the job's own `client_reference` is the caller's label).
        assert!(
            !text.replace("\"client_reference\"", "").contains("client"),
            "{text}"
        );
        assert!(
            !text.contains(&key.client()),
            "the key's client leaked: {text}"
        );
        let page: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(page["limit"], 20);
        assert_eq!(item_ids(&page), [job.as_str()], "only the caller's own job");
        assert_eq!(page["items"][0]["config"]["skin"], "Default");
    }
}

#[tokio::test]
async fn a_listing_filters_by_status() {
    let FiveClients {
        app, keys, jobs, ..
    } = five_clients_with_a_job_each().await;
    let page = app.list_as(&keys[1], "?status=rendering").await;
    assert_eq!(item_ids(&page), [jobs[1].clone()]);
    assert!(page["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|job| job["status"] == "rendering" && job["progress"] == 12.0));
    assert_eq!(
        item_ids(&app.list_as(&keys[2], "?status=rendering").await).len(),
        0
    );
}

#[tokio::test]
async fn a_listing_with_a_bad_query_is_refused_before_it_spends_quota() {
    let app = TestApp::spawn(&[ROOMY]).await;
    for bad in [
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=101",
        "/v1/jobs?limit=ten",
        "/v1/jobs?offset=0",
        "/v1/jobs?cursor=bad",
        "/v1/jobs?status=paused",
    ] {
        let response = app.get(bad).await;
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            None,
            "{bad} spent no quota"
        );
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }
}

#[tokio::test]
async fn a_job_read_never_shows_its_client_and_links_absolutely() {
    let FiveClients { app, ips, jobs, .. } = five_clients_with_a_job_each().await;
    let one = app.get(&format!("/v1/jobs/{}", jobs[3])).await;
    assert!(header(&one, "x-ratelimit-remaining").is_some());
    let text = one.text().await.unwrap();
    assert!(
        !text.contains(&ips[3]) && !text.replace("\"client_reference\"", "").contains("client"),
        "{text}"
    );
    let job: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(job["job_id"], jobs[3]);
    assert_eq!(
        job["links"]["self"],
        app.url(&format!("/v1/jobs/{}", jobs[3])),
        "links are absolute (PUBLIC_BASE_URL; the dev server's own address)"
    );
    for field in ["created_at", "updated_at"] {
        assert!(job[field].as_str().is_some(), "{field}");
    }
}

#[tokio::test]
async fn a_job_read_of_a_malformed_or_unknown_id_is_refused() {
    let app = TestApp::spawn(&[ROOMY]).await;
    problem(
        app.get("/v1/jobs/not-a-uuid").await,
        StatusCode::BAD_REQUEST,
        "invalid_job_id",
    )
    .await;
    let missing = app.get(&format!("/v1/jobs/{}", uuid::Uuid::new_v4())).await;
    assert!(header(&missing, "x-ratelimit-remaining").is_some());
    problem(missing, StatusCode::NOT_FOUND, "not_found").await;
}

#[tokio::test]
async fn reads_have_their_own_rate_limit() {
    let app = TestApp::spawn(&[("RATE_LIMIT_READ", "3/hour")]).await;
    let key = app.create_key("60/hour", 20).await;
    for remaining in (0..3).rev() {
        let response = app.get_with(READER, &key.bearer, "/v1/jobs").await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining));
    }
    let job = format!("/v1/jobs/{}", uuid::Uuid::new_v4());
    let limited = app.get_with(READER, &key.bearer, &job).await;
    assert!(header(&limited, "retry-after").is_some());
    assert_eq!(header(&limited, "x-ratelimit-limit"), Some(3));
    problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Submitting counts separately.
    app.submit_with(READER, &key.bearer, valid_form()).await;
}

#[tokio::test]
async fn health_reports_each_dependency() {
    let app = TestApp::spawn(&[("HEALTH_CHECK_INTERVAL", "2")]).await;
    let response = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({
            "status": "ok",
            "checks": { "postgres": "ok", "dynamodb": "ok", "s3": "ok", "sqs": "ok" }
        })
    );

    app.delete_queue().await;
    let cached = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(cached.status(), StatusCode::OK, "the last probe's answer");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let response = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&response, "retry-after"), Some(5));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["checks"]["sqs"], "unavailable");
    assert_eq!(body["checks"]["postgres"], "ok");
}

#[tokio::test]
async fn simulated_workers_walk_a_job_to_completed() {
    // The simulated farm renders a job in its cost / RENDER_SPEED: a few seconds here.
    let app = TestApp::spawn(&[
        ("SIMULATE_WORKERS", "1"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
        ("RENDER_SPEED", "10"),
    ])
    .await;
    let job = app.submit("203.0.113.170").await;
    let mut seen = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let job = app.job(&job).await;
            let status = job["status"].as_str().unwrap().to_owned();
            if seen.last() != Some(&status) {
                seen.push(status.clone());
            }
            if status == "completed" {
                return job;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the simulated workers complete the job");
    assert!(seen.contains(&"rendering".to_owned()), "{seen:?}");
    let video = reqwest::get(done["artifacts"]["video_url"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(video.status(), StatusCode::OK);
}

/// The fences of resolved admissions are kept a day (longer than any statement can be in
/// flight), then the janitor deletes them; a younger one stays.
#[tokio::test]
async fn the_janitor_prunes_day_old_admission_fences_only() {
    let app = TestApp::spawn(&[]).await;
    let core = app.instance().await;
    app.db
        .batch_execute(
            "INSERT INTO admission_fences (job_id, created_at) VALUES \
             (gen_random_uuid(), now() - interval '25 hours'), \
             (gen_random_uuid(), now() - interval '25 hours'), \
             (gen_random_uuid(), now() - interval '23 hours')",
        )
        .await
        .unwrap();
    assert_eq!(
        janitor::run(&core).await.unwrap().admission_fences_pruned,
        2
    );
    assert_eq!(app.count("SELECT count(*) FROM admission_fences").await, 1);
    assert_eq!(
        janitor::run(&core).await.unwrap().admission_fences_pruned,
        0
    );
}
