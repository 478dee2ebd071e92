//! `POST /v1/render`: every admission step, its precedence, and the invariants under load.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use reqwest::StatusCode;

use crate::support::app::{header, problem, within_one_minute, TestApp};
use crate::support::replays::{fixture, form_without_replay, render_form, valid_form};

/// Long windows keep counting tests clear of a window boundary.
const ROOMY: &[(&str, &str)] = &[("RATE_LIMIT_RENDER", "1000/hour")];

#[tokio::test]
async fn admits_a_valid_replay_and_records_job_outbox_and_object() {
    let app = TestApp::spawn(&[]).await;
    let form = render_form(fixture("valid_0.osr"), "play.osr", &[]);
    let response = app.render("203.0.113.7", form).await;

    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(header(&response, "x-ratelimit-limit"), Some(5));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some(4));
    let reset = header(&response, "x-ratelimit-reset").unwrap();
    assert_eq!(reset % 60, 0, "a 5/minute window ends on a minute");
    let body: serde_json::Value = response.json().await.unwrap();
    let job_id = body["job_id"].as_str().unwrap();
    assert_eq!(location, app.url(&format!("/v1/jobs/{job_id}")));
    assert_eq!(body["status"], "queued");
    assert_eq!(body["links"]["status"], location);

    let job = app.job_row(job_id).await;
    assert_eq!(job.status, "queued");
    assert_eq!(job.client_ip, "203.0.113.7");
    assert!(job.replay_key.contains(job_id));
    assert_eq!(job.skin, "Default");
    let payload_job: String = app
        .scalar("SELECT payload->>'job_id' FROM outbox_events")
        .await;
    assert_eq!(payload_job, job_id);
    assert_eq!(app.replay_objects().await, vec![job.replay_key.clone()]);
    let stored = app.replay_object(&job.replay_key).await;
    assert_eq!(&stored[..], &fixture("valid_0.osr")[..]);
}

/// A server whose replays may be 30 000 bytes at most.
async fn capped_app() -> TestApp {
    TestApp::spawn(&[("MAX_REPLAY_BYTES", "30000")]).await
}

/// The client of the tests of each check.
const CLIENT_IP: &str = "198.51.100.10";

/// No file, another extension, an empty file, not multipart, too large.
#[tokio::test]
async fn a_render_without_a_replay_file_of_the_right_name_and_size_is_refused() {
    let app = capped_app().await;
    let ip = CLIENT_IP;
    let no_file = form_without_replay();
    problem(
        app.render(ip, no_file).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let wrong_name = render_form(fixture("valid_0.osr"), "play.txt", &[]);
    problem(
        app.render(ip, wrong_name).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let empty = render_form(Vec::new(), "play.osr", &[]);
    problem(
        app.render(ip, empty).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let not_multipart = app
        .http
        .post(app.url("/v1/render"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    problem(not_multipart, StatusCode::BAD_REQUEST, "invalid_file").await;
    let too_large = render_form(fixture("valid_long.osr"), "long.osr", &[]);
    problem(
        app.render(ip, too_large).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;
}

#[tokio::test]
async fn a_replay_that_cannot_be_read_is_refused() {
    let app = capped_app().await;
    for corrupt in [
        "corrupt_truncated.osr",
        "corrupt_bad_mode.osr",
        "corrupt_bad_string_marker.osr",
        "corrupt_garbage_lzma.osr",
    ] {
        let form = render_form(fixture(corrupt), corrupt, &[]);
        problem(
            app.render(CLIENT_IP, form).await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_replay",
        )
        .await;
    }
}

#[tokio::test]
async fn a_bad_form_field_is_refused_naming_the_field() {
    let app = capped_app().await;
    for (field, value) in [
        ("skin", "../../etc/passwd"),
        ("skin", ""),
        ("resolution", "8k"),
        ("bg_dim", "2"),
        ("video", "perhaps"),
    ] {
        let form = render_form(fixture("valid_0.osr"), "play.OSR", &[(field, value)]);
        let body = problem(
            app.render(CLIENT_IP, form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
        assert!(body["detail"].as_str().unwrap().contains(field), "{body}");
    }
}

/// A registered skin (one outside the registry is `unknown_skin`: entitlements.rs), and the
/// file's extension in any case.
#[tokio::test]
async fn a_registered_skin_and_an_upper_case_extension_are_admitted() {
    let app = capped_app().await;
    app.register_skin("My Skin-2").await;
    let upper_case = render_form(fixture("valid_0.osr"), "PLAY.OSR", &[("skin", "My Skin-2")]);
    assert_eq!(
        app.render(CLIENT_IP, upper_case).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn a_replay_with_trailing_bytes_is_admitted() {
    let app = capped_app().await;
    let trailing = render_form(fixture("corrupt_trailing_garbage.osr"), "t.osr", &[]);
    assert_eq!(
        app.render(CLIENT_IP, trailing).await.status(),
        StatusCode::ACCEPTED
    );
}

#[tokio::test]
async fn earlier_steps_win_and_spend_no_quota() {
    let app = TestApp::spawn(&[]).await;
    // The refusals and the admission count in one minute's window.
    within_one_minute().await;
    let ip = "198.51.100.20";
    // Bad name and bad skin: the replay file's check decides. Bad replay and bad skin: the
    // replay structure's check decides.
    let bad_name_and_skin = render_form(fixture("valid_0.osr"), "x.zip", &[("skin", "a/b")]);
    problem(
        app.render(ip, bad_name_and_skin).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let bad_replay_and_skin = render_form(
        fixture("corrupt_truncated.osr"),
        "x.osr",
        &[("skin", "a/b")],
    );
    problem(
        app.render(ip, bad_replay_and_skin).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "invalid_replay",
    )
    .await;
    for _ in 0..6 {
        let response = app
            .render(
                ip,
                render_form(fixture("valid_0.osr"), "x.osr", &[("skin", "../x")]),
            )
            .await;
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            None,
            "no quota was read"
        );
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }
    let first_valid = app.render(ip, valid_form()).await;
    assert_eq!(first_valid.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&first_valid, "x-ratelimit-remaining"), Some(4));
}

#[tokio::test]
async fn rate_limit_answers_before_capacity_with_its_headers() {
    let app = TestApp::spawn(&[("MAX_QUEUED", "0")]).await;
    let ip = "198.51.100.30";
    // The requests count in one minute's window.
    within_one_minute().await;
    // A full queue gives each hit back (waiting costs no quota), as often as the window's
    // limit; then the hits are kept, and the window fills.
    let remaining: Vec<u64> = [5; 5].into_iter().chain((0..5).rev()).collect();
    for remaining in remaining {
        let response = app.render(ip, valid_form()).await;
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining));
        assert!(header(&response, "retry-after").is_some());
        problem(response, StatusCode::SERVICE_UNAVAILABLE, "queue_full").await;
    }
    let limited = app.render(ip, valid_form()).await;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reset = header(&limited, "x-ratelimit-reset").unwrap();
    let retry_after = header(&limited, "retry-after").unwrap();
    assert_eq!(header(&limited, "x-ratelimit-limit"), Some(5));
    assert_eq!(header(&limited, "x-ratelimit-remaining"), Some(0));
    assert_eq!(reset % 60, 0);
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(
        reset.abs_diff(now + retry_after) <= 1,
        "Retry-After points at the reset"
    );
    problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Another client has its own window (and its hit given back).
    let other = app.render("198.51.100.31", valid_form()).await;
    assert_eq!(header(&other, "x-ratelimit-remaining"), Some(5));
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

#[tokio::test]
async fn forty_concurrent_requests_from_one_ip_admit_exactly_two() {
    let app = TestApp::spawn(ROOMY).await;
    let responses = join_all((0..40).map(|_| app.render("203.0.113.40", valid_form()))).await;
    let admitted = responses
        .iter()
        .filter(|r| r.status() == StatusCode::ACCEPTED)
        .count();
    let refused = responses
        .iter()
        .filter(|r| r.status() == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((admitted, refused), (2, 38));
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 2);
    assert_eq!(app.count("SELECT count(*) FROM outbox_events").await, 2);
    assert_eq!(
        app.replay_objects().await.len(),
        2,
        "refused uploads were removed"
    );
}

#[tokio::test]
async fn forty_concurrent_clients_fill_the_queue_to_exactly_its_cap() {
    let app = TestApp::spawn(&[("MAX_QUEUED", "8"), ("RATE_LIMIT_RENDER", "1000/hour")]).await;
    let responses = join_all((0..40).map(|i| app.render_owned(format!("192.0.2.{i}")))).await;
    let admitted = responses
        .iter()
        .filter(|s| **s == StatusCode::ACCEPTED)
        .count();
    let full = responses
        .iter()
        .filter(|s| **s == StatusCode::SERVICE_UNAVAILABLE)
        .count();
    assert_eq!((admitted, full), (8, 32));
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE status = 'queued'")
            .await,
        8
    );
    assert_eq!(app.replay_objects().await.len(), 8);
}

#[tokio::test]
async fn render_capacity_is_checked_after_queue_depth() {
    let app = TestApp::spawn(&[("MAX_RENDERING", "1"), ("RATE_LIMIT_RENDER", "1000/hour")]).await;
    assert_eq!(
        app.render("192.0.2.100", valid_form()).await.status(),
        StatusCode::ACCEPTED
    );
    app.db
        .batch_execute("UPDATE jobs SET status = 'rendering'")
        .await
        .unwrap();
    let busy = app.render("192.0.2.101", valid_form()).await;
    assert!(header(&busy, "retry-after").is_some());
    problem(busy, StatusCode::SERVICE_UNAVAILABLE, "render_capacity").await;
}

#[tokio::test]
async fn a_held_client_lock_blocks_that_client_and_no_other() {
    let app = TestApp::spawn(&[("DB_TIMEOUT_MS", "20000")]).await;
    let holder = app.hold_client_lock("203.0.113.60").await;
    let blocked = app.spawn_render("203.0.113.60", None);
    let other = tokio::time::timeout(
        Duration::from_secs(10),
        app.render("203.0.113.61", valid_form()),
    )
    .await
    .expect("another client is not held up");
    assert_eq!(other.status(), StatusCode::ACCEPTED);
    // The locked client's request has reached the lock and waits in its queue.
    app.until_a_request_waits_for_a_lock("the locked client's request never reached the lock")
        .await;
    assert!(
        !blocked.is_finished(),
        "the locked client waits for the lock"
    );

    holder.batch_execute("COMMIT").await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("released lock lets the request through")
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_missing_bucket_fails_with_nothing_left_behind() {
    let app = TestApp::spawn(&[]).await;
    app.s3
        .delete_bucket()
        .bucket(&app.bucket)
        .send()
        .await
        .unwrap();
    let response = app.render("203.0.113.70", valid_form()).await;
    problem(
        response,
        StatusCode::INTERNAL_SERVER_ERROR,
        "storage_failed",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM outbox_events").await, 0);
}

#[tokio::test]
async fn a_missing_limiter_table_is_a_503_not_a_free_pass() {
    let app = TestApp::spawn(&[]).await;
    app.dynamodb
        .delete_table()
        .table_name(&app.table)
        .send()
        .await
        .unwrap();
    let response = app.render("203.0.113.80", valid_form()).await;
    assert!(header(&response, "retry-after").is_some());
    problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "limiter_unavailable",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert!(app.replay_objects().await.is_empty());
}

#[tokio::test]
async fn a_spoofed_header_from_an_untrusted_peer_is_ignored() {
    let app = TestApp::spawn(&[
        ("TRUSTED_PROXY_CIDRS", ""),
        ("RATE_LIMIT_RENDER", "1000/hour"),
    ])
    .await;
    for spoofed in ["203.0.113.1", "203.0.113.2"] {
        assert_eq!(
            app.render(spoofed, valid_form()).await.status(),
            StatusCode::ACCEPTED
        );
    }
    let third = app.render("203.0.113.3", valid_form()).await;
    problem(third, StatusCode::TOO_MANY_REQUESTS, "too_many_active_jobs").await;
    assert_eq!(app.job_client_keys().await, ["127.0.0.1"]);
}

#[tokio::test]
async fn ipv6_clients_share_a_counter_per_64_and_mapped_ipv4_is_ipv4() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_RENDER", "5/hour"),
        ("MAX_ACTIVE_JOBS_PER_IP", "10"),
    ])
    .await;
    let remaining = |r: &reqwest::Response| header(r, "x-ratelimit-remaining");
    let first = app.render("2001:db8:1:2::1", valid_form()).await;
    let same_64 = app
        .render("2001:db8:1:2:ffff:eeee:dddd:cccc", valid_form())
        .await;
    let next_64 = app.render("2001:db8:1:3::1", valid_form()).await;
    assert_eq!(
        (remaining(&first), remaining(&same_64), remaining(&next_64)),
        (Some(4), Some(3), Some(4))
    );

    let v4 = app.render("203.0.113.90", valid_form()).await;
    let mapped = app.render("::ffff:203.0.113.90", valid_form()).await;
    assert_eq!((remaining(&v4), remaining(&mapped)), (Some(4), Some(3)));

    assert_eq!(
        app.job_client_keys().await,
        ["2001:db8:1:2::/64", "2001:db8:1:3::/64", "203.0.113.90"]
    );
}

impl TestApp {
    async fn render_owned(&self, ip: String) -> StatusCode {
        self.render(&ip, valid_form()).await.status()
    }
}
