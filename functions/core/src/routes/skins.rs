//! `GET /v1/skins`, `POST /v1/skins/upload` and the legacy `POST /skins/upload`: the skin use
//! cases (skins/) over HTTP. As on every route, a request with `Authorization: Bearer` is its
//! key's client (its limits are counted by the key), or a 401 (usecases/keys/caller.rs). An
//! upload sent for another site's page is refused first (`AllowedSite`).

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::{form_upload, AllowedSite, QueryParams, ValidQuery};
use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::render::SkinName;
use crate::support::metrics;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::idempotency::{Reply, KEY_HEADER};
use crate::usecases::policy::check_caller_ban;
use crate::usecases::request::Submission;
use crate::usecases::skins::upload::UploadRoute;
use crate::usecases::skins::PageRequest;
use crate::usecases::skins::{list_skins, upload};

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
    Router::new()
        .route("/v1/skins/upload", post(upload))
        .layer(Extension(UploadRoute::V1))
}

/// `POST /skins/upload`.
pub fn legacy_upload_routes() -> Router<App> {
    Router::new()
        .route("/skins/upload", post(upload))
        .layer(Extension(UploadRoute::Legacy))
}

/// `GET /v1/skins` query parameters; anything else is ignored.
#[derive(Debug, Deserialize)]
struct ListParams {
    cursor: Option<String>,
    limit: Option<String>,
}

/// A malformed page request is refused before the rate limit counts it.
impl QueryParams for ListParams {
    type Checked = PageRequest;

    fn check(self) -> Result<PageRequest, Rejection> {
        PageRequest::parse(self.cursor.as_deref(), self.limit.as_deref())
    }
}

async fn list(
    State(app): State<App>,
    ValidQuery(page): ValidQuery<ListParams>,
    caller: Caller,
) -> Response {
    list_skins(&app, caller.client(), &page)
        .await
        .respond(|page| Json(page).into_response())
}

/// A multipart upload; on `/v1`, with a JSON body, the request for a presigned one.
async fn upload(
    State(app): State<App>,
    Extension(route): Extension<UploadRoute>,
    _: AllowedSite,
    headers: HeaderMap,
    caller: Caller,
    body: Body,
) -> Response {
    let started = Instant::now();
    if let Err(banned) = check_caller_ban(&app, &caller).await {
        return refused_banned(caller.client(), route, banned, started);
    }
    if route == UploadRoute::Legacy || !is_json(&headers) {
        return direct_upload(&app, &caller, route, &headers, body).await;
    }
    let submission = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(request) => upload::request_upload(&app, &caller, &request).await,
        Err(_) => Submission::refused(Rejection::InvalidBody(format!(
            "a presigned-upload request is a JSON object of at most {MAX_REQUEST_BYTES} bytes"
        ))),
    };
    log_decision(
        "skin upload requested",
        caller.client(),
        &submission.outcome.as_ref().map(|u| &u.skin),
    );
    metrics::admission(route.endpoint(), &submission.outcome, started.elapsed());
    submission.respond(|presigned| Json(presigned).into_response())
}

/// An upload from a banned address or key: refused before the body is read or any quota
/// spent (DESIGN.md §2, "The operator's policy").
fn refused_banned(
    client: &ClientKey,
    route: UploadRoute,
    banned: Rejection,
    started: Instant,
) -> Response {
    log_decision("skin upload", client, &Err(&banned));
    let outcome: Result<Reply<SkinName>, Rejection> = Err(banned.clone());
    metrics::admission(route.endpoint(), &outcome, started.elapsed());
    banned.into_response()
}

async fn direct_upload(
    app: &App,
    caller: &Caller,
    route: UploadRoute,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let key = headers.get(KEY_HEADER);
    let upload = form_upload(headers, body);
    let submission = upload::upload_skin(app, caller, route, key, upload).await;
    let client = caller.client();
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
