//! Sandbox keys (`osr_test_…`): every check runs and answers as for real, but an admitted job
//! holds no capacity, never reaches the render queue, and completes on its own in about 10 s.

use std::time::{Duration, Instant};

use osurender_core::domain::key::KeyKind;
use osurender_core::usecases::janitor;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{accepted_job, header, problem, within_one_minute, TestApp};
use crate::support::callbacks::sweep_callbacks;
use crate::support::keys::TestKey;
use crate::support::replays::{render_form, unique_replay, valid_form};

async fn sandbox_key(app: &TestApp, render_limit: &str, max_active: u32) -> TestKey {
    let key = app
        .create_key_of(KeyKind::Sandbox, render_limit, max_active)
        .await;
    assert!(key.bearer.starts_with("Bearer osr_test_"), "{}", key.bearer);
    key
}

#[tokio::test]
async fn a_sandbox_keys_replay_and_options_are_checked_as_for_real() {
    let (app, key) = app_with_a_full_farm_and_a_sandbox_key().await;
    let broken = render_form(b"not a replay".to_vec(), "play.osr", &[]);
    problem(
        app.render_with("198.51.100.3", &key.bearer, broken).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_replay",
    )
    .await;
    let bad_option = render_form(unique_replay(), "play.osr", &[("bg_dim", "7")]);
    problem(
        app.render_with("198.51.100.3", &key.bearer, bad_option)
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
    )
    .await;
}

/// A server whose queue and farm hold one job each, and a sandbox key with two active jobs.
async fn app_with_a_full_farm_and_a_sandbox_key() -> (TestApp, TestKey) {
    let app = TestApp::spawn(&[("MAX_QUEUED", "1"), ("MAX_RENDERING", "1")]).await;
    let key = sandbox_key(&app, "60/minute", 2).await;
    (app, key)
}

#[tokio::test]
async fn a_sandbox_job_holds_no_capacity_and_is_never_queued() {
    let (app, key) = app_with_a_full_farm_and_a_sandbox_key().await;
    // A sandbox job first: it takes no place in the real queue (MAX_QUEUED 1), which still has
    // room for an anonymous job, and is full after it.
    let replay = unique_replay();
    let first = app
        .submit_with(
            "198.51.100.3",
            &key.bearer,
            render_form(replay.clone(), "play.osr", &[]),
        )
        .await;
    let real = accepted_job(app.render("198.51.100.1", valid_form()).await).await;
    problem(
        app.render("198.51.100.2", valid_form()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_full",
    )
    .await;

    // With the real queue full, a sandbox job is still admitted; the same replay again is a
    // duplicate while it runs; the key's max_active (2) holds.
    let duplicate = problem(
        app.render_with(
            "198.51.100.3",
            &key.bearer,
            render_form(replay, "play.osr", &[]),
        )
        .await,
        StatusCode::CONFLICT,
        "duplicate_replay",
    )
    .await;
    assert!(duplicate.to_string().contains(&first), "{duplicate}");
    let second = app
        .submit_with("198.51.100.3", &key.bearer, valid_form())
        .await;
    let full = app
        .render_with("198.51.100.3", &key.bearer, valid_form())
        .await;
    // A sandbox job's slot frees within its 9 s.
    assert_eq!(header(&full, "retry-after"), Some(9));
    problem(full, StatusCode::TOO_MANY_REQUESTS, "too_many_active_jobs").await;

    // Nothing of the sandbox reached the render queue or its outbox; the real job did.
    app.age_outbox().await;
    osurender_core::usecases::outbox::sweep(&app.instance().await)
        .await
        .unwrap();
    let delivered: Vec<String> = app
        .drain_queue()
        .await
        .iter()
        .map(|d| d.body["job_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(delivered, vec![real.clone()]);
    let sandbox_events = app
        .count(&format!(
            "SELECT count(*) FROM outbox_events WHERE job_id IN ('{first}', '{second}')"
        ))
        .await;
    assert_eq!(sandbox_events, 0);
    // Its replay is not kept (nothing renders it): only the real job's is stored.
    assert_eq!(
        app.replay_objects().await,
        vec![format!("replays/{real}.osr")]
    );
    // A sandbox job is the key's, listed as such.
    let job = app
        .get_with("198.51.100.9", &key.bearer, &format!("/v1/jobs/{first}"))
        .await;
    let job: Value = job.json().await.unwrap();
    assert_eq!(job["sandbox"], true);
    assert_eq!(app.job(&real).await["sandbox"], false);
}

#[tokio::test]
async fn a_sandbox_job_completes_on_its_own_with_progress_and_sample_artifacts() {
    let app = TestApp::spawn(&[]).await;
    let key = sandbox_key(&app, "60/minute", 1).await;
    let replay = unique_replay();
    let submitted = Instant::now();
    let id = app
        .submit_with(
            "203.0.113.50",
            &key.bearer,
            render_form(replay.clone(), "play.osr", &[]),
        )
        .await;
    let mut seen: Vec<(String, f64)> = Vec::new();
    let job = loop {
        let job = app.job(&id).await;
        let status = job["status"].as_str().unwrap().to_owned();
        let progress = job["progress"].as_f64().unwrap();
        if let Some((last, last_progress)) = seen.last() {
            let order = ["queued", "downloading", "rendering", "completed"];
            let rank = |s: &str| order.iter().position(|o| *o == s).unwrap();
            assert!(rank(&status) >= rank(last), "{last} -> {status}");
            if status == *last {
                assert!(progress >= *last_progress, "{status}: progress went back");
            }
        }
        if seen.last().map(|(s, p)| (s.as_str(), *p)) != Some((&status, progress)) {
            seen.push((status.clone(), progress));
        }
        if status == "completed" {
            break job;
        }
        // A loose bound: how soon it completes is checked by its own timestamps below.
        assert!(
            submitted.elapsed() < Duration::from_secs(30),
            "not completed after 30 s: {seen:?}"
        );
        // Meanwhile the job counts toward the key's max_active (1).
        if status == "rendering" && progress < 50.0 {
            problem(
                app.render_with("203.0.113.50", &key.bearer, valid_form())
                    .await,
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_active_jobs",
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // The polls see the states they fall into (a loaded machine may skip the 2 s ones); the
    // order was checked on the way, and the whole run takes 9 s of the job's own time.
    assert!(seen.len() >= 3, "too few states seen: {seen:?}");
    let took = chrono::DateTime::parse_from_rfc3339(job["updated_at"].as_str().unwrap()).unwrap()
        - chrono::DateTime::parse_from_rfc3339(job["created_at"].as_str().unwrap()).unwrap();
    assert!(
        took <= chrono::Duration::seconds(10),
        "completed after {took}"
    );
    assert!(
        seen.iter()
            .any(|(s, p)| s == "rendering" && *p > 0.0 && *p < 100.0),
        "no progress while rendering: {seen:?}"
    );
    assert_eq!(job["progress"], 100.0);
    assert_eq!(job["sandbox"], true);
    let video = job["artifacts"]["video_url"].as_str().unwrap();
    assert!(video.contains("sandbox/sample.mp4"), "{video}");
    let sample = reqwest::get(video).await.unwrap();
    assert_eq!(sample.status(), StatusCode::OK, "the sample link resolves");

    // The janitor leaves it be, and it no longer holds the key's slot or its replay.
    janitor::run(&app.instance().await).await.unwrap();
    assert_eq!(app.job(&id).await["status"], "completed");
    app.submit_with(
        "203.0.113.50",
        &key.bearer,
        render_form(replay, "play.osr", &[]),
    )
    .await;
}

#[tokio::test]
async fn a_sandbox_key_has_its_own_quota() {
    let app = TestApp::spawn(&[]).await;
    let sandbox = sandbox_key(&app, "2/minute", 20).await;
    let live = app.create_key("3/minute", 20).await;
    for remaining in [1, 0] {
        let response = app
            .render_with("192.0.2.77", &sandbox.bearer, valid_form())
            .await;
        assert_eq!(header(&response, "x-ratelimit-limit"), Some(2));
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining));
        accepted_job(response).await;
    }
    problem(
        app.render_with("192.0.2.77", &sandbox.bearer, valid_form())
            .await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    )
    .await;
    // The live key and the address, from the same place, have theirs untouched.
    let response = app
        .render_with("192.0.2.77", &live.bearer, valid_form())
        .await;
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some(2));
    accepted_job(response).await;
    let response = app.render("192.0.2.77", valid_form()).await;
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some(4));
    accepted_job(response).await;
}

#[tokio::test]
async fn a_sandbox_job_can_fail_and_shows_what_a_real_one_would_on_the_way() {
    let app = TestApp::spawn(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let receiver = crate::support::callbacks::Receiver::start(0).await;
    let key = sandbox_key(&app, "60/minute", 5).await;
    // Two real jobs ahead: a sandbox job shows the place a real one would take.
    app.submit("198.51.100.140").await;
    app.submit("198.51.100.141").await;
    let form = render_form(
        unique_replay(),
        "play.osr",
        &[
            ("sandbox_outcome", "failed"),
            ("callback_url", &receiver.url("/hook")),
        ],
    );
    let failing = app.submit_with("198.51.100.142", &key.bearer, form).await;
    let completing = app
        .submit_with("198.51.100.142", &key.bearer, valid_form())
        .await;
    let shown = |job: &str| {
        let path = format!("/v1/jobs/{job}");
        let app = &app;
        let bearer = key.bearer.clone();
        async move {
            let response = app.get_with("198.51.100.143", &bearer, &path).await;
            response.json::<Value>().await.unwrap()
        }
    };
    let young = shown(&failing).await;
    assert_eq!(young["status"], "queued", "{young}");
    assert_eq!(young["queue_position"], 3, "{young}");
    assert!(young["estimated_start"].as_str().is_some(), "{young}");
    assert_eq!(
        (&young["error"], &young["error_code"]),
        (&Value::Null, &Value::Null)
    );
    // The status filter matches what the jobs show.
    let listed = |status: &'static str| {
        let app = &app;
        let key = &key;
        async move {
            let page = app.list_as(key, &format!("?status={status}")).await;
            crate::support::jobs::item_ids(&page)
        }
    };
    assert_eq!(
        listed("queued").await,
        [completing.clone(), failing.clone()]
    );
    assert!(listed("completed").await.is_empty());

    tokio::time::sleep(Duration::from_millis(9_300)).await;
    let ended = shown(&failing).await;
    assert_eq!(
        (&ended["status"], &ended["error_code"], &ended["retryable"]),
        (
            &Value::from("failed"),
            &Value::from("beatmap_not_found"),
            &Value::from(false)
        )
    );
    assert!(
        ended["error"].as_str().unwrap().contains("sample failure"),
        "{ended}"
    );
    assert_eq!(ended["artifacts"], Value::Null);
    assert_eq!(shown(&completing).await["status"], "completed");
    assert_eq!(listed("failed").await, [failing]);
    assert_eq!(listed("completed").await, [completing]);
    assert!(listed("queued").await.is_empty());

    // Its callbacks end as it does.
    crate::support::callbacks::sweep_callbacks(&app.instance().await).await;
    let last = receiver.received().pop().unwrap();
    assert_eq!(
        (&last.json["status"], &last.json["error_code"]),
        (&Value::from("failed"), &Value::from("beatmap_not_found"))
    );
}

/// Only a sandbox key chooses how its job ends, and only as an outcome it knows.
#[tokio::test]
async fn only_a_sandbox_key_chooses_how_its_job_ends() {
    let app = TestApp::spawn(&[]).await;
    let key = sandbox_key(&app, "60/minute", 5).await;
    let live = app.create_key("60/minute", 5).await;
    let form = render_form(
        unique_replay(),
        "play.osr",
        &[("sandbox_outcome", "failed")],
    );
    let refused = app.render_with("198.51.100.144", &live.bearer, form).await;
    problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    let form = render_form(
        unique_replay(),
        "play.osr",
        &[("sandbox_outcome", "exploded")],
    );
    let refused = app.render_with("198.51.100.144", &key.bearer, form).await;
    problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
}

/// A sandbox key's schedules keep to the bound on a key's undelivered callbacks as a live key's
/// updates do: past `MAX_PENDING_CALLBACKS_PER_KEY`, a schedule's progress-only step is not
/// queued; its status changes are, in order and numbered without a gap.
#[tokio::test]
async fn a_sandbox_keys_schedules_keep_to_the_pending_callback_bound() {
    let app = TestApp::spawn(&[("MAX_PENDING_CALLBACKS_PER_KEY", "10")]).await;
    // The dispatcher records its bound for the database as it claims.
    assert_eq!(sweep_callbacks(&app.instance().await).await, 0);
    let key = sandbox_key(&app, "600/minute", 20).await;
    let mut jobs = Vec::new();
    for _ in 0..15 {
        let job = app
            .submit_with_callback("198.51.100.150", &key, "https://93.184.216.34/hook")
            .await;
        jobs.push(job);
    }
    let whole = [
        "queued",
        "downloading",
        "rendering",
        "rendering",
        "completed",
    ];
    let coalesced = ["queued", "downloading", "rendering", "completed"];
    for (i, job) in jobs.iter().enumerate() {
        let statuses: Vec<String> = app
            .column_with(
                "SELECT body ->> 'status' FROM job_callbacks \
                 WHERE job_id = $1::text::uuid ORDER BY sequence",
                &[job],
            )
            .await;
        let sequences: Vec<i32> = app
            .column_with(
                "SELECT sequence FROM job_callbacks \
                 WHERE job_id = $1::text::uuid ORDER BY sequence",
                &[job],
            )
            .await;
        // Two schedules fit whole under the bound (5 + 5); from then on, only status changes.
        let expected: &[&str] = if i < 2 { &whole } else { &coalesced };
        assert_eq!(statuses, expected, "job {i}");
        assert_eq!(sequences, (1..=expected.len() as i32).collect::<Vec<_>>());
        let recorded: i32 = app
            .scalar_with(
                "SELECT callback_seq FROM jobs WHERE id = $1::text::uuid",
                &[job],
            )
            .await;
        assert_eq!(
            recorded,
            expected.len() as i32,
            "job {i}: its last sequence"
        );
    }
    let pending = "SELECT count(*) FROM job_callbacks WHERE status = 'pending'";
    assert_eq!(app.count(pending).await, 5 + 5 + 13 * 4);
}

/// A sandbox key rehearses what a bot must handle: every failure code a worker reports, and
/// the refusals of a busy, paused or spent service, each answered as the live service would
/// (status, code, `Retry-After`), none of them spending the key's quota but the 429's window.
#[tokio::test]
async fn a_sandbox_key_rehearses_every_failure_and_the_services_refusals() {
    let app = TestApp::spawn(&[]).await;
    let key = sandbox_key(&app, "60/minute", 100).await;
    // The key's window counts in minutes: the test's 11 s fall in one.
    within_one_minute().await;
    let ip = "198.51.100.145";
    let codes = [
        "skin_not_found",
        "timed_out",
        "worker_stopped",
        "replay_unrenderable",
    ];
    let mut jobs = Vec::new();
    for code in codes {
        let form = render_form(unique_replay(), "play.osr", &[("sandbox_outcome", code)]);
        jobs.push(accepted_job(app.render_with(ip, &key.bearer, form).await).await);
    }
    // A sandbox job ends within 10 s of its admission.
    tokio::time::sleep(Duration::from_millis(9_500)).await;
    for (job, code) in jobs.iter().zip(codes) {
        let read = app.job(job).await;
        let retryable = matches!(code, "timed_out" | "worker_stopped");
        assert_eq!(read["status"], "failed", "{read}");
        assert_eq!(read["error_code"], code, "{read}");
        assert_eq!(read["retryable"], retryable, "{read}");
    }
    for (outcome, status, retry_after) in [
        ("queue_full", StatusCode::SERVICE_UNAVAILABLE, Some(30)),
        (
            "render_jobs_paused",
            StatusCode::SERVICE_UNAVAILABLE,
            Some(60),
        ),
    ] {
        let form = render_form(unique_replay(), "play.osr", &[("sandbox_outcome", outcome)]);
        let refused = app.render_with(ip, &key.bearer, form).await;
        assert_eq!(header(&refused, "retry-after"), retry_after, "{outcome}");
        // A refusal for the service's state gives its hit back, as a live one does.
        assert_eq!(
            header(&refused, "x-ratelimit-remaining"),
            Some(56),
            "{outcome}"
        );
        problem(refused, status, outcome).await;
    }
    let form = render_form(
        unique_replay(),
        "play.osr",
        &[("sandbox_outcome", "rate_limited")],
    );
    let refused = app.render_with(ip, &key.bearer, form).await;
    let retry_after = header(&refused, "retry-after").expect("Retry-After");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some(0));
    problem(refused, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // The rehearsal spent nothing: the key's next render still has its quota.
    let admitted = app
        .render_with(
            ip,
            &key.bearer,
            render_form(unique_replay(), "play.osr", &[]),
        )
        .await;
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(55));
}
