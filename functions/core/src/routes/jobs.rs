//! `GET /v1/jobs/{id}` and `GET /v1/jobs`: job status, progress, queue position and artifacts.
//!
//! Reads are rate-limited per client under their own generous limit (`RATE_LIMIT_READ`,
//! endpoint `jobs`), after the request itself has been checked, so a malformed one costs no
//! quota. Nothing shown identifies the submitter: the store does not even select it.

use std::net::IpAddr;
use std::time::Duration;

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::PeerAddr;
use crate::app::App;
use crate::domain::job::{JobId, JobStatus};
use crate::domain::rate::RateDecision;
use crate::estimate::{Defaults, Recent};
use crate::ports::jobs::{JobQuery, JobRecord};
use crate::problem::Rejection;
use crate::request::{check_rate_limit, Submission};

/// The rate-limited endpoint name both reads count against.
pub const JOBS_ENDPOINT: &str = "jobs";
pub const DEFAULT_PAGE: i64 = 20;
pub const MAX_PAGE: i64 = 100;
/// Deeper pages cost the database a scan of every row skipped; nobody pages this far by hand.
pub const MAX_OFFSET: i64 = 10_000;

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
) -> Response {
    let rate = match limit_reads(&app, peer, &headers).await {
        Ok(rate) => rate,
        Err(rejection) => return rejection.into_response(),
    };
    let outcome = match app.jobs.find(id).await {
        Ok(Some(job)) => Ok(JobView::new(&app, job).await),
        Ok(None) => Err(Rejection::NotFound(format!("no job {id}"))),
        Err(error) => Err(unavailable(error)),
    };
    Submission { outcome, rate }.respond(|view| Json(view).into_response())
}

/// `GET /v1/jobs` query parameters; anything else is ignored.
#[derive(Debug, Deserialize)]
pub struct ListParams {
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    pub status: Option<String>,
}

impl ListParams {
    pub fn query(&self) -> Result<JobQuery, Rejection> {
        let invalid = |reason: String| Rejection::InvalidField(reason);
        let limit = self.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(invalid(format!("limit: must be 1 to {MAX_PAGE}")));
        }
        let offset = self.offset.unwrap_or(0);
        if !(0..=MAX_OFFSET).contains(&offset) {
            return Err(invalid(format!("offset: must be 0 to {MAX_OFFSET}")));
        }
        let status = self
            .status
            .as_deref()
            .map(str::parse::<JobStatus>)
            .transpose()
            .map_err(|e| invalid(format!("status: {e}")))?;
        Ok(JobQuery {
            status,
            limit,
            offset,
        })
    }
}

#[derive(Serialize)]
struct JobPage {
    items: Vec<JobView>,
    total: i64,
    limit: i64,
    offset: i64,
}

async fn list_jobs(
    State(app): State<App>,
    PeerAddr(peer): PeerAddr,
    headers: HeaderMap,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match params {
        Ok(Query(params)) => params.query(),
        Err(rejection) => Err(Rejection::InvalidField(rejection.body_text())),
    };
    let query = match query {
        Ok(query) => query,
        Err(rejection) => return rejection.into_response(),
    };
    let rate = match limit_reads(&app, peer, &headers).await {
        Ok(rate) => rate,
        Err(rejection) => return rejection.into_response(),
    };
    let outcome = match app.jobs.list(&query).await {
        Ok((jobs, total)) => {
            let mut items = Vec::with_capacity(jobs.len());
            for job in jobs {
                items.push(JobView::new(&app, job).await);
            }
            Ok(JobPage {
                items,
                total,
                limit: query.limit,
                offset: query.offset,
            })
        }
        Err(error) => Err(unavailable(error)),
    };
    Submission { outcome, rate }.respond(|page| Json(page).into_response())
}

/// Both reads count against one generous per-client window.
async fn limit_reads(
    app: &App,
    peer: IpAddr,
    headers: &HeaderMap,
) -> Result<Option<RateDecision>, Rejection> {
    let client = app.client_key(peer, headers);
    check_rate_limit(app, JOBS_ENDPOINT, app.config.rate_limits.read, &client).await
}

fn unavailable(error: crate::ports::StoreError) -> Rejection {
    tracing::error!(%error, "job read failed");
    Rejection::DatabaseUnavailable
}

/// A job as the API shows it.
#[derive(Debug, Serialize)]
pub struct JobView {
    job_id: JobId,
    status: JobStatus,
    progress: f32,
    queue_position: Option<i64>,
    /// When a queued job should start rendering, from recent throughput (estimate.rs).
    estimated_start: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    error: Option<String>,
    config: serde_json::Value,
    artifacts: Option<Artifacts>,
    links: Links,
}

#[derive(Debug, Serialize)]
struct Links {
    #[serde(rename = "self")]
    this: String,
}

/// Short-lived presigned GET URLs of a completed job's video and thumbnail.
#[derive(Debug, Serialize)]
struct Artifacts {
    video_url: String,
    thumb_url: Option<String>,
    expires_at: DateTime<Utc>,
}

impl JobView {
    async fn new(app: &App, job: JobRecord) -> Self {
        let artifacts = match (job.status, &job.video_key) {
            (JobStatus::Completed, Some(video_key)) => {
                artifacts(app, video_key, job.thumb_key.as_deref()).await
            }
            _ => None,
        };
        Self {
            job_id: job.id,
            status: job.status,
            progress: job.progress,
            queue_position: job.queue_position,
            estimated_start: estimated_start(app, &job),
            created_at: job.created_at,
            updated_at: job.updated_at,
            error: job.error,
            config: job.config,
            artifacts,
            links: Links {
                this: job.id.status_path(),
            },
        }
    }
}

/// `queue_position / λ` from now; `None` unless the job is queued.
fn estimated_start(app: &App, job: &JobRecord) -> Option<DateTime<Utc>> {
    let (position, completed) = job.queue_position.zip(job.recent_completed)?;
    let recent = Recent {
        completed,
        median_turnaround_secs: None,
    };
    let wait = recent.start_in(&Defaults::from(&*app.config), position);
    Some(Utc::now() + wait)
}

/// Presigning is local work (no request is made); it fails only without credentials, and then
/// the job is shown without artifacts rather than not at all.
async fn artifacts(app: &App, video_key: &str, thumb_key: Option<&str>) -> Option<Artifacts> {
    let ttl = app.config.artifact_url_ttl;
    let presigned = async {
        let video_url = presign(app, video_key, ttl).await?;
        let thumb_url = match thumb_key {
            Some(key) => Some(presign(app, key, ttl).await?),
            None => None,
        };
        Ok::<_, String>(Artifacts {
            video_url,
            thumb_url,
            expires_at: Utc::now() + ttl,
        })
    };
    presigned
        .await
        .inspect_err(|error| tracing::error!(%error, "could not presign artifact URLs"))
        .ok()
}

async fn presign(app: &App, key: &str, ttl: Duration) -> Result<String, String> {
    app.artifacts
        .link(key, ttl)
        .await
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(limit: Option<i64>, offset: Option<i64>, status: Option<&str>) -> ListParams {
        ListParams {
            limit,
            offset,
            status: status.map(str::to_owned),
        }
    }

    #[test]
    fn list_parameters_default_and_are_bounded() {
        assert_eq!(
            params(None, None, None).query().unwrap(),
            JobQuery {
                status: None,
                limit: 20,
                offset: 0
            }
        );
        let q = params(Some(100), Some(40), Some("rendering"))
            .query()
            .unwrap();
        assert_eq!(
            (q.limit, q.offset, q.status),
            (100, 40, Some(JobStatus::Rendering))
        );
        for (bad, field) in [
            (params(Some(0), None, None), "limit"),
            (params(Some(101), None, None), "limit"),
            (params(None, Some(-1), None), "offset"),
            (params(None, Some(10_001), None), "offset"),
            (params(None, None, Some("paused")), "status"),
        ] {
            let err = bad.query().unwrap_err();
            assert_eq!(err.code(), "invalid_field");
            assert!(err.detail().starts_with(field), "{}", err.detail());
        }
    }
}
