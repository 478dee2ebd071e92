//! The Lambda path the dev server does not take: API Gateway REST proxy events, as API Gateway
//! sends them (`tests/events/rest_*.json`, the render one with a real replay as a base64
//! multipart body), converted by `lambda_http` and served by a function's router
//! (`lambda::router`: the core's routes, with the peer taken from
//! `requestContext.identity.sourceIp`). No network: the stores a request reaches are fakes, and
//! the limiter's records which client key it was asked about.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::Router;
use base64::Engine;
use osurender_core::domain::client::ClientKey;
use osurender_core::domain::rate::RateDecision;
use osurender_core::entry::http::{self, ROUTES};
use osurender_core::ports::limiter::{Hit, LimiterUnavailable, RateLimiter};
use osurender_core::routes::{self, PeerAddr};
use osurender_core::usecases::lifecycle::Verifier;
use osurender_core::{entry::lambda, App, Config};
use serde_json::Value;
use tower::ServiceExt;

const RENDER_EVENT: &str = include_str!("events/rest_render.json");
const GET_JOB_EVENT: &str = include_str!("events/rest_get_job.json");
/// `requestContext.identity.sourceIp` of the fixtures.
const SOURCE_IP: &str = "203.0.113.7";
const CF_CLIENT_IP: &str = "198.51.100.23";

/// Counts nothing and refuses every request, remembering whose it was.
#[derive(Default)]
struct RecordingLimiter {
    asked: Mutex<Vec<(String, String)>>,
}

impl RecordingLimiter {
    fn asked(&self) -> Vec<(String, String)> {
        self.asked.lock().unwrap().clone()
    }
}

#[async_trait]
impl RateLimiter for RecordingLimiter {
    async fn hit(&self, hit: Hit<'_>) -> Result<RateDecision, LimiterUnavailable> {
        self.asked
            .lock()
            .unwrap()
            .push((hit.endpoint.to_owned(), hit.client.as_str().to_owned()));
        Ok(RateDecision {
            policy: hit.endpoint,
            allowed: false,
            limit: hit.limit.requests,
            window: 60,
            remaining: 0,
            reset: hit.now + 30,
            retry_after: 30,
        })
    }

    /// Every hit is refused here: there is never one to give back.
    async fn give_back(&self, hit: Hit<'_>) -> Result<(), LimiterUnavailable> {
        panic!("no hit of {} was counted to give back", hit.endpoint)
    }
}

/// The configuration of `vars` alone.
fn config(vars: &[(&str, &str)]) -> Config {
    Config::from_lookup(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    })
    .unwrap()
}

/// An app on the in-memory adapters, with the recording limiter.
fn app(vars: &[(&str, &str)], limiter: Arc<RecordingLimiter>) -> App {
    let (mut app, _) = App::in_memory(config(vars));
    app.limiter = limiter;
    app
}

/// The fixture's event as `lambda_http` turns it into a request for the router.
fn request(event: &Value) -> Request {
    // As template.yaml sets it for every function: the stage stays out of the routes' paths.
    std::env::set_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
    lambda_http::request::from_str(&event.to_string())
        .expect("lambda_http reads an API Gateway REST proxy event")
        .map(Body::new)
}

fn event(fixture: &str) -> Value {
    serde_json::from_str(fixture).unwrap()
}

/// Adds a header the way API Gateway delivers it: in both header maps.
fn with_header(mut event: Value, name: &str, value: &str) -> Value {
    event["headers"][name] = value.into();
    event["multiValueHeaders"][name] = serde_json::json!([value]);
    event
}

fn with_source_ip(mut event: Value, ip: &str) -> Value {
    event["requestContext"]["identity"]["sourceIp"] = ip.into();
    event
}

async fn serve(router: Router, event: &Value) -> (Response, Value) {
    let response = router.oneshot(request(event)).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (Response::from_parts(parts, Body::empty()), json)
}

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// A refused render as the rate limit answers it: the body was read (so the base64 multipart
/// survived the conversion and the replay validated) and the limit's headers are there.
fn assert_rate_limited(response: &Response, body: &Value) {
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(header(response, "content-type"), "application/problem+json");
    assert_eq!(body["code"], "rate_limited");
    assert_eq!(header(response, "retry-after"), "30");
    assert_eq!(header(response, "x-ratelimit-limit"), "5");
    assert_eq!(header(response, "x-ratelimit-remaining"), "0");
    header(response, "x-ratelimit-reset");
}

/// `event` served by the render function with `vars`: refused by the rate limit (so read
/// whole). The clients the limiter was asked about.
async fn rate_limited_render(vars: &[(&str, &str)], event: &Value) -> Vec<(String, String)> {
    let limiter = Arc::new(RecordingLimiter::default());
    let router = lambda::router(routes::render::routes(), app(vars, limiter.clone()));
    let (response, body) = serve(router, event).await;
    assert_rate_limited(&response, &body);
    limiter.asked()
}

#[tokio::test]
async fn render_from_a_direct_client_is_keyed_by_its_source_ip() {
    let asked = rate_limited_render(&[], &event(RENDER_EVENT)).await;
    assert_eq!(asked, [("render".into(), SOURCE_IP.into())]);
}

#[tokio::test]
async fn render_through_a_trusted_proxy_is_keyed_by_cf_connecting_ip() {
    let vars = [("TRUSTED_PROXY_CIDRS", "203.0.113.0/24")];
    let event = with_header(event(RENDER_EVENT), "CF-Connecting-IP", CF_CLIENT_IP);
    let asked = rate_limited_render(&vars, &event).await;
    assert_eq!(asked, [("render".into(), CF_CLIENT_IP.into())]);
}

#[tokio::test]
async fn cf_connecting_ip_from_an_untrusted_peer_is_ignored() {
    // The default: Cloudflare's ranges, which the fixture's source IP is not in.
    let event = with_header(event(RENDER_EVENT), "CF-Connecting-IP", CF_CLIENT_IP);
    let asked = rate_limited_render(&[], &event).await;
    assert_eq!(asked, [("render".into(), SOURCE_IP.into())]);
}

#[tokio::test]
async fn an_ipv6_source_is_keyed_by_its_prefix() {
    let limiter = Arc::new(RecordingLimiter::default());
    let router = lambda::router(routes::jobs::routes(), app(&[], limiter.clone()));
    let event = with_source_ip(event(GET_JOB_EVENT), "2001:db8:aa:bb:1:2:3:4");

    let (response, body) = serve(router, &event).await;

    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(header(&response, "x-ratelimit-limit"), "120");
    let expected = ClientKey::new("2001:db8:aa:bb::".parse().unwrap(), 64);
    assert_eq!(limiter.asked(), [("jobs".into(), expected.as_str().into())]);
}

#[tokio::test]
async fn a_bad_form_field_is_refused_before_the_limit() {
    let limiter = Arc::new(RecordingLimiter::default());
    let router = lambda::router(routes::render::routes(), app(&[], limiter.clone()));
    let mut event = event(RENDER_EVENT);
    let base64 = base64::engine::general_purpose::STANDARD;
    let form = base64.decode(event["body"].as_str().unwrap()).unwrap();
    let at = form.windows(5).position(|w| w == b"1080p").unwrap();
    let mut bad = form.clone();
    bad.splice(at..at + 5, *b"8000p");
    event["body"] = base64.encode(&bad).into();

    let (response, body) = serve(router, &event).await;

    assert_eq!(
        response.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "{body}"
    );
    assert_eq!(
        header(&response, "content-type"),
        "application/problem+json"
    );
    assert_eq!(body["code"], "invalid_field");
    assert!(limiter.asked().is_empty());
}

#[tokio::test]
async fn the_stage_is_not_part_of_the_path_and_other_paths_are_404() {
    let limiter = Arc::new(RecordingLimiter::default());
    let router = lambda::router(routes::render::routes(), app(&[], limiter.clone()));
    // A function answers only its own routes (API Gateway sends it nothing else).
    let (response, body) = serve(router, &event(GET_JOB_EVENT)).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(body["code"], "not_found");
    assert!(limiter.asked().is_empty());
}

/// `ROUTES` (which openapi.yaml is held to) against the router the dev server serves: each
/// path answers a wrong method with a problem+json 405 naming the listed one in `Allow`. No
/// handler runs.
#[tokio::test]
async fn every_listed_route_is_served() {
    let limiter = Arc::new(RecordingLimiter::default());
    let app = app(&[("WEBHOOK_SECRET", &"k".repeat(64))], limiter.clone());
    let verifier = Verifier::from_app(&app).await.unwrap();
    let router = http::service(http::all_routes(verifier), app);
    for (method, path) in ROUTES {
        let uri = path.replace("{id}", "0b5c4a52-2d1e-4c4e-9a0f-6c1d2e3f4a5b");
        let request = Request::builder()
            .method("PATCH")
            .uri(&uri)
            .extension(PeerAddr(IpAddr::V4(Ipv4Addr::LOCALHOST)))
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        let allow = header(&response, header::ALLOW.as_str()).to_owned();
        assert!(
            allow.split(',').any(|m| m.trim() == *method),
            "{method} {path}: Allow: {allow}"
        );
        assert_eq!(
            header(&response, "content-type"),
            "application/problem+json",
            "{method} {path}"
        );
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "method_not_allowed", "{method} {path}");
        assert_eq!(body["status"], 405, "{method} {path}");
    }
    assert!(limiter.asked().is_empty());
}

/// CORS_ALLOW_ORIGIN (template.yaml's BrowserOrigin) puts the CORS headers on every answer,
/// refusals included, so a browser page can read the status, the problem and the rate limit;
/// without it, or empty (the template's default: CORS off), none.
#[tokio::test]
async fn answers_carry_the_configured_cors_origin() {
    let vars = [("CORS_ALLOW_ORIGIN", "https://osurender.example")];
    let router = lambda::router(
        routes::jobs::routes(),
        app(&vars, Arc::new(RecordingLimiter::default())),
    );
    let (response, body) = serve(router, &event(GET_JOB_EVENT)).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        "https://osurender.example"
    );
    assert_eq!(header(&response, "vary"), "Origin");
    let exposed = header(&response, "access-control-expose-headers");
    for name in [
        "Retry-After",
        "X-RateLimit-Remaining",
        "Location",
        "X-Request-Id",
    ] {
        assert!(exposed.contains(name), "{exposed}");
    }

    for vars in [&[][..], &[("CORS_ALLOW_ORIGIN", "")]] {
        let router = lambda::router(
            routes::jobs::routes(),
            app(vars, Arc::new(RecordingLimiter::default())),
        );
        let (response, _) = serve(router, &event(GET_JOB_EVENT)).await;
        assert!(
            response
                .headers()
                .get("access-control-allow-origin")
                .is_none(),
            "{vars:?}"
        );
    }
}

/// On Lambda the request id is API Gateway's (`requestContext.requestId`, what its access log
/// and `x-amzn-RequestId` say): the answer's `X-Request-Id` and its problem's `request_id`.
/// An event without one gets a UUID, as on the dev server.
#[tokio::test]
async fn the_request_id_is_api_gateways() {
    let gateway_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef";
    let router = || {
        lambda::router(
            routes::jobs::routes(),
            app(&[], Arc::new(RecordingLimiter::default())),
        )
    };
    let get_job = event(GET_JOB_EVENT);
    assert_eq!(get_job["requestContext"]["requestId"], gateway_id);
    let (response, body) = serve(router(), &get_job).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(header(&response, "x-request-id"), gateway_id);
    assert_eq!(body["request_id"], gateway_id, "{body}");

    // The fallback's 404 too (a function answers only its own routes).
    let mut elsewhere = get_job.clone();
    elsewhere["requestContext"]["requestId"] = "another-gateway-id".into();
    let render_only = lambda::router(
        routes::render::routes(),
        app(&[], Arc::new(RecordingLimiter::default())),
    );
    let (response, body) = serve(render_only, &elsewhere).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "{body}");
    assert_eq!(header(&response, "x-request-id"), "another-gateway-id");
    assert_eq!(body["request_id"], "another-gateway-id");

    let mut without = get_job.clone();
    without["requestContext"]
        .as_object_mut()
        .unwrap()
        .remove("requestId");
    let (response, body) = serve(router(), &without).await;
    let made_up = header(&response, "x-request-id");
    uuid::Uuid::parse_str(made_up).unwrap_or_else(|e| panic!("{made_up}: {e}"));
    assert_eq!(body["request_id"], made_up);
}

/// With an origin secret, an event without `X-Origin-Secret` is refused before the limiter is
/// asked; with it, `CF-Connecting-IP` from a trusted source names the client.
#[tokio::test]
async fn the_origin_secret_is_checked_before_anything_else() {
    let limiter = Arc::new(RecordingLimiter::default());
    let secret = "origin-secret-of-the-lambda-test";
    let vars = [
        ("CF_ORIGIN_SECRET", secret),
        ("TRUSTED_PROXY_CIDRS", "203.0.113.0/24"),
    ];
    let router = lambda::router(routes::render::routes(), app(&vars, limiter.clone()));
    let forwarded = with_header(event(RENDER_EVENT), "CF-Connecting-IP", CF_CLIENT_IP);

    let (response, body) = serve(router.clone(), &forwarded).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["code"], "origin_forbidden");
    assert!(limiter.asked().is_empty());

    let (response, body) = serve(router, &with_header(forwarded, "X-Origin-Secret", secret)).await;
    assert_rate_limited(&response, &body);
    assert_eq!(limiter.asked(), [("render".into(), CF_CLIENT_IP.into())]);
}

/// An origin secret that cannot be read at start does not stop the function: every event is
/// answered, 503 `secret_unavailable`, until a read succeeds.
#[tokio::test]
async fn an_unreadable_origin_secret_is_answered_with_503_until_it_can_be_read() {
    let arn = "arn:aws:secretsmanager:us-east-1:000000000000:secret:origin";
    let secret = "origin-secret-read-late-enough";
    let vars = [
        ("CF_ORIGIN_SECRET_ARN", arn),
        ("SECRET_REFRESH_INTERVAL", "0"),
    ];
    let (app, memory) = App::in_memory(config(&vars));
    app.read_secrets().await;
    let router = lambda::router(routes::jobs::routes(), app);
    let event = with_header(event(GET_JOB_EVENT), "X-Origin-Secret", secret);

    let (response, body) = serve(router.clone(), &event).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "secret_unavailable");
    assert_eq!(header(&response, "retry-after"), "5");

    memory.secrets.put(arn, secret);
    let (response, body) = serve(router, &event).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "{body}");
}
