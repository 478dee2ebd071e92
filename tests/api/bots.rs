//! What a bot ported from o!rdr relies on: its own reference in every view of a job,
//! an expired job that says why, an anonymous callback refused as needing a key.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::app::{
    accepted_job, header, invalid_param_names, problem, within_one_minute, TestApp,
};
use crate::support::callbacks::{sweep_callbacks, Receiver};
use crate::support::replays::{render_form, unique_replay, valid_form};

/// The first callback can arrive before the bot has stored the job id: the reference it chose
/// is in every callback, every read, every list item and every live event of the job.
#[tokio::test]
async fn a_client_reference_is_echoed_wherever_the_job_is_shown() {
    let app = TestApp::spawn(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let receiver = Receiver::start(0).await;
    let key = app.create_key("60/minute", 20).await;
    let reference = "discord:1234567890/987654321 ✓";
    let form = render_form(
        unique_replay(),
        "a.osr",
        &[
            ("callback_url", &receiver.url("/hook")),
            ("client_reference", reference),
        ],
    );
    let job = app.submit_with("203.0.113.80", &key.bearer, form).await;
    assert_eq!(app.job(&job).await["client_reference"], reference);
    let listed = app.list_as(&key, "").await;
    assert_eq!(
        listed["items"][0]["client_reference"], reference,
        "{listed}"
    );

    let mut socket = app.events("203.0.113.80").await;
    let state = socket.follow_job(&job).await;
    assert_eq!(state["client_reference"], reference, "{state}");

    app.report_ok(&job, json!({ "status": "rendering", "progress": 5 }))
        .await;
    sweep_callbacks(&app.instance().await).await;
    let received = receiver.received();
    assert_eq!(received.len(), 2);
    for callback in &received {
        assert_eq!(
            callback.json["client_reference"], reference,
            "{}",
            callback.json
        );
    }

    // A job without one shows none: null in reads, absent from callbacks and events.
    let plain = app
        .submit_with(
            "203.0.113.80",
            &key.bearer,
            render_form(unique_replay(), "a.osr", &[]),
        )
        .await;
    assert_eq!(app.job(&plain).await["client_reference"], json!(null));
}

#[tokio::test]
async fn a_bad_client_reference_is_listed_with_the_other_bad_fields() {
    let app = TestApp::spawn(&[]).await;
    let long = "x".repeat(129);
    for bad in [long.as_str(), "", "line\nbreak"] {
        let form = render_form(
            unique_replay(),
            "a.osr",
            &[("show_pp_counter", "maybe"), ("client_reference", bad)],
        );
        let body = problem(
            app.render("203.0.113.81", form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
        assert_eq!(
            invalid_param_names(&body),
            ["show_pp_counter", "client_reference"],
            "{body}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

/// One rule for a key that no longer counts (revoked, unknown): refused on every route, a
/// public job's read too, never read as if anonymous (a bot would not notice its key died).
#[tokio::test]
async fn a_revoked_key_is_refused_everywhere() {
    let app = TestApp::spawn(&[("API_KEY_CACHE_TTL", "1")]).await;
    let key = app.create_key("60/minute", 20).await;
    let job = app
        .submit_with(
            "203.0.113.82",
            &key.bearer,
            render_form(unique_replay(), "a.osr", &[]),
        )
        .await;
    app.revoke_key(&key).await;
    // Once the instance's cached lookup has expired (API_KEY_CACHE_TTL).
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    for path in [
        format!("/v1/jobs/{job}"),
        format!("/v1/jobs/{job}/video"),
        "/v1/jobs".to_owned(),
        "/v1/skins".to_owned(),
    ] {
        let read = app.get_with("203.0.113.82", &key.bearer, &path).await;
        assert_eq!(read.status(), StatusCode::UNAUTHORIZED, "{path}");
        problem(read, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    }
    // Without the key, the job is anyone's to read by its id.
    assert_eq!(app.job(&job).await["status"], "queued");
}

/// Waiting costs no quota: a refusal for the service's state (here a full queue) after the
/// rate limit gives the client's and its network's hits back, so a bot that retries after
/// `Retry-After` and a neighbour on its /24 are not locked out by waiting; a client that
/// hammers is limited again after twice its quota.
#[tokio::test]
async fn a_refusal_for_the_services_state_gives_its_hit_back() {
    let app = TestApp::spawn(&[
        ("MAX_QUEUED", "1"),
        ("RATE_LIMIT_RENDER", "3/minute"),
        ("RATE_LIMIT_RENDER_NETWORK", "6/minute"),
    ])
    .await;
    within_one_minute().await;
    // Another network fills the queue.
    accepted_job(app.render("198.51.100.1", valid_form()).await).await;
    let (bot, neighbour) = ("203.0.113.90", "203.0.113.91");
    for _ in 0..3 {
        let refused = app.render(bot, valid_form()).await;
        assert_eq!(
            header(&refused, "x-ratelimit-remaining"),
            Some(3),
            "nothing spent"
        );
        assert!(header(&refused, "retry-after").is_some());
        problem(refused, StatusCode::SERVICE_UNAVAILABLE, "queue_full").await;
    }
    // The network's window was given back too: the neighbour still has its whole quota.
    let refused = app.render(neighbour, valid_form()).await;
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some(3));
    problem(refused, StatusCode::SERVICE_UNAVAILABLE, "queue_full").await;
    // Hammering: given back as often as the limit (3 more), then the hits are kept.
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(app.render(bot, valid_form()).await.status().as_u16());
    }
    assert_eq!(statuses, [503, 503, 503, 429, 429, 429], "{statuses:?}");
}
