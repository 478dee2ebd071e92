//! Skins: which ones can be rendered with (`GET /v1/skins`), uploads (`POST /v1/skins/upload`,
//! and the legacy `POST /skins/upload`, which counts its rate limit separately), presigned
//! uploads of large skins and their ingest.
//!
//! Read `upload` for the admission steps, `archive` for what a valid skin is, `store` for where
//! skins live and how a name is claimed race-free, `ingest` for presigned uploads' arrival.

pub mod archive;
pub mod ingest;
pub mod presign;
pub mod store;
pub mod upload;

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::request::{check_rate_limit, Submission};
use crate::app::App;
use crate::domain::{ClientKey, SkinName};
use crate::http::{form_upload, PeerAddr};
use crate::idempotency::{Reply, KEY_HEADER};
use crate::metrics;
use crate::problem::Rejection;

pub use ingest::{ingest, ingest_pending, IngestError, IngestOutcome};
pub use upload::{UploadRoute, DEFAULT_SKIN};

/// The limiter's endpoint name of `GET /v1/skins`.
pub const LIST_ENDPOINT: &str = "skins";

/// Most skins a listing reads (ten S3 pages): a bound on the work of one request.
const MAX_LISTED: usize = 10_000;

/// A presigned-upload request is a small JSON object.
const MAX_REQUEST_BYTES: usize = 4 * 1024;

/// All three skin routes (the dev server's); on AWS each is its own function.
pub fn routes() -> Router<App> {
    list_routes()
        .merge(upload_routes())
        .merge(legacy_upload_routes())
}

/// `GET /v1/skins`.
pub fn list_routes() -> Router<App> {
    Router::new().route("/v1/skins", get(list))
}

/// `POST /v1/skins/upload`.
pub fn upload_routes() -> Router<App> {
    Router::new().route("/v1/skins/upload", post(upload_v1))
}

/// `POST /skins/upload`.
pub fn legacy_upload_routes() -> Router<App> {
    Router::new().route("/skins/upload", post(upload_legacy))
}

/// The skins a render may name: `Default` and every uploaded one, sorted.
pub async fn list_skins(app: &App, client: &ClientKey) -> Submission<Vec<SkinName>> {
    let rate = match check_rate_limit(app, LIST_ENDPOINT, app.config.rate_limits.read, client).await
    {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = app
        .skins
        .list(MAX_LISTED)
        .await
        .map(|uploaded| {
            let mut names = uploaded;
            names.push(SkinName::default());
            names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            names.dedup();
            names
        })
        .map_err(|error| {
            tracing::error!(%error, "listing skins failed");
            Rejection::SkinStorageUnavailable
        });
    Submission { outcome, rate }
}

async fn list(State(app): State<App>, PeerAddr(peer): PeerAddr, headers: HeaderMap) -> Response {
    let client = app.client_key(peer, &headers);
    list_skins(&app, &client)
        .await
        .respond(|names| Json(json!({ "skins": names })).into_response())
}

/// A multipart upload, or with a JSON body the request for a presigned one.
async fn upload_v1(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let client = app.client_key(peer, &headers);
    if !is_json(&headers) {
        return direct_upload(&app, &client, UploadRoute::V1, &headers, body).await;
    }
    let submission = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(request) => upload::request_upload(&app, &client, &request).await,
        Err(_) => Submission::refused(Rejection::InvalidBody(format!(
            "a presigned-upload request is a JSON object of at most {MAX_REQUEST_BYTES} bytes"
        ))),
    };
    log_decision(
        "skin upload requested",
        &client,
        &submission.outcome.as_ref().map(|u| &u.skin),
    );
    metrics::admission(
        UploadRoute::V1.endpoint(),
        &submission.outcome,
        started.elapsed(),
    );
    submission.respond(|presigned| Json(presigned).into_response())
}

async fn upload_legacy(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let client = app.client_key(peer, &headers);
    direct_upload(&app, &client, UploadRoute::Legacy, &headers, body).await
}

async fn direct_upload(
    app: &App,
    client: &ClientKey,
    route: UploadRoute,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let key = headers.get(KEY_HEADER);
    let upload = form_upload(headers, body);
    let submission = upload::upload_skin(app, client, route, key, upload).await;
    match &submission.outcome {
        Ok(Reply::Fresh(name)) => log_decision("skin upload", client, &Ok(name)),
        Ok(Reply::Replayed(_)) => tracing::info!(decision = "replayed", "skin upload replayed"),
        Err(rejection) => log_decision("skin upload", client, &Err(rejection)),
    }
    metrics::admission(route.endpoint(), &submission.outcome, started.elapsed());
    submission.respond_replayable(|name| upload::uploaded_response(&name).respond(false))
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

fn log_decision(what: &str, client: &ClientKey, outcome: &Result<&SkinName, &Rejection>) {
    match outcome {
        Ok(name) => tracing::info!(decision = "admitted", skin = name.as_str(), "{what}"),
        Err(rejection) => tracing::info!(
            decision = "rejected",
            reason = rejection.code(),
            client_lock = client.lock_id(),
            "{what}"
        ),
    }
}
