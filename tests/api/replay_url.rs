//! Replays by URL: `replay_url` instead of the file, fetched after the rate limit
//! under the callbacks' address guard, capped, then checked as an upload is.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{header, StatusCode as AxumStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{accepted_job, header, problem, TestApp};
use crate::support::keys::TestKey;
use crate::support::replays::{fixture, render_form, unique_replay};

/// A replay host on loopback: `/replay.osr` (a valid replay), `/big` (past the cap, declared),
/// `/streamed-big` (past the cap, no length), `/empty`, `/slow` (no answer for 20 s), `/junk`,
/// `/moved` (a redirect to
/// `/replay.osr`); anything else is 404.
async fn replay_host(replay: Vec<u8>) -> SocketAddr {
    let big = vec![0u8; 40_000];
    let router = Router::new()
        .route("/replay.osr", get(move || async move { replay.clone() }))
        .route("/big", get(move || async move { big.clone() }))
        .route(
            "/streamed-big",
            get(|| async {
                let chunks = (0..40).map(|_| Ok::<_, std::io::Error>(vec![0u8; 1000]));
                Body::from_stream(futures_util::stream::iter(chunks))
            }),
        )
        .route("/empty", get(|| async { Vec::<u8>::new() }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(20)).await;
                Vec::<u8>::new()
            }),
        )
        .route("/junk", get(|| async { b"not a replay".to_vec() }))
        .route(
            "/moved",
            get(|| async {
                let mut response: Response = AxumStatus::FOUND.into_response();
                response
                    .headers_mut()
                    .insert(header::LOCATION, "/replay.osr".parse().unwrap());
                response
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A form without the file: `replay_url` and `fields`.
fn url_form(url: &str, fields: &[(&str, &str)]) -> reqwest::multipart::Form {
    fields.iter().fold(
        reqwest::multipart::Form::new().text("replay_url", url.to_owned()),
        |form, (name, value)| form.text(name.to_string(), value.to_string()),
    )
}

/// A server that may fetch from loopback, with a 30 000-byte replay cap; a key that renders 20
/// a minute; and a replay host serving `replay`.
struct ByUrl {
    app: TestApp,
    key: TestKey,
    host: SocketAddr,
    replay: Vec<u8>,
}

/// The client the `ByUrl` tests send from.
const BY_URL_IP: &str = "203.0.113.100";

impl ByUrl {
    async fn start() -> ByUrl {
        let app = TestApp::spawn(&[
            ("ALLOW_PRIVATE_CALLBACKS", "true"),
            ("MAX_REPLAY_BYTES", "30000"),
        ])
        .await;
        let key = app.create_key("20/minute", 100).await;
        let replay = unique_replay();
        let host = replay_host(replay.clone()).await;
        ByUrl {
            app,
            key,
            host,
            replay,
        }
    }

    /// `path` on the replay host.
    fn at(&self, path: &str) -> String {
        format!("http://{}{path}", self.host)
    }

    /// `POST /v1/render` of `form` with the key.
    async fn render(&self, form: reqwest::multipart::Form) -> reqwest::Response {
        self.app
            .render_with(BY_URL_IP, &self.key.bearer, form)
            .await
    }

    /// The job of the host's replay, named by its URL.
    async fn submit_by_url(&self) -> String {
        accepted_job(self.render(url_form(&self.at("/replay.osr"), &[])).await).await
    }
}

#[tokio::test]
async fn a_replay_named_by_url_is_fetched_and_stored_as_fetched() {
    let by_url = ByUrl::start().await;
    let app = &by_url.app;
    let admitted = by_url
        .render(url_form(&by_url.at("/replay.osr"), &[]))
        .await;
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(19));
    let job = accepted_job(admitted).await;
    let read = app.job(&job).await;
    assert_eq!(read["status"], "queued");
    assert!(read["replay"]["player"].is_string(), "{read}");
    let stored = app.replay_object(&format!("replays/{job}.osr")).await;
    assert_eq!(&stored[..], &by_url.replay[..]);
}

/// Too large, empty, not a replay, a redirect, no answer, not found: each names the URL's
/// problem, never an address, and spent its hit.
#[tokio::test]
async fn a_replay_url_that_fails_is_refused_naming_its_problem_never_an_address() {
    let by_url = ByUrl::start().await;
    for (path, status, code) in [
        ("/big", StatusCode::PAYLOAD_TOO_LARGE, "file_too_large"),
        (
            "/streamed-big",
            StatusCode::PAYLOAD_TOO_LARGE,
            "file_too_large",
        ),
        ("/empty", StatusCode::BAD_REQUEST, "invalid_file"),
        (
            "/junk",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_replay",
        ),
        (
            "/moved",
            StatusCode::UNPROCESSABLE_ENTITY,
            "replay_url_failed",
        ),
        (
            "/slow",
            StatusCode::UNPROCESSABLE_ENTITY,
            "replay_url_failed",
        ),
        (
            "/missing",
            StatusCode::UNPROCESSABLE_ENTITY,
            "replay_url_failed",
        ),
    ] {
        // A host that does not answer is given up within the fetch's 5 s, inside the deadline.
        let started = std::time::Instant::now();
        let refused = by_url.render(url_form(&by_url.at(path), &[])).await;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(8),
            "{path}"
        );
        assert!(
            header(&refused, "x-ratelimit-remaining").is_some(),
            "{path}"
        );
        let body = problem(refused, status, code).await;
        let detail = body["detail"].as_str().unwrap();
        assert!(!detail.contains("127.0.0.1:"), "{path}: {detail}");
    }
    let body = problem(
        by_url.render(url_form(&by_url.at("/missing"), &[])).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "replay_url_failed",
    )
    .await;
    assert!(body["detail"].as_str().unwrap().contains("404"), "{body}");
}

/// Exactly one of the file and the URL; a URL the callbacks' rules refuse; both before the rate
/// limit, and admitting nothing.
#[tokio::test]
async fn a_replay_url_beside_a_file_or_not_http_is_refused_before_the_rate_limit() {
    let by_url = ByUrl::start().await;
    by_url.submit_by_url().await;
    let both = render_form(
        fixture("valid_0.osr"),
        "a.osr",
        &[("replay_url", &by_url.at("/replay.osr"))],
    );
    for form in [
        both,
        url_form("ftp://example.com/a.osr", &[]),
        url_form("not a url", &[]),
    ] {
        let refused = by_url.render(form).await;
        assert_eq!(header(&refused, "x-ratelimit-remaining"), None);
        let body: Value = problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
        assert!(
            body["detail"].as_str().unwrap().starts_with("replay_url"),
            "{body}"
        );
    }
    assert_eq!(by_url.app.count("SELECT count(*) FROM jobs").await, 1);
}

#[tokio::test]
async fn ordrs_replay_url_field_names_a_replay_too() {
    let by_url = ByUrl::start().await;
    by_url.submit_by_url().await;
    let ordr = reqwest::multipart::Form::new().text("replayURL", by_url.at("/replay.osr"));
    let refused = by_url.render(ordr).await;
    // The same replay, fetched: the first job is still queued.
    problem(refused, StatusCode::CONFLICT, "duplicate_replay").await;
}

#[tokio::test]
async fn a_blank_replay_url_beside_a_file_is_none() {
    let by_url = ByUrl::start().await;
    let blank = render_form(unique_replay(), "a.osr", &[("replay_url", " ")]);
    accepted_job(by_url.render(blank).await).await;
}

/// The service fetches nothing for anyone: 401, before the rate limit.
#[tokio::test]
async fn a_replay_url_without_a_key_is_refused_as_needing_one() {
    let by_url = ByUrl::start().await;
    let anonymous = by_url
        .app
        .render(BY_URL_IP, url_form(&by_url.at("/replay.osr"), &[]))
        .await;
    assert_eq!(header(&anonymous, "x-ratelimit-remaining"), None);
    problem(anonymous, StatusCode::UNAUTHORIZED, "api_key_required").await;
}

/// A deployment without a way out (`CALLBACKS_EGRESS=false`) refuses a `replay_url` with the
/// form, rather than time out fetching it.
#[tokio::test]
async fn a_deployment_without_a_way_out_refuses_replay_urls() {
    let app = TestApp::spawn(&[("CALLBACKS_EGRESS", "false")]).await;
    let key = app.create_key("20/minute", 100).await;
    let form = url_form("https://cdn.example.com/a.osr", &[]);
    let refused = app.render_with("203.0.113.102", &key.bearer, form).await;
    assert_eq!(header(&refused, "x-ratelimit-remaining"), None);
    let body = problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    assert!(
        body["detail"].as_str().unwrap().contains("upload the file"),
        "{body}"
    );
}

/// Without the development switch, a host that is or resolves to a private address is refused
/// by the guard: the service is no proxy into its own network.
#[tokio::test]
async fn a_replay_url_may_not_reach_a_private_address() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("20/minute", 100).await;
    let host = replay_host(unique_replay()).await;
    for url in [
        format!("https://127.0.0.1:{}/replay.osr", host.port()),
        format!("https://localhost:{}/replay.osr", host.port()),
        "https://10.1.2.3/replay.osr".to_owned(),
        format!("http://127.0.0.1:{}/replay.osr", host.port()),
    ] {
        let refused = app
            .render_with("203.0.113.101", &key.bearer, url_form(&url, &[]))
            .await;
        let status = refused.status();
        let body: Value = refused.json().await.unwrap();
        assert!(
            matches!(
                (status, body["code"].as_str()),
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Some("replay_url_failed" | "invalid_field")
                )
            ),
            "{url}: {status} {body}"
        );
        // What the host resolved to is never told: only what the client named.
        let detail = body["detail"].as_str().unwrap();
        if url.contains("localhost") {
            assert!(
                !detail.contains("127.") && !detail.contains("::1"),
                "{detail}"
            );
            assert!(detail.contains("localhost"), "{detail}");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}
