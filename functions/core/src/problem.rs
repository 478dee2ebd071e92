//! Rejections as RFC 9457 problem documents, one stable `code` each. `detail` keeps clients of
//! the FastAPI original (`{"detail": …}`) working.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::limiter::RateDecision;

/// How long to wait before retrying when a dependency is down: long enough for a failover or a
/// cold pool, short enough that clients do not give up.
const RETRY_UNAVAILABLE_SECS: u64 = 5;
/// Capacity frees as renders finish, which takes minutes; asking back sooner only adds load.
const RETRY_CAPACITY_SECS: u64 = 30;

#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    InvalidFile(String),
    FileTooLarge(String),
    InvalidReplay(String),
    InvalidField(String),
    RateLimited(RateDecision),
    QueueFull,
    RenderCapacity,
    TooManyActiveJobs { limit: i64 },
    NotFound(String),
    StorageFailed,
    LimiterUnavailable,
    DatabaseUnavailable,
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidFile(_) => StatusCode::BAD_REQUEST,
            Self::FileTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidReplay(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::InvalidField(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RateLimited(_) | Self::TooManyActiveJobs { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::StorageFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Self::QueueFull
            | Self::RenderCapacity
            | Self::LimiterUnavailable
            | Self::DatabaseUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The stable machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidFile(_) => "invalid_file",
            Self::FileTooLarge(_) => "file_too_large",
            Self::InvalidReplay(_) => "invalid_replay",
            Self::InvalidField(_) => "invalid_field",
            Self::RateLimited(_) => "rate_limited",
            Self::QueueFull => "queue_full",
            Self::RenderCapacity => "render_capacity",
            Self::TooManyActiveJobs { .. } => "too_many_active_jobs",
            Self::NotFound(_) => "not_found",
            Self::StorageFailed => "storage_failed",
            Self::LimiterUnavailable => "limiter_unavailable",
            Self::DatabaseUnavailable => "database_unavailable",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::InvalidFile(_) => "Invalid file",
            Self::FileTooLarge(_) => "File too large",
            Self::InvalidReplay(_) => "Invalid replay",
            Self::InvalidField(_) => "Invalid field",
            Self::RateLimited(_) => "Rate limit exceeded",
            Self::QueueFull => "Render queue full",
            Self::RenderCapacity => "Render capacity exhausted",
            Self::TooManyActiveJobs { .. } => "Too many active jobs",
            Self::NotFound(_) => "Not found",
            Self::StorageFailed => "Storage failed",
            Self::LimiterUnavailable => "Rate limiter unavailable",
            Self::DatabaseUnavailable => "Database unavailable",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            Self::InvalidFile(d)
            | Self::FileTooLarge(d)
            | Self::InvalidReplay(d)
            | Self::InvalidField(d)
            | Self::NotFound(d) => d.clone(),
            Self::RateLimited(rate) => format!(
                "rate limit of {} requests exceeded; retry in {} s",
                rate.limit, rate.retry_after
            ),
            Self::QueueFull => "the render queue is full; try again later".into(),
            Self::RenderCapacity => "all renderers are busy; try again later".into(),
            Self::TooManyActiveJobs { limit } => {
                format!("at most {limit} active jobs per client; wait for one to finish")
            }
            Self::StorageFailed => "the replay could not be stored; nothing was queued".into(),
            Self::LimiterUnavailable => "the rate limiter is unavailable; try again".into(),
            Self::DatabaseUnavailable => "the job database is unavailable; try again".into(),
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited(rate) => Some(rate.retry_after),
            Self::QueueFull | Self::RenderCapacity | Self::TooManyActiveJobs { .. } => {
                Some(RETRY_CAPACITY_SECS)
            }
            Self::LimiterUnavailable | Self::DatabaseUnavailable => Some(RETRY_UNAVAILABLE_SECS),
            _ => None,
        }
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: String,
    code: &'a str,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = self.status();
        let problem = Problem {
            kind: format!("/problems/{}", self.code()),
            title: self.title(),
            status: status.as_u16(),
            detail: self.detail(),
            code: self.code(),
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Self::RateLimited(rate) = &self {
            rate_limit_headers(rate, &mut headers);
        }
        let body = serde_json::to_vec(&problem).expect("problem serializes");
        (status, headers, body).into_response()
    }
}

/// The `X-RateLimit-*` headers of a limited endpoint's response.
pub fn rate_limit_headers(rate: &RateDecision, headers: &mut HeaderMap) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(rate.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(rate.remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(rate.reset));
}
