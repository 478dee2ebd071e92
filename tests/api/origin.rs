//! An origin only our edge can reach: with `CF_ORIGIN_SECRET` (or `CF_ORIGIN_SECRET_ARN`)
//! every request must carry `X-Origin-Secret` equal to its current or previous value, or it is
//! a 403 `origin_forbidden` before anything else runs: no quota spent, no backing service
//! touched (counted by the proxies). Only then is `CF-Connecting-IP` believed, and still only
//! from a trusted peer. Secrets kept in Secrets Manager (the stand-in) rotate without a
//! restart, and a flood of wrong values costs one read per refresh interval; the webhook key
//! too is read from Secrets Manager, its previous version still accepted.
//!
//! No borrowed browsers: a state-changing request a browser sends for a page of another site
//! than `CORS_ALLOW_ORIGIN` (its `Origin`, or without one `Sec-Fetch-Site: cross-site`) is a 403
//! `cross_site_request` before anything is read or spent; programs, which send neither, and the
//! allowed origin's pages are served; reads and the workers' webhook are not judged by it.

use std::time::Duration;

use osurender_core::entry::http::ORIGIN_SECRET_HEADER;
use osurender_core::usecases::lifecycle::sign;
use reqwest::{Response, StatusCode};
use serde_json::json;

use crate::support::app::{header, problem, TestApp, LOGS, UNSET};
use crate::support::jobs::signed_body;
use crate::support::replays::{render_form, unique_replay, valid_form};
use crate::support::secrets::StoredSecret;
use crate::support::skins::{skin, upload_form, LEGACY, V1};

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

/// The page `CORS_ALLOW_ORIGIN` allows in these tests, and one it does not.
const PAGE: &str = "https://osurender.example";
const EVIL: &str = "https://evil.example";

/// What a browser adds to `fetch(url, {method: "POST", mode: "no-cors", body: form})` run by a
/// page of `origin` on another site than the API's.
const CROSS_SITE_NO_CORS: &[(&str, &str)] = &[
    ("sec-fetch-site", "cross-site"),
    ("sec-fetch-mode", "no-cors"),
    ("sec-fetch-dest", "empty"),
];

/// The state-changing routes a page could make its visitors' browsers call, each with a body
/// that would be admitted: `POST path` with `headers`, for `client_ip`.
async fn post_as(
    app: &TestApp,
    route: &str,
    client_ip: &str,
    headers: &[(&str, &str)],
) -> Response {
    let mut request = app
        .http
        .post(app.url(route))
        .header("CF-Connecting-IP", client_ip);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let marker = uuid::Uuid::new_v4().simple().to_string();
    let request = match route {
        "/v1/render" => request.multipart(render_form(unique_replay(), "play.osr", &[])),
        PRESIGNED => request
            .header("content-type", "application/json")
            .body(json!({ "name": format!("P{}", &marker[..12]), "size": 4096 }).to_string()),
        _ => request.multipart(upload_form(
            skin(&marker),
            &format!("S{}.osk", &marker[..12]),
            None,
        )),
    };
    request.send().await.unwrap()
}

/// The presigned variant of `POST /v1/skins/upload` (a JSON body), told apart in `post_as`.
const PRESIGNED: &str = "/v1/skins/upload?presigned";

/// Each state-changing route, and the status its request gets when it is served.
const STATE_CHANGING: &[(&str, StatusCode)] = &[
    ("/v1/render", StatusCode::ACCEPTED),
    (V1, StatusCode::CREATED),
    (PRESIGNED, StatusCode::OK),
    (LEGACY, StatusCode::CREATED),
];

#[tokio::test]
async fn a_cross_site_no_cors_post_is_refused_before_anything_is_spent() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[
        ("CORS_ALLOW_ORIGIN", PAGE),
        ("RATE_LIMIT_RENDER", "2/hour"),
        ("RATE_LIMIT_SKINS_UPLOAD", "2/hour"),
        ("RATE_LIMIT_LEGACY_SKINS_UPLOAD", "2/hour"),
    ])
    .await;
    assert_eq!(app.get("/health").await.status(), StatusCode::OK);
    proxies.reset();
    // A client of its own for each route (the two v1 forms share a window).
    let ip = |route: usize| format!("198.51.100.{}", 70 + route);
    let browser: Vec<(&str, &str)> = [("origin", EVIL)]
        .into_iter()
        .chain(CROSS_SITE_NO_CORS.iter().copied())
        .collect();
    for (i, (route, _)) in STATE_CHANGING.iter().enumerate() {
        for _ in 0..3 {
            let response = post_as(&app, route, &ip(i), &browser).await;
            assert_eq!(response.headers()["cache-control"], "no-store");
            assert!(response.headers().get("x-ratelimit-remaining").is_none());
            problem(response, StatusCode::FORBIDDEN, "cross_site_request").await;
        }
    }
    let (pg, aws) = (proxies.postgres.counts(), proxies.aws.counts());
    assert_eq!(pg.pg_round_trips, 0, "{pg:?}");
    assert_eq!(aws.http_requests(), 0, "{aws:?}");
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
    assert!(app.replay_objects().await.is_empty());
    assert!(app.objects("skins/").await.is_empty());

    // None of the refused requests was counted: the client's first own request of each route
    // finds its whole window but itself.
    for (i, (route, served)) in STATE_CHANGING.iter().enumerate() {
        let response = post_as(&app, route, &ip(i), &[]).await;
        assert_eq!(response.status(), *served, "{route}");
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            Some(1),
            "{route}"
        );
    }
}

/// The `Origin` decides when there is one; `Sec-Fetch-Site` only refuses `cross-site` without
/// one; a program's request (neither) is served.
#[tokio::test]
async fn each_header_combination_is_judged_by_the_origin_first() {
    let app = TestApp::spawn(&[
        ("CORS_ALLOW_ORIGIN", PAGE),
        ("RATE_LIMIT_RENDER", "1000/hour"),
        ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
        ("RATE_LIMIT_LEGACY_SKINS_UPLOAD", "1000/hour"),
        ("MAX_ACTIVE_JOBS_PER_IP", "1000"),
    ])
    .await;
    let site = |value| ("sec-fetch-site", value);
    let from = |origin| ("origin", origin);
    let served: &[&[(&str, &str)]] = &[
        &[],
        &[site("same-origin")],
        &[site("same-site")],
        &[site("none")],
        &[from(PAGE)],
        &[from(PAGE), site("cross-site")],
        &[from(PAGE), site("same-site")],
    ];
    let refused: &[&[(&str, &str)]] = &[
        &[site("cross-site")],
        &[from(EVIL)],
        &[from(EVIL), site("cross-site")],
        &[from(EVIL), site("same-origin")],
        &[from("https://renders.osurender.example"), site("same-site")],
        &[from("null")],
        &[from("null"), site("cross-site")],
        &[from("https://osurender.example:8443")],
    ];
    for (route, status) in STATE_CHANGING {
        for (i, headers) in served.iter().enumerate() {
            let ip = format!("198.51.100.{}", 100 + i);
            let response = post_as(&app, route, &ip, headers).await;
            assert_eq!(response.status(), *status, "{route} {headers:?}");
        }
        for headers in refused {
            let response = post_as(&app, route, "198.51.100.99", headers).await;
            problem(response, StatusCode::FORBIDDEN, "cross_site_request").await;
        }
    }

    // Reads change nothing, and the workers' webhook is signed: neither is judged by the site.
    let job = post_as(&app, "/v1/render", "198.51.100.98", &[]).await;
    let job: serde_json::Value = job.json().await.unwrap();
    let job = job["job_id"].as_str().unwrap();
    let read = app
        .http
        .get(app.url(&format!("/v1/jobs/{job}")))
        .header("origin", EVIL)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    let report = signed_body(job, json!({ "status": "downloading" }));
    let signature = sign(
        crate::support::app::WEBHOOK_SECRET.as_bytes(),
        report.as_bytes(),
    );
    let reported = app
        .http
        .post(app.url(&format!("/v1/jobs/{job}/webhook")))
        .header("content-type", "application/json")
        .header("X-Signature", signature)
        .header("origin", EVIL)
        .header("sec-fetch-site", "cross-site")
        .body(report)
        .send()
        .await
        .unwrap();
    assert_eq!(reported.status(), StatusCode::OK);
}

/// Without `CORS_ALLOW_ORIGIN` (CORS off, the default) no page may submit; with `*` any page
/// may, but none of an opaque origin (`null`: a sandboxed frame, a `file:` page).
#[tokio::test]
async fn without_an_allowed_origin_no_page_submits_and_with_any_no_opaque_one() {
    let off = TestApp::spawn(&[]).await;
    for origin in [PAGE, EVIL, "null"] {
        let response = post_as(&off, "/v1/render", "198.51.100.120", &[("origin", origin)]).await;
        problem(response, StatusCode::FORBIDDEN, "cross_site_request").await;
    }
    let program = post_as(&off, "/v1/render", "198.51.100.120", &[]).await;
    assert_eq!(program.status(), StatusCode::ACCEPTED);

    let any = TestApp::spawn(&[("CORS_ALLOW_ORIGIN", "*")]).await;
    let cross_site = [("origin", EVIL), ("sec-fetch-site", "cross-site")];
    let response = post_as(&any, "/v1/render", "198.51.100.121", &cross_site).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let opaque = post_as(&any, "/v1/render", "198.51.100.122", &[("origin", "null")]).await;
    problem(opaque, StatusCode::FORBIDDEN, "cross_site_request").await;
}
