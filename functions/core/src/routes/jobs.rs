//! `GET /v1/jobs/{id}` and `GET /v1/jobs`: job status, progress, queue position and artifacts.
//!
//! The reads themselves are a use case (usecases/jobs.rs).

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::{QueryParams, ValidQuery};
use crate::domain::caller::Caller;
use crate::domain::job::JobId;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::jobs::{self, JobQuery, ListParams};

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

async fn get_job(State(app): State<App>, JobPath(id): JobPath, caller: Caller) -> Response {
    jobs::read_job(&app, &caller, id)
        .await
        .respond(|view| Json(view).into_response())
}

impl QueryParams for ListParams {
    type Checked = JobQuery;

    fn check(self) -> Result<JobQuery, Rejection> {
        self.query()
    }
}

async fn list_jobs(
    State(app): State<App>,
    ValidQuery(query): ValidQuery<ListParams>,
    caller: Caller,
) -> Response {
    jobs::list_jobs(&app, &caller, &query)
        .await
        .respond(|page| Json(page).into_response())
}
