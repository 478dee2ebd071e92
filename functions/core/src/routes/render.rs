//! `POST /v1/render`: the admission steps (admission.rs) over HTTP.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;

use super::{form_upload, PeerAddr};
use crate::admission::{admitted_response, submit_render, RENDER_ENDPOINT};
use crate::app::App;
use crate::domain::client::ClientKey;
use crate::domain::job::JobId;
use crate::metrics;
use crate::ports::idempotency::{Reply, KEY_HEADER};
use crate::request::Submission;

/// `POST /v1/render`.
pub fn routes() -> Router<App> {
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
