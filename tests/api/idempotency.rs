//! `Idempotency-Key`, duplicate replays, honest `Retry-After`, the IETF rate-limit
//! headers and `estimated_start`, over HTTP against real Postgres and the AWS stand-in.

use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use reqwest::multipart::Form;
use reqwest::{Response, StatusCode};
use serde_json::Value;

use crate::support::app::{header, problem, within_one_minute, TestApp};
use crate::support::keys::TestKey;
use crate::support::replays::{fixture, render_form, unique_replay, valid_form};
use crate::support::skins::{skin, upload_form, V1};

/// Long windows keep counting tests clear of a window boundary.
const ROOMY: &[(&str, &str)] = &[("RATE_LIMIT_RENDER", "1000/hour")];

impl TestApp {
    async fn render_keyed(&self, client_ip: &str, key: &str, form: Form) -> Response {
        self.http
            .post(self.url("/v1/render"))
            .header("CF-Connecting-IP", client_ip)
            .header("Idempotency-Key", key)
            .multipart(form)
            .send()
            .await
            .expect("request completes")
    }

    /// `count` jobs completed `ago_secs` ago, each `turnaround_secs` after submission.
    /// `count` real renders completed `ago_secs` ago, each of `cost` render-seconds that kept a
    /// slot busy `busy_secs`: what the farm's speed is measured from.
    async fn completed_history(&self, count: i64, ago_secs: f64, cost: f32, busy_secs: f64) {
        self.db
            .execute(
                "INSERT INTO jobs (id, status, client_ip, skin, config, replay_key, created_at,
                                   updated_at, started_at, render_cost)
                 SELECT gen_random_uuid(), 'completed', 'history', 'Default', '{}', 'x',
                        now() - ($2::float8 + $3::float8 + 1) * interval '1 second',
                        now() - $2::float8 * interval '1 second',
                        now() - ($2::float8 + $3::float8) * interval '1 second', $4
                   FROM generate_series(1, $1::int8)",
                &[&count, &ago_secs, &busy_secs, &cost],
            )
            .await
            .unwrap();
    }

    /// Renders in flight, each of `cost` render-seconds, started `elapsed` seconds ago.
    async fn rendering(&self, elapsed: &[f64], cost: f32) {
        for secs in elapsed {
            self.db
                .execute(
                    "INSERT INTO jobs (id, status, client_ip, skin, config, replay_key,
                                       started_at, released_at, render_cost)
                     VALUES (gen_random_uuid(), 'rendering', 'busy', 'Default', '{}', 'x',
                             now() - $1::float8 * interval '1 second', now(), $2)",
                    &[secs, &cost],
                )
                .await
                .unwrap();
        }
    }
}

fn location(response: &Response) -> String {
    response.headers()["location"].to_str().unwrap().to_owned()
}

fn text_header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test]
async fn a_retry_gets_the_original_response_and_spends_no_quota_or_slot() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_RENDER", "3/hour"),
        ("MAX_ACTIVE_JOBS_PER_IP", "1"),
    ])
    .await;
    let ip = "203.0.113.101";
    let replay = unique_replay();
    let first = app
        .render_keyed(ip, "retry-1", render_form(replay.clone(), "a.osr", &[]))
        .await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some(2));
    assert_eq!(text_header(&first, "idempotent-replayed"), None);
    let first_location = location(&first);
    let first_body: Value = first.json().await.unwrap();

    // Another multipart framing (boundary, file name) of the same request: the same request.
    for _ in 0..3 {
        let retry = app
            .render_keyed(ip, "retry-1", render_form(replay.clone(), "b.osr", &[]))
            .await;
        assert_eq!(
            retry.status(),
            StatusCode::ACCEPTED,
            "a slot was not needed"
        );
        assert_eq!(location(&retry), first_location);
        assert_replayed_at_no_quota(&retry);
        let body: Value = retry.json().await.unwrap();
        assert_eq!(body, first_body);
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 1);
    // The quota shows one request spent: the next new one finds no slot (429), which, a
    // refusal for the service's state, gives its own hit back: 2 left, as before it.
    let next = app.render(ip, valid_form()).await;
    assert_eq!(header(&next, "x-ratelimit-remaining"), Some(2));
    problem(next, StatusCode::TOO_MANY_REQUESTS, "too_many_active_jobs").await;
}

#[tokio::test]
async fn the_same_key_with_another_request_is_422_and_keys_are_per_client() {
    let app = TestApp::spawn(ROOMY).await;
    let replay = unique_replay();
    let form = |fields: &[(&str, &str)]| render_form(replay.clone(), "a.osr", fields);
    let first = app.render_keyed("203.0.113.110", "k", form(&[])).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first_location = location(&first);

    let other_replay = app.render_keyed("203.0.113.110", "k", valid_form()).await;
    problem(
        other_replay,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    )
    .await;
    let other_options = app
        .render_keyed("203.0.113.110", "k", form(&[("resolution", "720p")]))
        .await;
    problem(
        other_options,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    )
    .await;

    // Another client's same key is its own: a job of its own.
    let elsewhere = app.render_keyed("203.0.113.111", "k", form(&[])).await;
    assert_eq!(elsewhere.status(), StatusCode::ACCEPTED);
    assert_eq!(text_header(&elsewhere, "idempotent-replayed"), None);
    assert_ne!(location(&elsewhere), first_location);
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 2);
}

#[tokio::test]
async fn malformed_keys_are_refused_before_any_state() {
    let app = TestApp::spawn(&[]).await;
    let ip = "203.0.113.120";
    for bad in ["x".repeat(256), "tab\there".to_owned()] {
        let response = app.render_keyed(ip, &bad, valid_form()).await;
        assert_eq!(header(&response, "x-ratelimit-remaining"), None);
        problem(response, StatusCode::BAD_REQUEST, "invalid_idempotency_key").await;
    }
    // An earlier step still decides first.
    let corrupt = render_form(fixture("corrupt_truncated.osr"), "c.osr", &[]);
    problem(
        app.render_keyed(ip, &"x".repeat(300), corrupt).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_replay",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
    let admitted = app.render_keyed(ip, &"x".repeat(255), valid_form()).await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(4));
}

#[tokio::test]
async fn a_refused_attempt_releases_its_key_for_a_real_retry() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "1"), ROOMY[0]]).await;
    let ip = "203.0.113.130";
    let holder = app.render(ip, valid_form()).await;
    assert_eq!(holder.status(), StatusCode::ACCEPTED);
    let holder_id = location(&holder).rsplit('/').next().unwrap().to_owned();

    let replay = unique_replay();
    let refused = app
        .render_keyed(ip, "later", render_form(replay.clone(), "a.osr", &[]))
        .await;
    assert!(header(&refused, "retry-after").is_some());
    problem(
        refused,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_jobs",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);

    app.db
        .execute(
            "UPDATE jobs SET status = 'completed' WHERE id = $1::text::uuid",
            &[&holder_id],
        )
        .await
        .unwrap();
    let retried = app
        .render_keyed(ip, "later", render_form(replay, "a.osr", &[]))
        .await;
    assert_eq!(retried.status(), StatusCode::ACCEPTED);
    assert_eq!(text_header(&retried, "idempotent-replayed"), None);
}

/// Requests with one key that arrive together all pass the read before the rate limit (no
/// claim is written before it), so each is counted; of their claims one wins, and the others
/// wait for its job and answer with it.
#[tokio::test]
async fn concurrent_retries_with_one_key_create_one_job() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = "203.0.113.140";
    let replay = unique_replay();
    let responses = join_all(
        (0..20).map(|_| app.render_keyed(ip, "burst", render_form(replay.clone(), "a.osr", &[]))),
    )
    .await;
    let mut locations = Vec::new();
    let mut fresh = 0;
    for response in &responses {
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        locations.push(location(response));
        if text_header(response, "idempotent-replayed").is_none() {
            fresh += 1;
        }
    }
    locations.dedup();
    assert_eq!(locations.len(), 1, "one job id for all: {locations:?}");
    assert_eq!(fresh, 1, "one admission; the others replayed it");
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 1);
    assert_eq!(app.count("SELECT count(*) FROM outbox_events").await, 1);
    assert_eq!(app.replay_objects().await.len(), 1, "one replay stored");
}

/// A retry that finds its key held by a request still running waits for that request's
/// outcome before the rate limit, reading only, and answers with its job at no quota.
#[tokio::test]
async fn a_retry_meeting_its_key_in_progress_waits_for_its_job_at_no_quota() {
    let app = TestApp::spawn(&[("RATE_LIMIT_RENDER", "5/hour"), ("DB_TIMEOUT_MS", "20000")]).await;
    let ip = "203.0.113.145";
    let replay = unique_replay();
    // The first request claims its key, stores its replay, and waits for the client's lock.
    let holder = app.hold_client_lock(ip).await;
    let first = {
        let request = app
            .http
            .post(app.url("/v1/render"))
            .header("CF-Connecting-IP", ip)
            .header("Idempotency-Key", "held")
            .multipart(render_form(replay.clone(), "a.osr", &[]));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    app.until_a_request_waits_for_a_lock("the first request never reached admit_job")
        .await;
    let in_progress = "SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'";
    assert_eq!(
        app.count(in_progress).await,
        1,
        "the first request holds its key"
    );

    let retry = {
        let app_url = app.url("/v1/render");
        let request = app
            .http
            .post(app_url)
            .header("CF-Connecting-IP", ip)
            .header("Idempotency-Key", "held")
            .multipart(render_form(replay.clone(), "b.osr", &[]));
        tokio::spawn(async move { request.send().await.unwrap() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !retry.is_finished(),
        "the retry waits for the first request"
    );
    holder.batch_execute("COMMIT").await.unwrap();

    let first = first.await.unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some(4));
    let retry = retry.await.unwrap();
    assert_eq!(retry.status(), StatusCode::ACCEPTED);
    assert_eq!(location(&retry), location(&first));
    assert_replayed_at_no_quota(&retry);
    let next = app.render(ip, valid_form()).await;
    assert_eq!(
        header(&next, "x-ratelimit-remaining"),
        Some(3),
        "the retry spent none"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE client_ip = '203.0.113.145'")
            .await,
        2
    );
}

/// The rate limit shields the database: renders and skin uploads over it with fresh keys have
/// only read their keys. Not one claim is written (and none released), counted by a trigger on
/// the table.
#[tokio::test]
async fn over_the_rate_limit_fresh_keys_write_no_claim() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_RENDER", "1/hour"),
        ("RATE_LIMIT_SKINS_UPLOAD", "1/hour"),
    ])
    .await;
    let ip = "203.0.113.146";
    let first = app.render_keyed(ip, "first", valid_form()).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let upload = |key: String, marker: String| {
        app.http
            .post(app.url(V1))
            .header("CF-Connecting-IP", ip)
            .header("Idempotency-Key", key)
            .multipart(upload_form(skin(&marker), &format!("{marker}.osk"), None))
            .send()
    };
    let skin_first = upload("first".into(), "First".into()).await.unwrap();
    assert_eq!(skin_first.status(), StatusCode::CREATED);
    app.db
        .batch_execute(
            "CREATE TABLE test_claim_writes (op text NOT NULL);
             CREATE FUNCTION test_count_claim_write() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO test_claim_writes VALUES (TG_OP); RETURN NULL; END $$;
             CREATE TRIGGER test_count_claim_writes BEFORE INSERT OR UPDATE OR DELETE
               ON idempotency_keys FOR EACH STATEMENT EXECUTE FUNCTION test_count_claim_write();",
        )
        .await
        .unwrap();
    let over = join_all((0..50).map(|i| {
        let key = format!("fresh-{i}");
        let app = &app;
        async move {
            let form = render_form(unique_replay(), "a.osr", &[]);
            app.render_keyed(ip, &key, form).await
        }
    }))
    .await;
    for response in over {
        problem(response, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    }
    let uploads = join_all((0..20).map(|i| upload(format!("fresh-{i}"), format!("Over{i}")))).await;
    for response in uploads {
        problem(
            response.unwrap(),
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
        )
        .await;
    }
    assert_eq!(app.count("SELECT count(*) FROM test_claim_writes").await, 0);
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys").await,
        2,
        "the firsts'"
    );
}

#[tokio::test]
async fn skin_uploads_are_idempotent_too() {
    let app = TestApp::spawn(&[("RATE_LIMIT_SKINS_UPLOAD", "1000/hour")]).await;
    let ip = "203.0.113.150";
    let upload = |key: &'static str, bytes: Vec<u8>| {
        app.http
            .post(app.url(V1))
            .header("CF-Connecting-IP", ip)
            .header("Idempotency-Key", key)
            .multipart(upload_form(bytes, "Mine.osk", None))
            .send()
    };
    let bytes = skin("mine");
    let first = upload("skin-1", bytes.clone()).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body: Value = first.json().await.unwrap();
    let retries = join_all((0..5).map(|_| upload("skin-1", bytes.clone()))).await;
    for retry in retries {
        let retry = retry.unwrap();
        assert_eq!(retry.status(), StatusCode::CREATED, "not skin_exists");
        assert_eq!(
            text_header(&retry, "idempotent-replayed").as_deref(),
            Some("true")
        );
        assert_eq!(retry.json::<Value>().await.unwrap(), first_body);
    }
    problem(
        upload("skin-1", skin("other")).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_key_reused",
    )
    .await;
    // Without the key a second upload of the name is the conflict it always was.
    problem(
        app.upload_skin(V1, ip, upload_form(bytes, "Mine.osk", None))
            .await,
        StatusCode::CONFLICT,
        "skin_exists",
    )
    .await;
}

/// A key's client (which a 409 names its job to; an anonymous one it names none:
/// fairness.rs) that rendered a replay: its key renders 5 a minute, and the window starts with
/// room for the whole test.
struct Rendered {
    app: TestApp,
    key: TestKey,
    replay: Vec<u8>,
    /// The first render's `Location`, and its job.
    location: String,
    job_id: String,
    /// The first render's `X-RateLimit-Remaining`.
    remaining: Option<u64>,
}

const RENDERED_IP: &str = "203.0.113.160";

impl Rendered {
    async fn start() -> Rendered {
        let app = TestApp::spawn(&[]).await;
        let key = app.create_key("5/minute", 5).await;
        within_one_minute().await;
        let replay = unique_replay();
        let first = app
            .render_with(
                RENDERED_IP,
                &key.bearer,
                render_form(replay.clone(), "a.osr", &[]),
            )
            .await;
        assert_eq!(first.status(), StatusCode::ACCEPTED);
        let location = location(&first);
        let job_id = location.rsplit('/').next().unwrap().to_owned();
        Rendered {
            remaining: header(&first, "x-ratelimit-remaining"),
            app,
            key,
            replay,
            location,
            job_id,
        }
    }

    /// `POST /v1/render` of `form` by the same client.
    async fn render(&self, form: Form) -> Response {
        self.app
            .render_with(RENDERED_IP, &self.key.bearer, form)
            .await
    }

    /// The first render's job's status set to `status`.
    async fn set_status(&self, status: &str) {
        self.app
            .db
            .execute(
                "UPDATE jobs SET status = $2::text::job_status WHERE id = $1::text::uuid",
                &[&self.job_id, &status],
            )
            .await
            .unwrap();
    }
}

/// Other options, same replay: still the job this client has, and no quota read.
#[tokio::test]
async fn a_duplicate_replay_is_a_409_naming_the_clients_job_before_the_rate_limit() {
    let rendered = Rendered::start().await;
    assert_eq!(rendered.remaining, Some(4));
    for fields in [&[][..], &[("skin", "Other")][..]] {
        let again = rendered
            .render(render_form(rendered.replay.clone(), "b.osr", fields))
            .await;
        assert_eq!(location(&again), rendered.location);
        assert_eq!(
            header(&again, "x-ratelimit-remaining"),
            None,
            "no quota read"
        );
        let body = problem(again, StatusCode::CONFLICT, "duplicate_replay").await;
        assert_eq!(body["job_id"], rendered.job_id.as_str());
    }
    let next = rendered.render(valid_form()).await;
    assert_eq!(header(&next, "x-ratelimit-remaining"), Some(3));
}

#[tokio::test]
async fn another_clients_submission_of_the_same_replay_is_its_own_job() {
    let rendered = Rendered::start().await;
    let elsewhere = rendered
        .app
        .render(
            "203.0.113.161",
            render_form(rendered.replay.clone(), "a.osr", &[]),
        )
        .await;
    assert_eq!(elsewhere.status(), StatusCode::ACCEPTED);
}

/// Rendering is still active; completed is not.
#[tokio::test]
async fn a_replay_is_a_duplicate_while_its_job_renders_and_not_once_it_completed() {
    let rendered = Rendered::start().await;
    rendered.set_status("rendering").await;
    problem(
        rendered
            .render(render_form(rendered.replay.clone(), "a.osr", &[]))
            .await,
        StatusCode::CONFLICT,
        "duplicate_replay",
    )
    .await;
    rendered.set_status("completed").await;
    let rerender = rendered
        .render(render_form(rendered.replay.clone(), "a.osr", &[]))
        .await;
    assert_eq!(rerender.status(), StatusCode::ACCEPTED);
    assert_ne!(location(&rerender), rendered.location);
}

#[tokio::test]
async fn concurrent_duplicates_create_one_job() {
    let app = TestApp::spawn(&[]).await;
    // A key's client: its 409s name the job (fairness.rs has an anonymous one's).
    let key = app.create_key("1000/hour", 50).await;
    let ip = "203.0.113.170";
    let replay = unique_replay();
    let responses = join_all(
        (0..20)
            .map(|_| app.render_with(ip, &key.bearer, render_form(replay.clone(), "a.osr", &[]))),
    )
    .await;
    let admitted: Vec<String> = responses
        .iter()
        .filter(|r| r.status() == StatusCode::ACCEPTED)
        .map(location)
        .collect();
    assert_eq!(admitted.len(), 1, "exactly one job");
    for response in responses {
        if response.status() != StatusCode::ACCEPTED {
            assert_eq!(location(&response), admitted[0]);
            problem(response, StatusCode::CONFLICT, "duplicate_replay").await;
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 1);
    // Refused re-checks delete their replays again: only the job's remains.
    assert_eq!(app.replay_objects().await.len(), 1);
}

#[tokio::test]
async fn capacity_refusals_estimate_retry_after_from_the_farm() {
    // Two slots, renders of 100 render-seconds 40 s and 20 s in: at the configured speed (1)
    // the first slot frees in 60 s.
    let app = TestApp::spawn(&[("MAX_QUEUED", "0"), ("RENDER_SLOTS", "2")]).await;
    app.rendering(&[40.0, 20.0], 100.0).await;
    let full = app.render("203.0.113.180", valid_form()).await;
    let retry_after = header(&full, "retry-after").unwrap();
    assert!((59..=61).contains(&retry_after), "{retry_after}");
    problem(full, StatusCode::SERVICE_UNAVAILABLE, "queue_full").await;

    // Measured speed wins once there is enough history: 200 render-seconds in 100 s a slot,
    // speed 2, so the first render ends in 50 − 40 = 10 s.
    app.completed_history(5, 60.0, 200.0, 100.0).await;
    let full = app.render("203.0.113.181", valid_form()).await;
    let retry_after = header(&full, "retry-after").unwrap();
    assert!((9..=11).contains(&retry_after), "{retry_after}");
    problem(full, StatusCode::SERVICE_UNAVAILABLE, "queue_full").await;

    let app = TestApp::spawn(&[("MAX_RENDERING", "0"), ("RENDER_SLOTS", "2")]).await;
    app.rendering(&[40.0, 90.0], 100.0).await;
    let busy = app.render("203.0.113.182", valid_form()).await;
    let retry_after = header(&busy, "retry-after").unwrap();
    assert!((10..=12).contains(&retry_after), "{retry_after}");
    problem(busy, StatusCode::SERVICE_UNAVAILABLE, "render_capacity").await;

    // The client's job was released to a free slot: it should be done in its render time,
    // the replay's length plus the overhead (RENDER_OVERHEAD_SECS, 20).
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "1")]).await;
    let ip = "203.0.113.183";
    let first = app.render(ip, valid_form()).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let job: Value = first.json().await.unwrap();
    let job = app.job(job["job_id"].as_str().unwrap()).await;
    let render_secs = job["replay"]["length_ms"].as_f64().unwrap() / 1000.0 + 20.0;
    let limited = app.render(ip, valid_form()).await;
    let retry_after = header(&limited, "retry-after").unwrap() as f64;
    assert!(
        (retry_after - render_secs).abs() <= 2.0,
        "{retry_after} vs {render_secs}"
    );
    problem(
        limited,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_jobs",
    )
    .await;
}

#[tokio::test]
async fn ietf_rate_limit_headers_accompany_the_x_ones() {
    let app = TestApp::spawn(&[("RATE_LIMIT_RENDER", "2/hour")]).await;
    let ip = "203.0.113.190";
    for remaining in [1, 0] {
        let response = app.render(ip, valid_form()).await;
        assert_eq!(
            text_header(&response, "ratelimit-policy").as_deref(),
            Some("\"render\";q=2;w=3600")
        );
        let current = text_header(&response, "ratelimit").unwrap();
        let reset = header(&response, "x-ratelimit-reset").unwrap();
        let t: u64 = current
            .strip_prefix(&format!("\"render\";r={remaining};t="))
            .unwrap_or_else(|| panic!("{current}"))
            .parse()
            .unwrap();
        assert!(reset.abs_diff(epoch_now() + t) <= 1, "{current} vs {reset}");
    }
    let limited = app.render(ip, valid_form()).await;
    let retry_after = header(&limited, "retry-after").unwrap();
    let current = text_header(&limited, "ratelimit").unwrap();
    assert_eq!(current, format!("\"render\";r=0;t={retry_after}"));
    problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
}

#[tokio::test]
async fn queued_jobs_show_their_position_and_estimated_start() {
    // One slot, busy with a render of 100 render-seconds 40 s in: it frees in 60 s.
    let app = TestApp::spawn(&[
        ("RENDER_SLOTS", "1"),
        ("RELEASE_AHEAD", "0"),
        ("RENDER_OVERHEAD_SECS", "0"),
        ROOMY[0],
    ])
    .await;
    app.rendering(&[40.0], 100.0).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let response = app
            .render(&format!("203.0.113.{}", 200 + i), valid_form())
            .await;
        let body: Value = response.json().await.unwrap();
        ids.push(body["job_id"].as_str().unwrap().to_owned());
    }
    let first = app.job(&ids[0]).await;
    let render = first["replay"]["length_ms"].as_f64().unwrap() / 1000.0;
    let within = |job: &Value, position: i64, in_secs: f64| {
        assert_eq!(job["queue_position"], position, "{job}");
        let start: DateTime<Utc> = job["estimated_start"].as_str().unwrap().parse().unwrap();
        let expected = Utc::now() + chrono::Duration::milliseconds((in_secs * 1000.0) as i64);
        assert!(
            (start - expected).num_milliseconds().abs() < 2_000,
            "{start} vs {expected}"
        );
    };
    // Three clients, one job each, in fair order: the second starts after the first renders.
    within(&first, 1, 60.0);
    within(&app.job(&ids[1]).await, 2, 60.0 + render);

    // Measured speed wins once there is enough of it: speed 2 halves every time left.
    app.completed_history(5, 60.0, 200.0, 100.0).await;
    within(&app.job(&ids[2]).await, 3, 10.0 + render);

    app.db
        .execute(
            "UPDATE jobs SET status = 'rendering' WHERE id = $1::text::uuid",
            &[&ids[0]],
        )
        .await
        .unwrap();
    let rendering = app.job(&ids[0]).await;
    assert!(rendering["queue_position"].is_null());
    assert!(rendering["estimated_start"].is_null());
}

/// A keyed admission costs one round trip more than an unkeyed one (DESIGN.md §5): the claim,
/// written only after the rate limit; the key's read is pipelined with the occupancy read, so
/// a replayed retry costs that one read and touches no AWS service.
#[tokio::test]
async fn a_keyed_admission_stays_within_the_round_trip_budget() {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    let warm_up = app
        .render_keyed("203.0.113.210", "warm", valid_form())
        .await;
    assert_eq!(warm_up.status(), StatusCode::ACCEPTED);

    let replay = unique_replay();
    proxies.reset();
    let admitted = app
        .render_keyed(
            "203.0.113.211",
            "budget",
            render_form(replay.clone(), "a.osr", &[]),
        )
        .await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    let pg = proxies.postgres.counts();
    assert!(pg.pg_round_trips <= 4, "{} round trips", pg.pg_round_trips);
    assert_eq!(pg.connections, 0, "the pooled connection is reused");

    proxies.reset();
    let retry = app
        .render_keyed("203.0.113.211", "budget", render_form(replay, "a.osr", &[]))
        .await;
    assert_eq!(
        text_header(&retry, "idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(proxies.postgres.counts().pg_round_trips, 1);
    assert_eq!(proxies.aws.counts().http_requests(), 0);
}

/// A retry answered from its key's stored response: marked so, and without reading the quota.
fn assert_replayed_at_no_quota(retry: &reqwest::Response) {
    assert_eq!(
        text_header(retry, "idempotent-replayed").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(retry, "x-ratelimit-remaining"),
        None,
        "no quota read"
    );
}
