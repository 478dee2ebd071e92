//! An origin only our edge can reach: with `CF_ORIGIN_SECRET` (or `CF_ORIGIN_SECRET_ARN`)
//! every request must carry `X-Origin-Secret` equal to its current or previous value, or it is
//! a 403 `origin_forbidden` before anything else runs: no quota spent, no backing service
//! touched (counted by the proxies). Only then is `CF-Connecting-IP` believed, and still only
//! from a trusted peer. Secrets kept in Secrets Manager (the stand-in) rotate without a
//! restart, and a flood of wrong values costs one read per refresh interval; the webhook key
//! too is read from Secrets Manager, its previous version still accepted.

use std::time::Duration;

use osurender_core::entry::http::ORIGIN_SECRET_HEADER;
use osurender_core::usecases::lifecycle::sign;
use reqwest::{Response, StatusCode};
use serde_json::json;

use crate::support::app::{header, problem, TestApp, LOGS, UNSET};
use crate::support::jobs::signed_body;
use crate::support::replays::valid_form;
use crate::support::secrets::StoredSecret;

const SECRET: &str = "origin-secret-of-the-current-edge";
const PREVIOUS: &str = "origin-secret-the-edge-sent-before";
/// Long enough that a rotation test waits little past it.
const REFRESH: Duration = Duration::from_secs(1);
const REFRESH_SECS: &str = "1";
const JOB: &str = "0b5c4a52-2d1e-4c4e-9a0f-6c1d2e3f4a5b";

/// `method path` with `X-Origin-Secret: secret` when given, as a client that bypasses the edge
/// (or one the edge forwards) sends it.
async fn send(app: &TestApp, method: &str, path: &str, secret: Option<&str>) -> Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new()
        .request(method.clone(), app.url(path))
        .header("CF-Connecting-IP", "198.51.100.90");
    if let Some(secret) = secret {
        request = request.header(ORIGIN_SECRET_HEADER, secret);
    }
    if method == reqwest::Method::POST && path.ends_with("render") {
        request = request.multipart(valid_form());
    }
    request.send().await.unwrap()
}

/// Every route, and a path and a method no route has.
const EVERY_PATH: &[(&str, &str)] = &[
    ("POST", "/v1/render"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/0b5c4a52-2d1e-4c4e-9a0f-6c1d2e3f4a5b"),
    (
        "POST",
        "/v1/jobs/0b5c4a52-2d1e-4c4e-9a0f-6c1d2e3f4a5b/webhook",
    ),
    ("GET", "/v1/skins"),
    ("POST", "/v1/skins/upload"),
    ("POST", "/skins/upload"),
    ("GET", "/health"),
    ("GET", "/no/such/route"),
    ("DELETE", "/v1/render"),
];

async fn forbidden(response: Response) {
    let no_store = response.headers().get("cache-control").cloned();
    problem(response, StatusCode::FORBIDDEN, "origin_forbidden").await;
    assert_eq!(no_store.unwrap(), "no-store");
}

#[tokio::test]
async fn without_the_origin_secret_nothing_runs_and_nothing_is_spent() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[
        ("CF_ORIGIN_SECRET", SECRET),
        ("RATE_LIMIT_RENDER", "2/hour"),
    ])
    .await;
    // Warm: the pool's connections are open, so a refusal that touched Postgres would show.
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    proxies.reset();

    for (method, path) in EVERY_PATH {
        for secret in [None, Some("wrong-origin-secret-value"), Some(&SECRET[1..])] {
            forbidden(send(&app, method, path, secret).await).await;
        }
        // Case matters: a secret, not a name.
        forbidden(send(&app, method, path, Some(&SECRET.to_uppercase())).await).await;
    }

    let (pg, aws) = (proxies.postgres.counts(), proxies.aws.counts());
    assert_eq!(pg.pg_round_trips, 0, "{pg:?}");
    assert_eq!(pg.connections, 0, "{pg:?}");
    assert_eq!(aws.http_requests(), 0, "{aws:?}");
    // The refused renders spent none of the client's quota.
    let first = send(&app, "POST", "/v1/render", Some(SECRET)).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&first, "x-ratelimit-remaining"), Some(1));

    if std::env::var_os("RUST_LOG").is_none() {
        let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
        assert!(!logs.contains(SECRET), "the origin secret in the logs");
    }
}

#[tokio::test]
async fn the_current_and_the_previous_secret_are_accepted() {
    let app = TestApp::spawn(&[
        ("CF_ORIGIN_SECRET", SECRET),
        ("CF_ORIGIN_SECRET_PREVIOUS", PREVIOUS),
    ])
    .await;
    for secret in [SECRET, PREVIOUS] {
        let health = send(&app, "GET", "/health", Some(secret)).await;
        assert_eq!(health.status(), StatusCode::OK);
        let job = send(&app, "GET", &format!("/v1/jobs/{JOB}"), Some(secret)).await;
        problem(job, StatusCode::NOT_FOUND, "not_found").await;
    }
    forbidden(send(&app, "GET", "/health", Some("neither-of-the-two-values")).await).await;
}

/// `CF-Connecting-IP` names the client only on a request that carries the secret from a
/// trusted peer (loopback in these tests): a job records the address it was keyed by.
#[tokio::test]
async fn cf_connecting_ip_is_believed_only_with_the_secret_from_a_trusted_peer() {
    let trusted = TestApp::spawn(&[("CF_ORIGIN_SECRET", SECRET)]).await;
    forbidden(send(&trusted, "POST", "/v1/render", None).await).await;
    trusted.submit("203.0.113.61").await;
    assert_eq!(trusted.job_client_keys().await, ["203.0.113.61"]);

    let untrusted = TestApp::spawn(&[
        ("CF_ORIGIN_SECRET", SECRET),
        ("TRUSTED_PROXY_CIDRS", "10.0.0.0/8"),
    ])
    .await;
    untrusted.submit("203.0.113.62").await;
    assert_eq!(untrusted.job_client_keys().await, ["127.0.0.1"]);
}

/// The secret in Secrets Manager: read at start, learned again after a rotation on the first
/// request that presents the new value (once the refresh interval has passed), the replaced
/// value still accepted; a flood of wrong values costs one read of the two versions.
#[tokio::test]
async fn a_stored_origin_secret_rotates_without_a_restart_and_floods_cost_one_read() {
    let stored = StoredSecret::create(PREVIOUS).await;
    let (app, proxies) = TestApp::spawn_via_proxies(&[
        ("CF_ORIGIN_SECRET_ARN", &stored.arn),
        ("SECRET_REFRESH_INTERVAL", REFRESH_SECS),
    ])
    .await;
    let reads = || proxies.aws.counts().op("secretsmanager.GetSecretValue");
    assert_eq!(reads(), 2, "AWSCURRENT and AWSPREVIOUS at start");
    proxies.reset();
    assert_eq!(
        send(&app, "GET", "/health", Some(PREVIOUS)).await.status(),
        StatusCode::OK
    );
    assert_eq!(reads(), 0);

    stored.rotate(SECRET).await;
    tokio::time::sleep(REFRESH).await;
    for secret in [SECRET, PREVIOUS] {
        let health = send(&app, "GET", "/health", Some(secret)).await;
        assert_eq!(health.status(), StatusCode::OK, "{secret}");
    }
    assert_eq!(reads(), 2, "one read learned the rotation");

    tokio::time::sleep(REFRESH).await;
    proxies.reset();
    let flood = (0..40).map(|i| {
        let app = &app;
        async move {
            let wrong = format!("a-wrong-origin-secret-{i}");
            send(app, "GET", "/v1/jobs", Some(&wrong)).await
        }
    });
    for response in futures_util::future::join_all(flood).await {
        forbidden(response).await;
    }
    for _ in 0..10 {
        forbidden(send(&app, "GET", "/v1/jobs", Some("another-wrong-secret")).await).await;
    }
    let (pg, aws) = (proxies.postgres.counts(), proxies.aws.counts());
    assert_eq!(aws.http_requests(), 2, "one read of both versions: {aws:?}");
    assert_eq!(reads(), 2);
    assert_eq!(pg.pg_round_trips, 0, "{pg:?}");
}

/// A secret that cannot be read at start does not stop the server: every request is a 503
/// with `Retry-After` until a read succeeds, and then it is served.
#[tokio::test]
async fn an_unreadable_origin_secret_answers_503_until_it_can_be_read() {
    let name = StoredSecret::unused_name();
    let app = TestApp::spawn(&[
        ("CF_ORIGIN_SECRET_ARN", &name),
        ("SECRET_REFRESH_INTERVAL", REFRESH_SECS),
    ])
    .await;
    let unavailable = send(&app, "GET", "/health", Some(SECRET)).await;
    assert_eq!(unavailable.headers()["retry-after"], "5");
    problem(
        unavailable,
        StatusCode::SERVICE_UNAVAILABLE,
        "secret_unavailable",
    )
    .await;

    StoredSecret::create_named(&name, SECRET).await;
    tokio::time::sleep(REFRESH).await;
    let health = send(&app, "GET", "/health", Some(SECRET)).await;
    assert_eq!(health.status(), StatusCode::OK);
    forbidden(send(&app, "GET", "/health", Some(PREVIOUS)).await).await;
}

/// The webhook key from Secrets Manager (`WEBHOOK_SECRET_ARN`): reports signed with it verify,
/// after a rotation so do reports signed with the new key and, while workers switch, the old.
#[tokio::test]
async fn the_webhook_secret_from_secrets_manager_accepts_current_and_previous() {
    let old_key = "webhook-key-the-workers-had-first";
    let new_key = "webhook-key-after-the-rotation";
    let stored = StoredSecret::create(old_key).await;
    let app = TestApp::spawn(&[
        ("WEBHOOK_SECRET", UNSET),
        ("WEBHOOK_SECRET_ARN", &stored.arn),
        ("SECRET_REFRESH_INTERVAL", REFRESH_SECS),
    ])
    .await;
    let job = app.submit("203.0.113.64").await;
    let report = |key: &'static str, fields: serde_json::Value| {
        let app = &app;
        let job = &job;
        async move {
            let body = signed_body(job, fields);
            let signature = sign(key.as_bytes(), body.as_bytes());
            app.post_webhook(job, &body, Some(&signature)).await
        }
    };
    let downloading = report(old_key, json!({ "status": "downloading" })).await;
    assert_eq!(downloading.status(), StatusCode::OK);

    stored.rotate(new_key).await;
    tokio::time::sleep(REFRESH).await;
    let rendering = json!({ "status": "rendering", "progress": 10 });
    assert_eq!(
        report(new_key, rendering).await.status(),
        StatusCode::OK,
        "the new key"
    );
    let progress = json!({ "status": "rendering", "progress": 20 });
    assert_eq!(
        report(old_key, progress).await.status(),
        StatusCode::OK,
        "the previous key"
    );
    let forged = report(
        "a-key-that-was-never-the-secret",
        json!({ "status": "rendering", "progress": 30 }),
    )
    .await;
    problem(forged, StatusCode::UNAUTHORIZED, "invalid_signature").await;
    assert_eq!(app.job(&job).await["progress"], 20.0);
}
