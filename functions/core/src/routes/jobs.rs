//! `GET /v1/jobs/{id}` and `GET /v1/jobs`: job status, progress, queue position and artifacts.
//!
//! The reads themselves are a use case (usecases/jobs.rs).

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::{QueryParams, ValidQuery};
use crate::domain::caller::Caller;
use crate::domain::job::JobId;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::jobs::{self, Artifact, JobQuery, ListParams};
use crate::usecases::status;

pub fn routes() -> Router<App> {
    Router::new()
        .route("/v1/jobs", get(list_jobs))
        .route("/v1/jobs/{id}", get(get_job))
        .route("/v1/jobs/{id}/video", get(get_video))
        .route("/v1/jobs/{id}/thumbnail", get(get_thumbnail))
        .route("/v1/status", get(get_status))
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

async fn get_video(State(app): State<App>, JobPath(id): JobPath, caller: Caller) -> Response {
    redirect_to(&app, &caller, id, Artifact::Video).await
}

async fn get_thumbnail(State(app): State<App>, JobPath(id): JobPath, caller: Caller) -> Response {
    redirect_to(&app, &caller, id, Artifact::Thumbnail).await
}

/// A 302 to the artifact's freshly presigned URL.
async fn redirect_to(app: &App, caller: &Caller, id: JobId, artifact: Artifact) -> Response {
    jobs::artifact_link(app, caller, id, artifact)
        .await
        .respond(|url| match HeaderValue::try_from(url) {
            Ok(location) => (StatusCode::FOUND, [(header::LOCATION, location)]).into_response(),
            Err(_) => Rejection::StorageFailed.into_response(),
        })
}

/// `GET /v1/status`: public, and cacheable for as long as its counts are kept (status.rs).
async fn get_status(State(app): State<App>) -> Response {
    match status::service_status(&app).await {
        Ok(answer) => {
            let max_age = format!("public, max-age={}", status::STATUS_INTERVAL.as_secs());
            let mut response = Json(answer).into_response();
            if let Ok(value) = HeaderValue::try_from(max_age) {
                response.headers_mut().insert(header::CACHE_CONTROL, value);
            }
            response
        }
        Err(rejection) => rejection.into_response(),
    }
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
