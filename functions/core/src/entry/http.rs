//! The HTTP service: the routes (routes/) with the middleware every request passes through
//! (log span and request id, deadline, no-store, the origin check) and the 404/405 answers;
//! shared by the dev server and every Lambda function.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tracing::Instrument;

use crate::support::problem::{self, Rejection};
use crate::usecases::app::App;
use crate::usecases::lifecycle::Verifier;
use crate::{domain::deadline, routes};

/// Every public route as (method, path): what `openapi.yaml` describes and `all_routes`
/// serves; a test holds all three to the same list.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/render"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("GET", "/v1/jobs/{id}/video"),
    ("GET", "/v1/jobs/{id}/thumbnail"),
    ("GET", "/v1/status"),
    ("POST", "/v1/jobs/{id}/webhook"),
    ("GET", "/v1/skins"),
    ("POST", "/v1/skins/upload"),
    ("POST", "/skins/upload"),
    ("GET", "/health"),
];

/// The id a request is known by: its answer's `X-Request-Id`, its problem's `request_id` and
/// its log lines' `request_id`. On Lambda, API Gateway's (`requestContext.requestId`, which its
/// access log and its own `x-amzn-RequestId` carry too), else the invocation's; elsewhere a
/// UUID made up per request. A client's `X-Request-Id` is not taken: anyone could pose as
/// another request in the logs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// On Lambda, the invocation's own id (the runtime's START and REPORT lines), when it is not
/// the request id: logged as `lambda_request_id` beside it.
#[derive(Debug, Clone)]
pub struct InvocationId(pub String);

/// The header every answer names its request in.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Cloudflare's id of the request at its edge (`<16 hex>-<colo>`), which its logs and its
/// error pages show: logged as the request's `cf_ray`, to find a client's report in both.
pub const CF_RAY_HEADER: &str = "cf-ray";

/// The longest `CF-Ray` logged: a ray is about 20 characters; a longer header is no ray.
const MAX_CF_RAY: usize = 64;

/// The latest instant a request may be answered at, set by the platform adapter (on Lambda:
/// the invocation's deadline less a margin); the configured `REQUEST_DEADLINE_MS` applies too.
#[derive(Debug, Clone, Copy)]
pub struct AnswerBy(pub tokio::time::Instant);

/// The header our edge (a Cloudflare Transform Rule) adds to every request it forwards, with
/// the value of `CF_ORIGIN_SECRET`.
pub const ORIGIN_SECRET_HEADER: &str = "x-origin-secret";

/// A function's (or the dev server's) service: its `routes`, `GET /health`, a problem+json
/// 404 for anything else and 405 for a wrong method, each request in its own log span, under
/// its deadline, never stored by a cache, and, with `CF_ORIGIN_SECRET`, only from our edge.
pub fn service(routes: Router<App>, app: App) -> Router {
    routes
        .route("/health", get(routes::health::handler))
        .fallback(not_found)
        // After every route: it applies to the routes registered before it.
        .method_not_allowed_fallback(method_not_allowed)
        // Innermost, so it also covers the fallbacks; under the deadline, which bounds a re-read
        // of the secret.
        .layer(middleware::from_fn_with_state(app.clone(), from_our_edge))
        .layer(middleware::from_fn_with_state(app.clone(), within_deadline))
        .layer(middleware::from_fn(no_store))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            absolute_location,
        ))
        .layer(middleware::from_fn(trace_request))
        .with_state(app)
}

/// A `Location` that is a path (a 409's, a stored 202's) is made absolute under
/// `PUBLIC_BASE_URL`, as every link is.
async fn absolute_location(State(app): State<App>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let absolute = response
        .headers()
        .get(header::LOCATION)
        .and_then(|location| location.to_str().ok())
        .filter(|location| location.starts_with('/'))
        .and_then(|path| HeaderValue::try_from(app.config.http.link(path)).ok());
    if let Some(location) = absolute {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// How long past its deadline a request's handler may run before it is abandoned. Every
/// backing call is bounded by the deadline already, so this only ever catches a bug; it stays
/// short so that the answer still comes before the platform's own timeout.
const ABANDON_AFTER_DEADLINE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs the request under its deadline (deadline.rs). A handler still running shortly past it
/// is abandoned with a 503: dropping it is no worse than the platform's kill it forestalls, and
/// nothing a handler does leaves a committed write without what it refers to.
async fn within_deadline(State(app): State<App>, request: Request, next: Next) -> Response {
    let configured = tokio::time::Instant::now() + app.config.http.request_deadline;
    let deadline = request
        .extensions()
        .get::<AnswerBy>()
        .map_or(configured, |by| by.0.min(configured));
    let handler = tokio::time::timeout_at(deadline + ABANDON_AFTER_DEADLINE, next.run(request));
    match deadline::run(deadline, handler).await {
        Ok(response) => response,
        Err(_) => {
            tracing::error!("request abandoned past its deadline");
            Rejection::DeadlineExceeded.into_response()
        }
    }
}

/// With an origin secret configured, a request without `X-Origin-Secret` equal to its current
/// or previous value is refused before anything else runs: no route, no quota, no backing
/// service (a wrong value may cost a bounded re-read of a stored secret, secrets.rs). Only
/// requests that pass reach the routes, where `CF-Connecting-IP` is believed from trusted
/// peers: the header alone proves nothing, any Cloudflare customer can set it.
async fn from_our_edge(State(app): State<App>, request: Request, next: Next) -> Response {
    if let Some(secret) = &app.origin_secret {
        let Some(presented) = request.headers().get(ORIGIN_SECRET_HEADER) else {
            return Rejection::OriginForbidden.into_response();
        };
        match secret.matches(presented.as_bytes()).await {
            Ok(true) => {}
            Ok(false) => return Rejection::OriginForbidden.into_response(),
            Err(_) => return Rejection::SecretUnavailable.into_response(),
        }
    }
    next.run(request).await
}

/// Every answer is about one moment's state (a job, a limit, a refusal): no cache may keep it,
/// unless its route says how long it may (`GET /v1/status`).
async fn no_store(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Every route on one router: the dev server's (on AWS each function serves its own part).
pub fn all_routes(verifier: Verifier) -> Router<App> {
    routes::render::routes()
        .merge(routes::jobs::routes())
        .merge(routes::webhook::routes(verifier))
        .merge(routes::skins::routes())
}

/// Runs the request inside a span naming it (request id, method, matched route, and Cloudflare's
/// `cf_ray` and Lambda's invocation id when there are), logs its status and latency when it is
/// answered, and names the request in the answer: `X-Request-Id`, and a problem's `request_id`.
async fn trace_request(request: Request, next: Next) -> Response {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), |id| id.0.clone());
    // The route template, never the raw path: ids and junk paths stay out of the field.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let span = tracing::info_span!(
        "request",
        request_id = request_id.as_str(),
        method = %request.method(),
        route,
        cf_ray = tracing::field::Empty,
        lambda_request_id = tracing::field::Empty,
    );
    if let Some(ray) = request.headers().get(CF_RAY_HEADER).and_then(cf_ray) {
        span.record("cf_ray", ray);
    }
    if let Some(invocation) = request.extensions().get::<InvocationId>() {
        span.record("lambda_request_id", invocation.0.as_str());
    }
    let header = HeaderValue::from_str(&request_id).ok();
    let started = Instant::now();
    async move {
        let mut response = problem::answering(request_id, next.run(request)).await;
        if let Some(header) = header {
            response.headers_mut().insert(REQUEST_ID_HEADER, header);
        }
        tracing::info!(
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_millis() as u64,
            "request answered"
        );
        response
    }
    .instrument(span)
    .await
}

/// A `CF-Ray` as Cloudflare writes it (letters, digits and `-`, at most `MAX_CF_RAY`); anything
/// else is not logged (the header is the client's to send where Cloudflare is not in front).
fn cf_ray(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let is_ray = !text.is_empty()
        && text.len() <= MAX_CF_RAY
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    is_ray.then_some(text)
}

async fn not_found() -> Response {
    Rejection::NotFound("no such route".into()).into_response()
}

async fn method_not_allowed(method: Method) -> Response {
    Rejection::MethodNotAllowed(format!(
        "{method} is not allowed here; see the Allow header"
    ))
    .into_response()
}
