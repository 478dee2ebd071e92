//! `GET /v1/jobs/{id}` and `GET /v1/jobs`: job status, progress, queue position and artifacts.
//!
//! The reads themselves are a use case (usecases/jobs.rs).

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::PeerAddr;
use crate::domain::job::JobId;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::jobs::{self, ListParams};

pub fn routes() -> Router<App> {
    Router::new()
        .route("/v1/jobs", get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job))
}

/// The `{id}` of a job route, parsed; a malformed one is a 400 problem.
pub struct JobPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobPath {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let invalid = || Rejection::InvalidJobId("the job id must be a UUID".into());
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| invalid())?;
        raw.parse().map(JobPath).map_err(|_| invalid())
    }
}

async fn get_job(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    JobPath(id): JobPath,
) -> Result<Response, Rejection> {
    let caller = app.caller(peer, &headers).await?;
    Ok(jobs::read_job(&app, &caller, id)
        .await
        .respond(|view| Json(view).into_response()))
}

async fn list_jobs(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Rejection> {
    let Query(params) = params.map_err(|e| Rejection::InvalidField(e.body_text()))?;
    let query = params.query()?;
    let caller = app.caller(peer, &headers).await?;
    Ok(jobs::list_jobs(&app, &caller, &query)
        .await
        .respond(|page| Json(page).into_response()))
}
