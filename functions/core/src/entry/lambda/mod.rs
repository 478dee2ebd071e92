//! Running the core as Lambda functions. Each function's `main` is `app()` — configuration,
//! the database secret, SDK clients and the pool, once per instance before the first event —
//! then `serve` (the HTTP functions: API Gateway events through the core's axum routes) or
//! `run_events` with one of the event handlers here (schedules, S3). `migrate` is the
//! exception: `serve_migrations` starts the runtime first and reads everything per event, so
//! that CloudFormation always gets its answer.

mod admin;
mod database;
mod events;
mod migrate;
mod websocket;

use std::future::Future;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use lambda_http::lambda_runtime::Context;
use lambda_http::request::RequestContext;
use lambda_http::{service_fn, LambdaEvent, RequestExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

use crate::entry::http::{AnswerBy, InvocationId, RequestId};
use crate::routes::PeerAddr;
use crate::{entry::http, support::aws, support::telemetry, App, Clients, Config};

pub use admin::{admin_event, admin_main, run_command};
pub use database::{postgres_config, secret_postgres_config, DbEndpoint};
pub use events::{dispatch_outbox, ingest_skins, object_key, run_janitor};
pub use lambda_http::Error;
pub use migrate::{
    custom_resource_response, migrate, serve_migrations, CustomResourceRequest,
    PHYSICAL_RESOURCE_ID,
};
pub use websocket::{websocket_event, GatewayAnswer};

/// Everything a function needs, built once per instance: logging, configuration, the AWS
/// clients and the Postgres pool (credentials from the database secret on AWS, read again when
/// the database refuses them: a rotation). Nothing connects yet; a bad configuration or an unreadable database secret fails the start, which
/// Lambda reports and retries.
pub async fn app() -> Result<App, Error> {
    telemetry::init();
    let config = Config::from_env()?;
    let sdk = aws::sdk_config(config.aws.timeout, config.aws.endpoint_url.as_deref()).await;
    let postgres = postgres_config(&config, &sdk).await?;
    let secret = database::rotating_secret(&sdk);
    let clients = Clients::from_parts(&config, sdk, postgres, secret)?;
    Ok(clients.app(config))
}

/// Serves `routes` (with `/health` and the 404) on the Lambda Runtime API, after reading the
/// origin secret (`CF_ORIGIN_SECRET_ARN`). A failed read does not stop the start: every
/// request is answered, 503 `secret_unavailable` until a read succeeds.
pub async fn serve(routes: Router<App>, app: App) -> Result<(), Error> {
    app.read_secrets().await;
    lambda_http::run(router(routes, app)).await
}

/// The router a function serves: the core's `http::service`, with API Gateway's source IP as
/// the peer and Lambda's request id as the request's, and the CORS headers of
/// `CORS_ALLOW_ORIGIN`. Public so the adapter tests drive exactly what runs on Lambda.
pub fn router(routes: Router<App>, app: App) -> Router {
    let origin = app
        .config
        .http
        .cors_allow_origin
        .as_deref()
        .and_then(|origin| HeaderValue::from_str(origin).ok());
    http::service(routes, app)
        .layer(middleware::from_fn(from_request_context))
        .layer(middleware::map_response(move |response| {
            allow_origin(origin.clone(), response)
        }))
}

/// Headers a browser script may read besides the CORS-safelisted ones: where a job is, when to
/// retry, the rate limit, whether an answer was replayed, the request's id.
const EXPOSED_HEADERS: &str = "Location, Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, \
                               X-RateLimit-Reset, RateLimit, RateLimit-Policy, Idempotent-Replayed, \
                               X-Request-Id";

/// The CORS headers of an actual request's answer (API Gateway answers the preflight OPTIONS
/// itself, template.yaml `Cors`).
async fn allow_origin(origin: Option<HeaderValue>, mut response: Response) -> Response {
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        if origin != "*" {
            headers.append(header::VARY, HeaderValue::from_static("Origin"));
        }
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED_HEADERS),
        );
    }
    response
}

/// Runs `handler` for each event of a non-HTTP function, inside a span with the request id.
pub async fn run_events<E, R, F, Fut>(app: App, handler: F) -> Result<(), Error>
where
    E: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    F: Fn(App, E) -> Fut,
    Fut: Future<Output = Result<R, Error>> + Send,
{
    event_loop(|event, _| handler(app.clone(), event)).await
}

/// The Runtime API's loop for the functions that are not HTTP (`run_events`, `admin`,
/// `migrate`): `handler` with each event and its context, inside a span with the request id.
async fn event_loop<E, R, F, Fut>(handler: F) -> Result<(), Error>
where
    E: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    F: Fn(E, Context) -> Fut,
    Fut: Future<Output = Result<R, Error>> + Send,
{
    lambda_http::lambda_runtime::run(service_fn(|event: LambdaEvent<E>| {
        let span = tracing::info_span!("event", request_id = %event.context.request_id);
        handler(event.payload, event.context).instrument(span)
    }))
    .await
}

async fn from_request_context(mut request: Request, next: Next) -> Response {
    if let Some(ip) = source_ip(&request) {
        request.extensions_mut().insert(PeerAddr(ip));
    }
    let gateway_id = gateway_request_id(&request);
    let mut invocation = None;
    if let Some(context) = request.lambda_context_ref() {
        invocation = Some(context.request_id.clone()).filter(|id| !id.is_empty());
        let answer_by = answer_by(context.deadline, SystemTime::now());
        if let Some(answer_by) = answer_by {
            request.extensions_mut().insert(answer_by);
        }
    }
    match (gateway_id, invocation) {
        (Some(gateway), invocation) => {
            if let Some(invocation) = invocation.filter(|id| *id != gateway) {
                request.extensions_mut().insert(InvocationId(invocation));
            }
            request.extensions_mut().insert(RequestId(gateway));
        }
        (None, Some(invocation)) => {
            request.extensions_mut().insert(RequestId(invocation));
        }
        (None, None) => {}
    }
    next.run(request).await
}

/// API Gateway's id of the request (`requestContext.requestId`): what its access log, its
/// `x-amzn-RequestId` header and its own answers (the gateway responses) name it by.
fn gateway_request_id(request: &Request) -> Option<String> {
    let id = match request.request_context_ref()? {
        RequestContext::ApiGatewayV1(ctx) => ctx.request_id.as_deref(),
        RequestContext::ApiGatewayV2(ctx) => ctx.request_id.as_deref(),
        _ => None,
    }?;
    Some(id.to_owned()).filter(|id| !id.is_empty())
}

/// Time kept between the request's deadline and the invocation's: to write the answer and
/// hand it to the runtime, so the platform never kills a request it could still answer.
const INVOCATION_MARGIN: Duration = Duration::from_millis(500);

/// Lambda runs an invocation for 15 minutes at most: a deadline further out is not one.
const MAX_INVOCATION: Duration = Duration::from_secs(15 * 60);

/// The invocation's deadline (epoch milliseconds, from the Runtime API) as the instant the
/// request must be answered by; `None` when the runtime gave none (0) or an implausible one.
fn answer_by(deadline_epoch_ms: u64, now: SystemTime) -> Option<AnswerBy> {
    let now_ms = u64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let left = Duration::from_millis(deadline_epoch_ms.checked_sub(now_ms)?);
    (deadline_epoch_ms != 0 && left <= MAX_INVOCATION)
        .then(|| AnswerBy(tokio::time::Instant::now() + left.saturating_sub(INVOCATION_MARGIN)))
}

/// `requestContext.identity.sourceIp` (REST API) or `requestContext.http.sourceIp` (HTTP API).
fn source_ip(request: &Request) -> Option<IpAddr> {
    let source = match request.request_context_ref()? {
        RequestContext::ApiGatewayV1(ctx) => ctx.identity.source_ip.as_deref(),
        RequestContext::ApiGatewayV2(ctx) => ctx.http.source_ip.as_deref(),
        _ => None,
    }?;
    source.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_end_a_margin_before_the_invocation_and_only_with_a_real_deadline() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let in_15_s = 1_800_000_015_000;
        let before = tokio::time::Instant::now();
        let AnswerBy(by) = answer_by(in_15_s, now).expect("a deadline 15 s out");
        let after = tokio::time::Instant::now();
        let left = Duration::from_millis(14_500);
        assert!(before + left <= by && by <= after + left);
        assert!(answer_by(0, now).is_none());
        assert!(
            answer_by(1_800_000_000_000 - 1, now).is_none(),
            "already passed"
        );
        assert!(
            answer_by(1_800_000_000_000 + 3_600_000, now).is_none(),
            "an hour out"
        );
    }
}
