//! HTTP mapping: the routes, shared by the dev server and every Lambda function.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use axum::body::{Body, BodyDataStream};
use axum::extract::{ConnectInfo, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tracing::Instrument;

use crate::admission::{admitted_response, submit_render, RENDER_ENDPOINT};
use crate::request::{FormUpload, Submission};
use crate::app::App;
use crate::domain::{client::CF_CONNECTING_IP, resolve_client_ip, ClientKey, JobId};
use crate::idempotency::{Reply, KEY_HEADER};
use crate::problem::{rate_limit_headers, Rejection};
use crate::webhook::Verifier;
use crate::{deadline, health, job_status, metrics, skins, webhook};

/// Every public route as (method, path): what `openapi.yaml` describes and `all_routes`
/// serves; a test holds all three to the same list.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/render"),
    ("GET", "/v1/jobs"),
    ("GET", "/v1/jobs/{id}"),
    ("POST", "/v1/jobs/{id}/webhook"),
    ("GET", "/v1/skins"),
    ("POST", "/v1/skins/upload"),
    ("POST", "/skins/upload"),
    ("GET", "/health"),
];

/// The TCP peer of the request: the socket's remote address locally, API Gateway's
/// `sourceIp` on Lambda (inserted by the Lambda adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(peer) = parts.extensions.get::<PeerAddr>() {
            return Ok(*peer);
        }
        if let Some(ConnectInfo(addr)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            return Ok(PeerAddr(addr.ip()));
        }
        tracing::error!("request without a peer address");
        Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

impl App {
    /// The key this request's client is limited by (DESIGN.md §3).
    pub fn client_key(&self, peer: IpAddr, headers: &HeaderMap) -> ClientKey {
        let forwarded = headers
            .get(CF_CONNECTING_IP)
            .and_then(|value| value.to_str().ok());
        let ip = resolve_client_ip(peer, forwarded, &self.config.trusted_proxies);
        ClientKey::new(ip, self.config.ipv6_prefix_len)
    }
}

/// The id a request's log lines carry: Lambda's request id when the Lambda adapter supplied
/// one, else one made up per request.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The latest instant a request may be answered at, set by the platform adapter (on Lambda:
/// the invocation's deadline less a margin); the configured `REQUEST_DEADLINE_MS` applies too.
#[derive(Debug, Clone, Copy)]
pub struct AnswerBy(pub tokio::time::Instant);

/// A function's (or the dev server's) service: its `routes`, `GET /health`, a problem+json
/// 404 for anything else and 405 for a wrong method, each request in its own log span, under
/// its deadline, and never stored by a cache.
pub fn service(routes: Router<App>, app: App) -> Router {
    routes
        .route("/health", get(health::handler))
        .fallback(not_found)
        // After every route: it applies to the routes registered before it.
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), within_deadline))
        .layer(middleware::from_fn(no_store))
        .layer(middleware::from_fn(trace_request))
        .with_state(app)
}

/// How long past its deadline a request's handler may run before it is abandoned. Every
/// backing call is bounded by the deadline already, so this only ever catches a bug; it stays
/// short so that the answer still comes before the platform's own timeout.
const ABANDON_AFTER_DEADLINE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs the request under its deadline (deadline.rs). A handler still running shortly past it
/// is abandoned with a 503: dropping it is no worse than the platform's kill it forestalls, and
/// nothing a handler does leaves a committed write without what it refers to.
async fn within_deadline(State(app): State<App>, request: Request, next: Next) -> Response {
    let configured = tokio::time::Instant::now() + app.config.request_deadline;
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

/// Every answer is about one moment's state (a job, a limit, a refusal): no cache may keep it.
async fn no_store(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Every route on one router: the dev server's (on AWS each function serves its own part).
pub fn all_routes(verifier: Verifier) -> Router<App> {
    render_routes()
        .merge(job_status::routes())
        .merge(webhook::routes(verifier))
        .merge(skins::routes())
}

/// Runs the request inside a span naming it (request id, method, matched route) and logs its
/// status and latency when it is answered.
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
        request_id,
        method = %request.method(),
        route,
    );
    let started = Instant::now();
    async move {
        let response = next.run(request).await;
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

/// `POST /v1/render`.
pub fn render_routes() -> Router<App> {
    Router::new().route("/v1/render", post(render))
}

async fn render(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let client = app.client_key(peer, &headers);
    let key = headers.get(KEY_HEADER);
    let submission = submit_render(&app, &client, key, form_upload(&headers, body)).await;
    log_decision(&client, &submission);
    metrics::admission(RENDER_ENDPOINT, &submission.outcome, started.elapsed());
    submission_response(submission)
}

/// A multipart form body, streamed, with the headers that describe it.
pub(crate) fn form_upload(headers: &HeaderMap, body: Body) -> FormUpload<BodyDataStream> {
    let header_str = |name| headers.get(name).and_then(|v| v.to_str().ok());
    FormUpload {
        content_type: header_str(header::CONTENT_TYPE).map(str::to_owned),
        content_length: header_str(header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
        body: body.into_data_stream(),
    }
}

fn log_decision(client: &ClientKey, submission: &Submission<Reply<JobId>>) {
    match &submission.outcome {
        Ok(Reply::Fresh(job_id)) => {
            tracing::info!(decision = "admitted", %job_id, "render admitted")
        }
        Ok(Reply::Replayed(_)) => tracing::info!(decision = "replayed", "render retry replayed"),
        Err(rejection) => tracing::info!(
            decision = "rejected",
            reason = rejection.code(),
            // The key is counted by, never logged in full: the /64 or address's lock id is enough
            // to correlate one client's requests.
            client_lock = client.lock_id(),
            "render rejected"
        ),
    }
}

fn submission_response(submission: Submission<Reply<JobId>>) -> Response {
    submission.respond_replayable(|job_id| admitted_response(job_id).respond(false))
}

impl<T> Submission<T> {
    /// `accepted`'s response for what the submission made, or the rejection's problem; with the
    /// `X-RateLimit-*` headers once the limit has counted the request.
    pub(crate) fn respond(self, accepted: impl FnOnce(T) -> Response) -> Response {
        let mut response = match self.outcome {
            Ok(made) => accepted(made),
            Err(rejection) => rejection.into_response(),
        };
        if let Some(rate) = &self.rate {
            rate_limit_headers(rate, response.headers_mut());
        }
        response
    }
}

impl<T> Submission<Reply<T>> {
    /// As `respond`, but a retry of an idempotent request gets the first one's response.
    pub(crate) fn respond_replayable(self, accepted: impl FnOnce(T) -> Response) -> Response {
        self.respond(|reply| match reply {
            Reply::Fresh(made) => accepted(made),
            Reply::Replayed(response) => response.respond(true),
        })
    }
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
