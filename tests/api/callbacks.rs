//! Callbacks: only keyed clients set one, only to a public https URL (checked at submission and
//! again at delivery); each status change is POSTed, signed with the key's secret, in order per
//! job, retried with backoff and then marked failed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use osurender_core::domain::key::KeyKind;
use osurender_core::entry::wiring::callback_sender;
use osurender_core::ports::callbacks::{CallbackClaim, KeyShares};
use osurender_core::ports::leased::{LeaseClaim, Retry};
use osurender_core::usecases::callbacks::CLAIM_PER_KEY;
use osurender_core::{App, Clients};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_postgres::Row;

use crate::support::app::{header, problem, wake_queue, TestApp};
use crate::support::callbacks::{callback_form, sequences, sweep_callbacks, Receiver, Trap};
use crate::support::keys::TestKey;
use crate::support::replays::valid_form;

/// A claim of up to `limit` callbacks as the tests make them: a minute's lease, 10 attempts,
/// the dispatcher's share per key.
fn lease_claim(limit: i64) -> CallbackClaim {
    CallbackClaim {
        lease: LeaseClaim {
            limit,
            lease: Duration::from_secs(60),
            max_attempts: 10,
        },
        shares: KeyShares {
            per_client: CLAIM_PER_KEY,
            max_pending_per_key: 1000,
        },
    }
}

/// A callback as stored.
#[derive(Debug, PartialEq)]
struct StoredCallback {
    sequence: i32,
    status: String,
    attempts: i32,
    last_error: Option<String>,
}

impl StoredCallback {
    fn new(sequence: i32, status: &str, attempts: i32, last_error: Option<&str>) -> Self {
        StoredCallback {
            sequence,
            status: status.to_owned(),
            attempts,
            last_error: last_error.map(str::to_owned),
        }
    }

    fn from_row(row: &Row) -> Self {
        StoredCallback {
            sequence: row.get("sequence"),
            status: row.get("status"),
            attempts: row.get("attempts"),
            last_error: row.get("last_error"),
        }
    }

    fn error(&self) -> &str {
        self.last_error.as_deref().unwrap_or_default()
    }
}

/// The job's callbacks as stored, in sequence.
async fn stored_callbacks(app: &TestApp, job: &str) -> Vec<StoredCallback> {
    app.db
        .query(
            "SELECT sequence, status, attempts, last_error FROM job_callbacks \
             WHERE job_id = $1::text::uuid ORDER BY sequence",
            &[&job],
        )
        .await
        .unwrap()
        .iter()
        .map(StoredCallback::from_row)
        .collect()
}

/// Makes every pending callback due now, as if its backoff had passed.
async fn make_callbacks_due(app: &TestApp) {
    app.db
        .batch_execute("UPDATE job_callbacks SET available_at = now() WHERE status = 'pending'")
        .await
        .unwrap();
}

/// Another instance on the server's resources, with private callbacks allowed or not.
async fn instance(app: &TestApp, allow_private: bool) -> App {
    let mut config = app.config.clone();
    config.callbacks.allow_private = allow_private;
    Clients::new(&config).await.unwrap().app(config.clone())
}

/// A server with `overrides`, and a key that may render 60 a minute, 20 at once.
async fn app_with_key(overrides: &[(&str, &str)]) -> (TestApp, TestKey) {
    let app = TestApp::spawn(overrides).await;
    let key = app.create_key("60/minute", 20).await;
    (app, key)
}

/// A server that may call back a local receiver, a receiver that answers every POST, and a key.
async fn app_with_receiver() -> (TestApp, Receiver, TestKey) {
    let (app, key) = app_with_key(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    (app, Receiver::start(0).await, key)
}

#[tokio::test]
async fn a_callback_url_without_a_key_is_refused_as_needing_one() {
    let app = TestApp::spawn(&[]).await;
    // 401 with the code that means "needs a key", and no quota read.
    let anonymous = app
        .render("203.0.113.20", callback_form("https://93.184.216.34/hook"))
        .await;
    assert_eq!(header(&anonymous, "x-ratelimit-remaining"), None);
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    let anonymous = problem(anonymous, StatusCode::UNAUTHORIZED, "api_key_required").await;
    assert!(
        anonymous["detail"]
            .as_str()
            .unwrap()
            .contains("callback_url"),
        "{anonymous}"
    );
}

#[tokio::test]
async fn a_callback_url_not_to_a_public_https_address_is_refused() {
    let (app, key) = app_with_key(&[]).await;
    for refused in [
        "http://93.184.216.34/hook",
        "https://127.0.0.1/hook",
        "https://localhost:8443/hook",
        "https://10.0.0.8/hook",
        "https://172.20.1.1/hook",
        "https://192.168.0.10/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.100.100.200/hook",
        "https://0.0.0.0/hook",
        "https://224.0.0.1/hook",
        "https://[::1]/hook",
        "https://[::ffff:127.0.0.1]/hook",
        "https://[::ffff:a9fe:a9fe]/hook",
        "https://[fd00:ec2::254]/hook",
        "https://[fe80::1]/hook",
        "https://[ff02::1]/hook",
        "https://[2001:db8::1]/hook",
        "https://[2001::1]/hook",
        "https://[64:ff9b:1::a9fe:a9fe]/hook",
        "https://[2002:a9fe:a9fe::]/hook",
        "https://user:pass@93.184.216.34/hook",
        "not a url",
    ] {
        let response = app
            .render_with("203.0.113.20", &key.bearer, callback_form(refused))
            .await;
        // Refused before the rate limit counts the request, but for a name, which is looked up
        // after it (the lookup waits on the network).
        let named = refused.contains("localhost");
        assert_eq!(
            header(&response, "x-ratelimit-limit").is_some(),
            named,
            "{refused}"
        );
        let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
        assert!(
            body.to_string().contains("callback_url"),
            "{refused}: {body}"
        );
        // What the resolver answered is not told: no probing of internal names.
        assert!(!body.to_string().contains("127.0.0.1"), "{refused}: {body}");
        assert!(!body.to_string().contains("resolve"), "{refused}: {body}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

/// A public address (named literally: no DNS needed) is accepted, and its first callback is
/// queued with the job.
#[tokio::test]
async fn a_callback_url_to_a_public_address_queues_its_first_callback_with_the_job() {
    let (app, key) = app_with_key(&[]).await;
    let job = app
        .submit_with_callback("203.0.113.20", &key, "https://93.184.216.34/hook")
        .await;
    let stored = stored_callbacks(&app, &job).await;
    assert_eq!(stored, [StoredCallback::new(1, "pending", 0, None)]);
}

/// A stack whose dispatcher has no route out (`CALLBACKS_EGRESS=false`) refuses a
/// `callback_url` with the form's checks: 422 `callbacks_unavailable`, before the rate limit
/// counts the request (no rate-limit headers, the key's quota whole), and nothing stored. The
/// same key renders without one.
#[tokio::test]
async fn without_egress_a_callback_url_is_refused_before_the_rate_limit() {
    let app = TestApp::spawn(&[("CALLBACKS_EGRESS", "false")]).await;
    let key = app.create_key("1/minute", 20).await;
    for url in [
        "https://93.184.216.34/hook",
        "https://bot.example/hook",
        "https://10.0.0.8/hook",
    ] {
        let response = app
            .render_with("203.0.113.22", &key.bearer, callback_form(url))
            .await;
        assert_eq!(header(&response, "x-ratelimit-limit"), None, "{url}");
        assert_eq!(header(&response, "retry-after"), None, "{url}");
        let body = problem(
            response,
            StatusCode::UNPROCESSABLE_ENTITY,
            "callbacks_unavailable",
        )
        .await;
        assert_eq!(body["type"], "/problems/callbacks_unavailable");
        assert_eq!(body["title"], "Callbacks unavailable");
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("callback_url"), "{detail}");
    }
    // Anonymous too: no key would make it deliverable.
    let anonymous = app
        .render("203.0.113.23", callback_form("https://93.184.216.34/hook"))
        .await;
    problem(
        anonymous,
        StatusCode::UNPROCESSABLE_ENTITY,
        "callbacks_unavailable",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM job_callbacks").await, 0);
    assert!(app.replay_objects().await.is_empty());
    // The key's one render a minute was not spent by the refusals.
    let admitted = app
        .render_with("203.0.113.22", &key.bearer, valid_form())
        .await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(0));
}

#[tokio::test]
async fn each_status_change_is_posted_signed_and_in_order() {
    let (app, receiver, key) = app_with_receiver().await;
    let job = app
        .submit_with_callback("203.0.113.21", &key, &receiver.url("/osu/hook"))
        .await;
    app.report_ok(&job, json!({ "status": "downloading" }))
        .await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 10 }))
        .await;
    // A progress change within 5 s of the last callback is not sent on its own.
    app.report_ok(&job, json!({ "status": "rendering", "progress": 20 }))
        .await;
    app.report_ok(
        &job,
        json!({ "status": "completed", "video_key": "videos/v.mp4" }),
    )
    .await;
    // Two dispatchers at once: each callback is sent once, and still in order.
    let (core, other) = (app.instance().await, app.instance().await);
    let (a, b) = tokio::join!(sweep_callbacks(&core), sweep_callbacks(&other));
    assert_eq!(a + b, 4);

    let received = receiver.received();
    assert_eq!(
        sequences(&received),
        [
            (1, "queued"),
            (2, "downloading"),
            (3, "rendering"),
            (4, "completed")
        ]
    );
    for callback in &received {
        assert!(callback.signed_with(&key.signing_secret), "{:?}", callback);
        assert!(!callback.signed_with("whsec_not_the_secret"));
        assert_eq!(callback.json["job_id"], job.as_str());
        assert_eq!(callback.json["type"], "job.status");
    }
    assert_eq!(received[2].json["progress"], 10.0);
    assert_eq!(received[3].json["progress"], 100.0);
    assert_eq!(
        received[3].json["links"],
        json!({
            "status": app.url(&format!("/v1/jobs/{job}")),
            "video": app.url(&format!("/v1/jobs/{job}/video"))
        }),
        "the completed callback links the video"
    );
    assert_eq!(received[2].json["links"].get("video"), None);
    assert_eq!(
        received[0].json.get("error_code"),
        None,
        "only a failure has a code"
    );
    // Each was sent once; nothing is left.
    assert_eq!(sweep_callbacks(&core).await, 0);
    assert!(stored_callbacks(&app, &job)
        .await
        .iter()
        .all(|stored| stored.status == "dispatched" && stored.attempts == 1));
}

#[tokio::test]
async fn a_failed_jobs_callback_says_why_with_its_code() {
    let (app, receiver, key) = app_with_receiver().await;
    let core = app.instance().await;
    let failing = app
        .submit_with_callback("203.0.113.21", &key, &receiver.url("/osu/hook"))
        .await;
    app.report_ok(
        &failing,
        json!({ "status": "failed", "error": "beatmap not found", "error_code": "beatmap_not_found" }),
    )
    .await;
    sweep_callbacks(&core).await;
    let last = receiver.received().pop().unwrap();
    assert_eq!((last.sequence(), last.status()), (2, "failed"));
    assert_eq!(last.json["error"], "beatmap not found");
    assert_eq!(
        (&last.json["error_code"], &last.json["retryable"]),
        (&json!("beatmap_not_found"), &json!(false))
    );
}

#[tokio::test]
async fn a_failing_receiver_gets_retries_with_backoff_then_the_next_callback_goes_out() {
    let app = TestApp::spawn(&[
        ("ALLOW_PRIVATE_CALLBACKS", "true"),
        ("OUTBOX_MAX_ATTEMPTS", "3"),
    ])
    .await;
    let receiver = Receiver::start(3).await;
    let key = app.create_key("60/minute", 20).await;
    let job = app
        .submit_with_callback("203.0.113.22", &key, &receiver.url("/hook"))
        .await;
    let core = app.instance().await;
    assert_eq!(sweep_callbacks(&core).await, 0);
    app.report_ok(&job, json!({ "status": "downloading" }))
        .await;
    // The first is backing off (5 s), and the second waits behind it.
    assert_eq!(sweep_callbacks(&core).await, 0);
    assert_eq!(receiver.received().len(), 1);
    let wait: f64 = app
        .scalar_with(
            "SELECT extract(epoch FROM available_at - now())::float8 FROM job_callbacks \
             WHERE job_id = $1::text::uuid AND sequence = 1",
            &[&job],
        )
        .await;
    assert!((3.0..=5.5).contains(&wait), "first backoff {wait}");
    // Two more failures use up the attempts; then the second callback goes out.
    make_callbacks_due(&app).await;
    assert_eq!(sweep_callbacks(&core).await, 0);
    make_callbacks_due(&app).await;
    assert_eq!(sweep_callbacks(&core).await, 1);
    let sequences: Vec<i64> = receiver.received().iter().map(|r| r.sequence()).collect();
    assert_eq!(sequences, [1, 1, 1, 2]);
    let stored = stored_callbacks(&app, &job).await;
    assert_eq!(
        stored,
        [
            StoredCallback::new(1, "failed", 3, Some("answered 500")),
            StoredCallback::new(2, "dispatched", 1, None),
        ]
    );
}

/// Accepted where private callbacks were allowed; delivered where they are not (a host that
/// now resolves to a private address is the same case: the address is checked as the
/// connection is made).
#[tokio::test]
async fn a_callback_is_checked_again_at_delivery() {
    let (app, key) = app_with_key(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let trap = Trap::start().await;
    let mut jobs = Vec::new();
    for url in [
        format!("https://localhost:{}/hook", trap.addr.port()),
        format!("https://127.0.0.1:{}/hook", trap.addr.port()),
    ] {
        jobs.push(app.submit_with_callback("203.0.113.23", &key, &url).await);
    }
    let strict = instance(&app, false).await;
    assert_eq!(sweep_callbacks(&strict).await, 0);
    assert_eq!(trap.connections(), 0, "a refused callback connected");
    for job in &jobs {
        let stored = &stored_callbacks(&app, job).await[0];
        assert_eq!((stored.status.as_str(), stored.attempts), ("pending", 1));
        assert!(stored.error().contains("may not reach"), "{stored:?}");
    }
}

#[tokio::test]
async fn a_revoked_keys_callbacks_are_not_sent_nor_retried() {
    let (app, receiver, key) = app_with_receiver().await;
    let job = app
        .submit_with_callback("203.0.113.23", &key, &receiver.url("/hook"))
        .await;
    app.revoke_key(&key).await;
    sweep_callbacks(&instance(&app, true).await).await;
    assert!(receiver.received().is_empty());
    let stored = &stored_callbacks(&app, &job).await[0];
    assert_eq!(stored.status, "failed");
    assert!(stored.error().contains("revoked"), "{stored:?}");
}

#[tokio::test]
async fn a_sandbox_job_calls_back_its_whole_progression_in_order() {
    let (app, receiver, key) = app_with_sandbox_key().await;
    let core = app.instance().await;
    let job = app
        .submit_with_callback("203.0.113.24", &key, &receiver.url("/sandbox"))
        .await;
    // Each goes out once due: the first at once, the rest as the job's age reaches them.
    sweep_callbacks(&core).await;
    let first = receiver.received();
    assert_eq!((first[0].sequence(), first[0].status()), (1, "queued"));
    assert!(first.len() < 5, "the schedule went out at once");
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    while receiver.received().len() < 5 {
        assert!(
            std::time::Instant::now() < give_up,
            "{:?}",
            receiver.received()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        sweep_callbacks(&core).await;
    }
    let received = receiver.received();
    assert_eq!(
        sequences(&received),
        [
            (1, "queued"),
            (2, "downloading"),
            (3, "rendering"),
            (4, "rendering"),
            (5, "completed")
        ]
    );
    assert!(received.iter().all(|r| r.signed_with(&key.signing_secret)));
    assert!(received.iter().all(|r| r.json["job_id"] == job.as_str()));
    assert_eq!(received[3].json["progress"], 50.0);
}

#[tokio::test]
async fn a_sandbox_job_without_a_callback_url_has_no_callbacks() {
    let (app, _receiver, key) = app_with_sandbox_key().await;
    let plain = app
        .submit_with("203.0.113.24", &key.bearer, valid_form())
        .await;
    assert!(stored_callbacks(&app, &plain).await.is_empty());
}

/// A server that may call back a local receiver, the receiver, and a sandbox key.
async fn app_with_sandbox_key() -> (TestApp, Receiver, TestKey) {
    let app = TestApp::spawn(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let receiver = Receiver::start(0).await;
    let key = app.create_key_of(KeyKind::Sandbox, "60/minute", 5).await;
    (app, receiver, key)
}

#[tokio::test]
async fn the_janitors_changes_are_called_back_too() {
    let app = TestApp::spawn(&[
        ("ALLOW_PRIVATE_CALLBACKS", "true"),
        ("QUEUED_TTL", "1h"),
        ("RENDER_STALL_TIMEOUT", "1h"),
    ])
    .await;
    let receiver = Receiver::start(0).await;
    let key = app.create_key("60/minute", 20).await;
    let submit = || async {
        app.submit_with_callback("203.0.113.25", &key, &receiver.url("/janitor"))
            .await
    };
    let (waiting, stalled) = (submit().await, submit().await);
    app.report_ok(&stalled, json!({ "status": "rendering", "progress": 40 }))
        .await;
    app.db
        .execute(
            "UPDATE jobs SET created_at = now() - interval '2 hours' WHERE id = $1::text::uuid",
            &[&waiting],
        )
        .await
        .unwrap();
    app.db
        .execute(
            "UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1::text::uuid",
            &[&stalled],
        )
        .await
        .unwrap();
    let core = app.instance().await;
    let report = osurender_core::usecases::janitor::run(&core).await.unwrap();
    assert_eq!((report.expired, report.timed_out), (1, 1));
    sweep_callbacks(&core).await;
    let callbacks_of = |job: &str| {
        receiver
            .received()
            .into_iter()
            .filter(|r| r.json["job_id"] == job)
            .map(|r| (r.sequence(), r.status().to_owned(), r.json["error"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        callbacks_of(&waiting),
        [
            (1, "queued".to_owned(), Value::Null),
            (
                2,
                "expired".to_owned(),
                json!("no renderer took the job in time")
            ),
        ]
    );
    assert_eq!(
        callbacks_of(&stalled),
        [
            (1, "queued".to_owned(), Value::Null),
            (2, "rendering".to_owned(), Value::Null),
            (3, "failed".to_owned(), json!("timed out")),
        ]
    );
}

#[tokio::test]
async fn one_key_takes_at_most_its_share_of_a_claim() {
    let app = TestApp::spawn(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let busy = app.create_key("1000/minute", 100).await;
    let other = app.create_key("60/minute", 20).await;
    let trap = Trap::start().await;
    let url = format!("http://{}/slow", trap.addr);
    for _ in 0..30 {
        app.submit_with_callback("203.0.113.26", &busy, &url).await;
    }
    let late = app.submit_with_callback("203.0.113.27", &other, &url).await;
    // The other key's callback is the youngest of 31 due; a claim of 11 takes it beside the
    // busy key's share.
    let claimed = app
        .instance()
        .await
        .callbacks
        .claim(lease_claim(11))
        .await
        .unwrap();
    let jobs: Vec<String> = claimed.iter().map(|c| c.job_id.to_string()).collect();
    assert_eq!(jobs.len(), 11);
    assert!(
        jobs.contains(&late),
        "the other key's callback waited: {jobs:?}"
    );
    let busy_share = jobs.iter().filter(|job| **job != late).count();
    assert_eq!(busy_share as i64, CLAIM_PER_KEY);
}

#[tokio::test]
async fn a_receiver_that_never_answers_does_not_hold_up_the_next_claim() {
    let app = TestApp::spawn(&[
        ("ALLOW_PRIVATE_CALLBACKS", "true"),
        ("CALLBACK_TIMEOUT_MS", "3000"),
    ])
    .await;
    // Accepts connections and keeps them, answering nothing: each send takes its whole timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let receiver = Receiver::start(0).await;
    let (slow_key, quick_key) = (
        app.create_key("60/minute", 20).await,
        app.create_key("60/minute", 20).await,
    );
    app.submit_with_callback("203.0.113.30", &slow_key, &silent_url)
        .await;
    let quick = app
        .submit_with_callback("203.0.113.31", &quick_key, &receiver.url("/quick"))
        .await;
    app.report_ok(&quick, json!({ "status": "downloading" }))
        .await;
    app.report_ok(&quick, json!({ "status": "rendering", "progress": 10 }))
        .await;
    // The quick job's three callbacks need a claim each, after the one before is delivered.
    let core = app.instance().await;
    let started = Instant::now();
    let sweeping = tokio::spawn(async move {
        let sender = callback_sender(&core.config);
        osurender_core::usecases::callbacks::sweep(&core, &sender).await
    });
    while receiver.received().len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            receiver.received()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let quick_took = started.elapsed();
    assert!(
        quick_took < Duration::from_millis(1500),
        "the quick job's callbacks waited {quick_took:?} for the silent receiver"
    );
    let sequences: Vec<i64> = receiver.received().iter().map(|r| r.sequence()).collect();
    assert_eq!(sequences, [1, 2, 3]);
    let report = sweeping.await.unwrap().unwrap();
    assert_eq!((report.dispatched, report.retried), (3, 1));
    assert!(started.elapsed() >= Duration::from_secs(3));
}

/// A backlog as a busy key leaves one: `jobs` ended jobs of `client`, each with `per_job`
/// pending callbacks to `url` (queued … completed), due since a minute ago, oldest first.
/// Written in SQL: admitting thousands of jobs over HTTP would take minutes.
async fn seed_backlog(app: &TestApp, client: &str, jobs: i32, per_job: i32, url: &str) {
    app.db
        .execute(
            "WITH made AS (
                 INSERT INTO jobs (id, status, client_ip, skin, config, replay_key, progress,
                                   callback_url, callback_seq, callback_at, created_at)
                 SELECT gen_random_uuid(), 'completed', $1, 'default', '{}', 'replays/x.osr',
                        100, $4, $3, now(), now() - interval '2 minutes'
                   FROM generate_series(1, $2)
                 RETURNING id, callback_url
             )
             INSERT INTO job_callbacks (job_id, sequence, url, body, available_at, created_at)
             SELECT m.id, s.n, m.callback_url,
                    job_callback_body(m.id, s.n,
                        (ARRAY['queued', 'downloading', 'rendering', 'rendering',
                               'completed'])[1 + (s.n - 1) % 5], 0, NULL, now(), NULL, NULL, NULL, false),
                    now() - interval '1 minute' + s.n * interval '1 millisecond',
                    now() - interval '1 minute'
               FROM made m CROSS JOIN generate_series(1, $3) AS s (n)",
            &[&client, &jobs, &per_job, &url],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn every_key_with_a_due_callback_gets_a_share_of_each_claim_in_turn() {
    let app = TestApp::spawn(&[]).await;
    let url = "https://93.184.216.34/hook";
    // One key with 500 jobs' callbacks due, and 59 keys with two jobs' each, all older than
    // the big key's.
    seed_backlog(
        &app,
        "key:00000000-0000-4000-8000-000000000000",
        500,
        1,
        url,
    )
    .await;
    let small: Vec<String> = (1..60)
        .map(|n| format!("key:00000000-0000-4000-8000-{n:012}"))
        .collect();
    for client in &small {
        seed_backlog(&app, client, 2, 1, url).await;
    }
    let core = app.instance().await;
    let clients_of = |ids: Vec<i64>| {
        let app = &app;
        async move {
            app.column_with::<String>(
                "SELECT client FROM job_callbacks WHERE id = ANY($1) ORDER BY id",
                &[&ids],
            )
            .await
        }
    };
    let mut served = HashSet::new();
    for _ in 0..2 {
        let claimed = core.callbacks.claim(lease_claim(50)).await.unwrap();
        let clients = clients_of(claimed.iter().map(|c| c.id).collect()).await;
        assert_eq!(clients.len(), 50);
        // 60 keys are due: each of a claim's 50 places goes to a different key.
        let distinct: HashSet<&String> = clients.iter().collect();
        assert_eq!(distinct.len(), 50, "{clients:?}");
        served.extend(clients);
    }
    // The second claim began where the first stopped: every key was served.
    assert_eq!(served.len(), 60);

    // Fewer keys than places: each gives up to its share, no more.
    let claimed = core.callbacks.claim(lease_claim(200)).await.unwrap();
    let clients = clients_of(claimed.iter().map(|c| c.id).collect()).await;
    let big = clients
        .iter()
        .filter(|c| c.ends_with("000000000000"))
        .count();
    assert_eq!(big as i64, CLAIM_PER_KEY);
    // The small keys' 20 callbacks the two claims above left (118, less 98) all came along.
    assert_eq!(clients.len() - big, 20);
}

#[tokio::test]
async fn past_the_cap_progress_is_coalesced_and_status_changes_are_kept_in_order() {
    let app = TestApp::spawn(&[("MAX_PENDING_CALLBACKS_PER_KEY", "5")]).await;
    // The dispatcher records its bound for the database's trigger as it claims.
    assert_eq!(sweep_callbacks(&app.instance().await).await, 0);
    let key = app.create_key("60/minute", 20).await;
    let url = "https://93.184.216.34/hook";
    let job = app.submit_with_callback("203.0.113.28", &key, url).await;
    let five_seconds_pass = || async {
        app.db
            .execute(
                "UPDATE jobs SET callback_at = now() - interval '6 seconds' \
                 WHERE id = $1::text::uuid",
                &[&job],
            )
            .await
            .unwrap();
    };
    app.report_ok(&job, json!({ "status": "rendering", "progress": 10 }))
        .await;
    five_seconds_pass().await;
    // Under the cap, a progress update is queued.
    app.report_ok(&job, json!({ "status": "rendering", "progress": 30 }))
        .await;
    // The key's other jobs fill its undelivered callbacks to the bound.
    seed_backlog(&app, &key.client(), 2, 1, url).await;
    five_seconds_pass().await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 60 }))
        .await;
    app.report_ok(
        &job,
        json!({ "status": "completed", "video_key": "videos/v.mp4" }),
    )
    .await;
    let stored: Vec<CallbackBody> = app
        .db
        .query(
            "SELECT sequence, body ->> 'status' AS status, \
                    (body ->> 'progress')::float8 AS progress \
             FROM job_callbacks WHERE job_id = $1::text::uuid ORDER BY sequence",
            &[&job],
        )
        .await
        .unwrap()
        .iter()
        .map(CallbackBody::from_row)
        .collect();
    assert_eq!(
        stored,
        [
            CallbackBody::new(1, "queued", 0.0),
            CallbackBody::new(2, "rendering", 10.0),
            CallbackBody::new(3, "rendering", 30.0),
            // 60 % was coalesced; the status change carries the latest state.
            CallbackBody::new(4, "completed", 100.0),
        ]
    );
    let pending = app
        .count("SELECT count(*) FROM job_callbacks WHERE status = 'pending'")
        .await;
    assert_eq!(pending, 6);
}

/// What a stored callback will say: its sequence, status and progress.
#[derive(Debug, PartialEq)]
struct CallbackBody {
    sequence: i32,
    status: String,
    progress: f64,
}

impl CallbackBody {
    fn new(sequence: i32, status: &str, progress: f64) -> Self {
        CallbackBody {
            sequence,
            status: status.to_owned(),
            progress,
        }
    }

    fn from_row(row: &Row) -> Self {
        CallbackBody {
            sequence: row.get("sequence"),
            status: row.get("status"),
            progress: row.get("progress"),
        }
    }
}

/// A key's 5,000 callbacks are due and its receiver answers 500; another
/// key's first callback goes out within one sweep (and its send), not behind the backlog.
/// `bench/run --only callbacks` reports the printed latency.
#[tokio::test]
async fn a_keys_backlog_does_not_delay_another_keys_first_callback() {
    const SWEEP_INTERVAL: Duration = Duration::from_secs(2);
    let app = TestApp::spawn(&[
        ("ALLOW_PRIVATE_CALLBACKS", "true"),
        ("OUTBOX_SWEEP_INTERVAL", "2s"),
    ])
    .await;
    let failing = Receiver::start(usize::MAX).await;
    let busy = app.create_key("60/minute", 20).await;
    seed_backlog(&app, &busy.client(), 1000, 5, &failing.url("/busy")).await;
    // The dev server's sweeps are at work on the backlog.
    let give_up = Instant::now() + Duration::from_secs(30);
    while failing.received().len() < 100 {
        assert!(Instant::now() < give_up, "the backlog is not being sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receiver = Receiver::start(0).await;
    let other = app.create_key("60/minute", 20).await;
    let submitted = Instant::now();
    let job = app
        .submit_with_callback("203.0.113.29", &other, &receiver.url("/other"))
        .await;
    while receiver.received().is_empty() {
        assert!(
            submitted.elapsed() < Duration::from_secs(60),
            "the other key's callback never went out"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let latency = submitted.elapsed();
    let backlog_sends = failing.received().len();
    println!(
        "callbacks: first callback of a second key behind a 5000-callback backlog: {} ms \
         ({backlog_sends} backlog sends by then)",
        latency.as_millis()
    );
    assert_eq!(receiver.received()[0].json["job_id"], job.as_str());
    // One sweep interval, and the send (a local receiver) with room for a loaded machine.
    assert!(
        latency < SWEEP_INTERVAL + Duration::from_secs(2),
        "{latency:?} behind {backlog_sends} sends"
    );
}

/// The one key with a callback not held behind a retry in `a_backlog_behind_retries`.
const UNHELD: &str = "key:00000000-0000-4000-8000-999999999999";

/// 20 keys, each with 200 jobs of 5 callbacks whose first is backing off (10 minutes); then a
/// key (`UNHELD`) with one callback, walked after them. A dispatcher's instance, and the ids of
/// the backing-off firsts.
async fn a_backlog_behind_retries(app: &TestApp) -> (App, Vec<i64>) {
    let url = "https://93.184.216.34/hook";
    let blocked: Vec<String> = (1..=20)
        .map(|n| format!("key:00000000-0000-4000-8000-{n:012}"))
        .collect();
    for client in &blocked {
        seed_backlog(app, client, 200, 5, url).await;
    }
    seed_backlog(app, UNHELD, 1, 1, url).await;
    let heads: Vec<i64> = app
        .column_with(
            "SELECT id FROM job_callbacks WHERE sequence = 1 AND client <> $1",
            &[&UNHELD],
        )
        .await;
    let core = app.instance().await;
    let retries: Vec<Retry> = heads
        .iter()
        .map(|&id| Retry {
            id,
            delay: Duration::from_secs(600),
            error: "HTTP 503".to_owned(),
        })
        .collect();
    assert_eq!(core.callbacks.mark_retry(&retries, 10).await.unwrap(), 0);
    (core, heads)
}

/// The jobs and sequences of a claim of up to `limit` callbacks.
async fn claim_jobs(core: &App, limit: i64) -> Vec<(String, i32)> {
    let claimed = core.callbacks.claim(lease_claim(limit)).await.unwrap();
    claimed
        .iter()
        .map(|c| (c.job_id.to_string(), c.sequence))
        .collect()
}

#[tokio::test]
async fn keys_whose_callbacks_wait_behind_a_retry_take_no_place_in_a_claim() {
    let app = TestApp::spawn(&[]).await;
    let (core, _) = a_backlog_behind_retries(&app).await;
    // The later callbacks wait with their job's first: none of the 20 keys is due, so the
    // first claim finds the other key's callback instead of 20 keys with nothing to give.
    let claimed = claim_jobs(&core, 20).await;
    let other_job: String = app
        .scalar_with(
            "SELECT job_id::text FROM job_callbacks WHERE client = $1",
            &[&UNHELD],
        )
        .await;
    assert_eq!(claimed, [(other_job, 1)]);
}

#[tokio::test]
async fn once_a_jobs_first_callback_is_delivered_its_next_is_due_at_once() {
    let app = TestApp::spawn(&[]).await;
    let (core, heads) = a_backlog_behind_retries(&app).await;
    // The one callback due is claimed (and leased) first: the next claim finds only what the
    // delivery makes due.
    assert_eq!(claim_jobs(&core, 20).await.len(), 1);
    let job: String = app
        .scalar_with(
            "SELECT job_id::text FROM job_callbacks WHERE id = $1",
            &[&heads[0]],
        )
        .await;
    core.callbacks.mark_dispatched(&heads[..1]).await.unwrap();
    assert_eq!(claim_jobs(&core, 20).await, [(job, 2)]);
}

#[tokio::test]
async fn a_callback_queued_while_its_jobs_first_backs_off_waits_for_it_too() {
    let app = TestApp::spawn(&[]).await;
    let (_, heads) = a_backlog_behind_retries(&app).await;
    let waiting = heads[1];
    app.db
        .execute(
            "INSERT INTO job_callbacks (job_id, sequence, url, body)
             SELECT job_id, 6, url, body FROM job_callbacks WHERE id = $1",
            &[&waiting],
        )
        .await
        .unwrap();
    let due: i64 = app
        .scalar_with(
            "SELECT count(*) FROM job_callbacks c JOIN job_callbacks h ON h.job_id = c.job_id
              WHERE h.id = $1 AND c.sequence = 6 AND c.available_at >= h.available_at",
            &[&waiting],
        )
        .await;
    assert_eq!(due, 1);
}

/// The migrations' scripts in the order they apply, each with its name (`fair_callbacks` for
/// `V12__fair_callbacks.sql`).
fn migrations() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations");
    let mut found: Vec<(u32, String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let file = path.file_name()?.to_str()?.to_owned();
            let (version, name) = file.strip_prefix('V')?.split_once("__")?;
            let name = name.strip_suffix(".sql")?.to_owned();
            Some((version.parse().ok()?, name, path))
        })
        .map(|(version, name, path)| (version, name, std::fs::read_to_string(path).unwrap()))
        .collect();
    found.sort_by_key(|(version, ..)| *version);
    found
        .into_iter()
        .map(|(_, name, script)| (name, script))
        .collect()
}

/// A database that has callbacks without their client (every migration before
/// `fair_callbacks`) with one job's callbacks: one delivered, one backing off, one queued behind
/// it, is upgraded.
#[tokio::test]
async fn an_upgrade_gives_only_pending_callbacks_their_client_and_holds_them_behind_a_backoff() {
    let database = osurender_testkit::fresh_database("api_upgrade").await;
    let db = database.connect().await;
    let migrations = migrations();
    let upgrade = migrations
        .iter()
        .position(|(name, _)| name == "fair_callbacks")
        .expect("the migration that gives callbacks their client");
    for (_, script) in &migrations[..upgrade] {
        db.batch_execute(script).await.unwrap();
    }
    db.batch_execute(
        "INSERT INTO jobs (id, status, client_ip, skin, config, replay_key, callback_url)
         VALUES ('00000000-0000-4000-8000-000000000001', 'rendering', 'key:k', 'default', '{}',
                 'replays/x.osr', 'https://93.184.216.34/hook');
         INSERT INTO job_callbacks (job_id, sequence, url, body, status, available_at)
         VALUES ('00000000-0000-4000-8000-000000000001', 1, 'u', '{}', 'dispatched', now()),
                ('00000000-0000-4000-8000-000000000001', 2, 'u', '{}', 'pending',
                 now() + interval '10 minutes'),
                ('00000000-0000-4000-8000-000000000001', 3, 'u', '{}', 'pending', now());",
    )
    .await
    .unwrap();
    db.batch_execute(&migrations[upgrade].1).await.unwrap();
    let rows = db
        .query(
            "SELECT sequence, client, available_at > now() AS held FROM job_callbacks \
             ORDER BY sequence",
            &[],
        )
        .await
        .unwrap();
    let upgraded: Vec<UpgradedCallback> = rows.iter().map(UpgradedCallback::from_row).collect();
    let of_k = |sequence, held| UpgradedCallback {
        sequence,
        client: Some("key:k".to_owned()),
        held,
    };
    assert_eq!(
        upgraded,
        [
            UpgradedCallback {
                sequence: 1,
                client: None,
                held: false
            },
            of_k(2, true),
            of_k(3, true),
        ]
    );
}

/// A callback after an upgrade: its sequence, its client, whether it waits (is not due yet).
#[derive(Debug, PartialEq)]
struct UpgradedCallback {
    sequence: i32,
    client: Option<String>,
    held: bool,
}

impl UpgradedCallback {
    fn from_row(row: &Row) -> Self {
        UpgradedCallback {
            sequence: row.get("sequence"),
            client: row.get("client"),
            held: row.get("held"),
        }
    }
}

#[tokio::test]
async fn a_callback_queued_during_a_send_goes_out_next_however_that_send_ends() {
    let app = TestApp::spawn(&[]).await;
    let client = "key:00000000-0000-4000-8000-000000000001";
    seed_backlog(&app, client, 1, 1, "https://93.184.216.34/hook").await;
    let core = app.instance().await;
    let claim = || async {
        core.callbacks
            .claim(lease_claim(10))
            .await
            .unwrap()
            .iter()
            .map(|c| c.sequence)
            .collect::<Vec<i32>>()
    };
    let queue_next = |sequence: i32| {
        let db = &app.db;
        async move {
            db.execute(
                "INSERT INTO job_callbacks (job_id, sequence, url, body)
                 SELECT job_id, $1, url, body FROM job_callbacks WHERE sequence = 1",
                &[&sequence],
            )
            .await
            .unwrap();
        }
    };
    let head: i64 = app
        .scalar("SELECT id FROM job_callbacks WHERE sequence = 1")
        .await;
    // Queued while the first is in flight (leased for 60 s): it waits for that send.
    assert_eq!(claim().await, [1]);
    queue_next(2).await;
    assert_eq!(claim().await, Vec::<i32>::new());
    // The send fails, to be retried sooner than its lease would have ended: the second waits
    // for the retry, not the old lease.
    let retry = Retry {
        id: head,
        delay: Duration::ZERO,
        error: "HTTP 503".to_owned(),
    };
    assert_eq!(core.callbacks.mark_retry(&[retry], 10).await.unwrap(), 0);
    assert_eq!(claim().await, [1]);
    // The second fell due with the retry, but the claim holds it to the first's new lease:
    // the next due is that lease's end, not now, so a sweep ending meanwhile does not wake
    // itself again and again for a callback it cannot take.
    let next = core.callbacks.next_due(10).await.unwrap();
    assert!(
        next.is_some_and(|left| left > Duration::from_secs(50) && left <= Duration::from_secs(60)),
        "the second waits for the first's lease (60 s): {next:?}"
    );
    // Delivered: the second is due at once.
    core.callbacks.mark_dispatched(&[head]).await.unwrap();
    assert_eq!(
        core.callbacks.next_due(10).await.unwrap(),
        Some(Duration::ZERO)
    );
    assert_eq!(claim().await, [2]);
}

/// Polls `received` every 50 ms until it holds `count` POSTs; how long that took, or `None`
/// after `within`.
async fn received_within(receiver: &Receiver, count: usize, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if receiver.received().len() >= count {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Waits until no wake is waiting on the queue or being handled (delayed ones aside).
async fn wakes_taken(app: &TestApp, queue: &str) {
    use aws_sdk_sqs::types::QueueAttributeName::{
        ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible,
    };
    let started = Instant::now();
    loop {
        let attributes = app
            .sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(ApproximateNumberOfMessages)
            .attribute_names(ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let counts = attributes.attributes().cloned().unwrap_or_default();
        let waiting: u64 = counts.values().map(|n| n.parse::<u64>().unwrap()).sum();
        if waiting == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "wakes left: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How soon a callback goes out on a wake.
const PROMPTLY: Duration = Duration::from_secs(5);

/// A server with a wake queue and no scheduled sweep at all (`OUTBOX_SWEEP_INTERVAL=0`, as
/// every test server): callbacks go out on the dispatcher's wakes alone, as on AWS. Two sends
/// at most a callback; a receiver that answers every POST, one that fails every one; a key.
struct Woken {
    app: TestApp,
    wake_queue: String,
    good: Receiver,
    failing: Receiver,
    key: TestKey,
}

impl Woken {
    async fn start() -> Woken {
        let wake_queue = wake_queue().await;
        let app = TestApp::spawn(&[
            ("ALLOW_PRIVATE_CALLBACKS", "true"),
            ("CALLBACK_WAKE_QUEUE_URL", wake_queue.as_str()),
            ("OUTBOX_MAX_ATTEMPTS", "2"),
        ])
        .await;
        let (good, failing) = (Receiver::start(0).await, Receiver::start(usize::MAX).await);
        let key = app.create_key("60/minute", 20).await;
        Woken {
            app,
            wake_queue,
            good,
            failing,
            key,
        }
    }

    /// A job calling back the good receiver, whose first callback came.
    async fn called_back_job(&self) -> String {
        let job = self
            .app
            .submit_with_callback("203.0.113.32", &self.key, &self.good.url("/hook"))
            .await;
        let first = received_within(&self.good, 1, PROMPTLY).await;
        assert!(
            first.is_some(),
            "the queued callback did not come within {PROMPTLY:?}"
        );
        job
    }
}

/// The sequences a receiver got, in order.
fn sent(receiver: &Receiver) -> Vec<i64> {
    receiver.received().iter().map(|r| r.sequence()).collect()
}

/// A job alone: its first callback, then a status change, each within seconds.
#[tokio::test]
async fn with_a_wake_queue_a_status_change_is_called_back_within_seconds() {
    let woken = Woken::start().await;
    let (app, good) = (&woken.app, &woken.good);
    let job = woken.called_back_job().await;
    // The admission's wake is spent, the sweep it started has ended (it read what waits: then
    // nothing), and no delayed wake is due: only the report's own wake can send the next one.
    wakes_taken(app, &woken.wake_queue).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    app.report_ok(&job, json!({ "status": "downloading" }))
        .await;
    let change = received_within(good, 2, PROMPTLY).await;
    assert!(
        change.is_some(),
        "the status change did not come within {PROMPTLY:?}"
    );
    assert_eq!(
        sequences(&good.received()),
        [(1, "queued"), (2, "downloading")]
    );
}

/// A job whose receiver keeps failing holds back its own later callbacks, not another job's of
/// the same key; its first is sent again once its backoff ends (a delayed wake), and the hold
/// ends with its attempts.
#[tokio::test]
async fn with_a_wake_queue_a_failing_receiver_holds_back_only_its_own_jobs_callbacks() {
    let woken = Woken::start().await;
    let (app, good, failing, key) = (&woken.app, &woken.good, &woken.failing, &woken.key);
    let job = woken.called_back_job().await;
    app.report_ok(&job, json!({ "status": "downloading" }))
        .await;
    assert!(received_within(good, 2, PROMPTLY).await.is_some());

    let held = app
        .submit_with_callback("203.0.113.31", key, &failing.url("/hook"))
        .await;
    assert!(received_within(failing, 1, PROMPTLY).await.is_some());
    let first_failure = Instant::now();
    app.report_ok(&held, json!({ "status": "downloading" }))
        .await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 10 }))
        .await;
    assert!(
        received_within(good, 3, PROMPTLY).await.is_some(),
        "the other job's status change was held back"
    );
    assert!(!sent(failing).contains(&2), "{:?}", sent(failing));
    // Its first callback is sent again when its backoff (5 s) ends, woken by a delayed wake.
    let retried = received_within(failing, 2, Duration::from_secs(5) + PROMPTLY).await;
    assert!(
        retried.is_some(),
        "no retry within its backoff and {PROMPTLY:?}"
    );
    assert!(
        first_failure.elapsed() >= Duration::from_secs(4),
        "retried after {:?}, before its backoff",
        first_failure.elapsed()
    );
    // That was its last attempt (OUTBOX_MAX_ATTEMPTS=2): the hold ends, and the job's next
    // callback goes out at once.
    assert!(received_within(failing, 3, PROMPTLY).await.is_some());
    assert_eq!(sent(failing), [1, 1, 2]);
    let stored = stored_callbacks(app, &held).await;
    assert_eq!(
        (stored[0].status.as_str(), stored[0].attempts),
        ("failed", 2),
        "{stored:?}"
    );
    assert_eq!(sent(good), [1, 2, 3], "the other job was never held");
}

/// A sandbox job's callbacks fall due on its simulated schedule (0–9 s): each sweep's wake for
/// the next one due sends the whole progression, with no scheduled sweep.
#[tokio::test]
async fn with_a_wake_queue_a_sandbox_job_calls_back_its_whole_progression() {
    let wake_queue = wake_queue().await;
    let app = TestApp::spawn(&[
        ("ALLOW_PRIVATE_CALLBACKS", "true"),
        ("CALLBACK_WAKE_QUEUE_URL", wake_queue.as_str()),
    ])
    .await;
    let receiver = Receiver::start(0).await;
    let key = app.create_key_of(KeyKind::Sandbox, "60/minute", 2).await;
    let job = app
        .submit_with_callback("203.0.113.33", &key, &receiver.url("/hook"))
        .await;
    let expected = stored_callbacks(&app, &job).await.len();
    assert!(
        expected >= 4,
        "a sandbox job queues its progression: {expected}"
    );
    let all = received_within(&receiver, expected, Duration::from_secs(16)).await;
    assert!(all.is_some(), "got {:?}", sequences(&receiver.received()));
    let received = receiver.received();
    assert_eq!(received.last().map(|r| r.status()), Some("completed"));
    let in_order: Vec<i64> = received.iter().map(|r| r.sequence()).collect();
    assert_eq!(in_order, (1..=expected as i64).collect::<Vec<_>>());
}
