//! `POST /v1/render`: the admission steps (admission.rs) over HTTP.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;

use super::{check_request_site, form_upload, PeerAddr};
use crate::domain::caller::Caller;
use crate::domain::job::JobId;
use crate::support::metrics;
use crate::usecases::admission::{admitted_response, submit_render, RENDER_ENDPOINT};
use crate::usecases::app::App;
use crate::usecases::idempotency::{Reply, KEY_HEADER};
use crate::usecases::request::Submission;

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
    // Another site's page is refused first, and like any refusal logged and counted.
    let caller = async {
        check_request_site(app.config.http.cors_allow_origin.as_deref(), &headers)?;
        app.caller(peer, &headers).await
    }
    .await;
    let submission = match &caller {
        Ok(caller) => {
            let key = headers.get(KEY_HEADER);
            submit_render(&app, caller, key, form_upload(&headers, body)).await
        }
        Err(rejection) => Submission::refused(rejection.clone()),
    };
    log_decision(caller.ok().as_ref(), &submission);
    metrics::admission(RENDER_ENDPOINT, &submission.outcome, started.elapsed());
    submission_response(&app, submission)
}

fn log_decision(caller: Option<&Caller>, submission: &Submission<Reply<JobId>>) {
    match &submission.outcome {
        Ok(Reply::Fresh(job_id)) => {
            tracing::info!(decision = "admitted", %job_id, "render admitted")
        }
        Ok(Reply::Replayed(_)) => tracing::info!(decision = "replayed", "render retry replayed"),
        Err(rejection) => tracing::info!(
            decision = "rejected",
            reason = rejection.code(),
            // The client is counted by, never logged in full: its lock id (of the address's /64
            // or address, or of the key) is enough to correlate one client's requests.
            client_lock = caller.map(|caller| caller.client().lock_id()),
            "render rejected"
        ),
    }
}

fn submission_response(app: &App, submission: Submission<Reply<JobId>>) -> Response {
    submission.respond_replayable(|job_id| admitted_response(&app.config, job_id).respond(false))
}
