//! `POST /v1/jobs/{id}/webhook`: render workers' signed reports (lifecycle.rs) over HTTP.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use serde_json::json;

use super::jobs::JobPath;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::lifecycle::{self, Verifier, MAX_BODY_BYTES, SIGNATURE_HEADER};

/// `POST /v1/jobs/{id}/webhook`.
pub fn routes(verifier: Verifier) -> Router<App> {
    Router::new()
        .route("/v1/jobs/{id}/webhook", post(webhook))
        .layer(Extension(verifier))
}

async fn webhook(
    State(app): State<App>,
    Extension(verifier): Extension<Verifier>,
    JobPath(id): JobPath,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let received = async {
        let body = read_body(&headers, body).await?;
        let signature = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok());
        lifecycle::receive(&app, &verifier, id, signature, &body).await
    };
    match received.await {
        Ok((status, progress)) => Json(json!({
            "job_id": id,
            "status": status,
            "progress": progress,
        }))
        .into_response(),
        Err(rejection) => {
            tracing::info!(%id, reason = rejection.code(), "webhook report refused");
            rejection.into_response()
        }
    }
}

/// At most `MAX_BODY_BYTES`, refused from the declared length when there is one.
async fn read_body(headers: &HeaderMap, body: Body) -> Result<bytes::Bytes, Rejection> {
    let too_large =
        || Rejection::PayloadTooLarge(format!("a report is at most {MAX_BODY_BYTES} bytes"));
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| too_large())
}
