//! HTTP mapping: the routes, shared by the dev server and every Lambda function.

use std::net::{IpAddr, SocketAddr};

use axum::body::{Body, BodyDataStream};
use axum::extract::{ConnectInfo, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::admission::{submit_render, FormUpload, Submission};
use crate::app::App;
use crate::domain::{client::CF_CONNECTING_IP, resolve_client_ip, ClientKey};
use crate::health;
use crate::problem::{rate_limit_headers, Rejection};

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

/// A function's (or the dev server's) service: its `routes`, `GET /health` and a problem+json
/// 404 for anything else.
pub fn service(routes: Router<App>, app: App) -> Router {
    routes
        .route("/health", get(health::handler))
        .fallback(not_found)
        .with_state(app)
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
    let client = app.client_key(peer, &headers);
    let submission = submit_render(&app, &client, form_upload(&headers, body)).await;
    log_decision(&client, &submission);
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

fn log_decision(client: &ClientKey, submission: &Submission) {
    match &submission.outcome {
        Ok(job_id) => tracing::info!(decision = "admitted", %job_id, "render admitted"),
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

fn submission_response(submission: Submission) -> Response {
    submission.respond(|job_id| {
        let location = job_id.status_path();
        let body = json!({
            "job_id": job_id,
            "status": "queued",
            "links": { "status": location },
        });
        (
            StatusCode::ACCEPTED,
            [(header::LOCATION, location)],
            Json(body),
        )
            .into_response()
    })
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

async fn not_found() -> Response {
    Rejection::NotFound("no such route".into()).into_response()
}
