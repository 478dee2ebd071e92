//! Rejections as RFC 9457 problem documents, one stable `code` each. `detail` keeps clients of
//! the FastAPI original (`{"detail": …}`) working.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::domain::job::JobId;
use crate::domain::rate::{LimitScope, RateDecision};

/// How long to wait before retrying when a dependency is down: long enough for a failover or a
/// cold pool, short enough that clients do not give up.
pub(crate) const RETRY_UNAVAILABLE_SECS: u64 = 5;
/// A retry that found its key's first request still running may look again in a second.
const RETRY_IN_PROGRESS_SECS: u64 = 1;

#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    InvalidFile(String),
    FileTooLarge(String),
    InvalidReplay(String),
    /// An `.osk` that is not a valid skin archive (skins::archive).
    InvalidSkin(String),
    /// The skin name is taken (uploaded before, or built in).
    SkinExists(String),
    InvalidField(String),
    /// A fixed window is spent: whose (the client's, its network's, its key's) is named.
    RateLimited(RateDecision, LimitScope),
    /// The capacity refusals carry their `Retry-After` estimate (estimate.rs).
    QueueFull {
        retry_after: u64,
    },
    RenderCapacity {
        retry_after: u64,
    },
    TooManyActiveJobs {
        limit: i64,
        retry_after: u64,
        scope: LimitScope,
    },
    /// This client has the same replay queued or rendering already: that job, named only to a
    /// key's client (an address may be shared: its other users must not learn the id).
    DuplicateReplay(Option<JobId>),
    InvalidIdempotencyKey(String),
    /// The key was used with a different request.
    IdempotencyKeyReused(String),
    /// The key's first request is still running (past the bounded wait).
    IdempotencyInProgress,
    NotFound(String),
    /// The route exists, the method does not (axum keeps the `Allow` header).
    MethodNotAllowed(String),
    InvalidJobId(String),
    InvalidBody(String),
    PayloadTooLarge(String),
    /// Webhook authentication: a signature that does not verify, a timestamp outside the
    /// accepted skew, a nonce seen before.
    InvalidSignature,
    StaleTimestamp,
    /// `Authorization` is not `Bearer` and a well-formed key, or names no key that counts
    /// (unknown, revoked): the detail says which.
    InvalidApiKey(String),
    /// A request without `Authorization` where only a key may ask: the job listing (issue 19:
    /// an address is not an identity, so it lists no one's jobs).
    ApiKeyRequired,
    NonceReused,
    /// A genuine report, signed for another job than the URL's: a replay attempt.
    WrongJob,
    IllegalTransition(String),
    /// The replay store refused the write (a missing bucket, denied access): a fault of ours.
    StorageFailed,
    /// The replay store did not answer in time or was unwell: worth a retry.
    ReplayStorageUnavailable,
    /// Skin storage (S3) did not answer: listing, storing or signing an upload failed.
    SkinStorageUnavailable,
    LimiterUnavailable,
    DatabaseUnavailable,
    /// The job database did not answer whether the job was admitted, and it could not be
    /// learned in time: the job may exist.
    AdmissionUnknown,
    /// The request's deadline (`REQUEST_DEADLINE_MS`) ran out before it could be answered.
    DeadlineExceeded,
    /// The request did not come through our edge: no or a wrong `X-Origin-Secret`.
    OriginForbidden,
    /// A secret the request is checked against (origin, webhook) could not be read.
    SecretUnavailable,
    /// The `callback_url`'s host could not be looked up (no answer in time, a resolver
    /// failure): whether it is allowed is unknown, not no.
    CallbackHostUnavailable,
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidFile(_) => StatusCode::BAD_REQUEST,
            Self::FileTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidReplay(_) | Self::InvalidSkin(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::SkinExists(_) | Self::DuplicateReplay(_) | Self::IdempotencyInProgress => {
                StatusCode::CONFLICT
            }
            Self::InvalidField(_) | Self::IdempotencyKeyReused(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::InvalidIdempotencyKey(_) => StatusCode::BAD_REQUEST,
            Self::RateLimited(..) | Self::TooManyActiveJobs { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::InvalidJobId(_) | Self::InvalidBody(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::InvalidSignature
            | Self::StaleTimestamp
            | Self::NonceReused
            | Self::InvalidApiKey(_)
            | Self::ApiKeyRequired => StatusCode::UNAUTHORIZED,
            Self::OriginForbidden => StatusCode::FORBIDDEN,
            Self::WrongJob => StatusCode::FORBIDDEN,
            Self::IllegalTransition(_) => StatusCode::CONFLICT,
            Self::StorageFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Self::QueueFull { .. }
            | Self::RenderCapacity { .. }
            | Self::ReplayStorageUnavailable
            | Self::SkinStorageUnavailable
            | Self::LimiterUnavailable
            | Self::DatabaseUnavailable
            | Self::AdmissionUnknown
            | Self::DeadlineExceeded
            | Self::SecretUnavailable
            | Self::CallbackHostUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The stable machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidFile(_) => "invalid_file",
            Self::FileTooLarge(_) => "file_too_large",
            Self::InvalidReplay(_) => "invalid_replay",
            Self::InvalidSkin(_) => "invalid_skin",
            Self::SkinExists(_) => "skin_exists",
            Self::InvalidField(_) => "invalid_field",
            Self::RateLimited(..) => "rate_limited",
            Self::QueueFull { .. } => "queue_full",
            Self::RenderCapacity { .. } => "render_capacity",
            Self::TooManyActiveJobs { .. } => "too_many_active_jobs",
            Self::DuplicateReplay(_) => "duplicate_replay",
            Self::InvalidIdempotencyKey(_) => "invalid_idempotency_key",
            Self::IdempotencyKeyReused(_) => "idempotency_key_reused",
            Self::IdempotencyInProgress => "idempotency_in_progress",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::InvalidJobId(_) => "invalid_job_id",
            Self::InvalidBody(_) => "invalid_body",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::InvalidSignature => "invalid_signature",
            Self::StaleTimestamp => "stale_timestamp",
            Self::NonceReused => "nonce_reused",
            Self::InvalidApiKey(_) => "invalid_api_key",
            Self::ApiKeyRequired => "api_key_required",
            Self::WrongJob => "wrong_job",
            Self::IllegalTransition(_) => "illegal_transition",
            Self::StorageFailed => "storage_failed",
            Self::SkinStorageUnavailable | Self::ReplayStorageUnavailable => "storage_unavailable",
            Self::LimiterUnavailable => "limiter_unavailable",
            Self::DatabaseUnavailable => "database_unavailable",
            Self::AdmissionUnknown => "admission_unknown",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::OriginForbidden => "origin_forbidden",
            Self::SecretUnavailable => "secret_unavailable",
            Self::CallbackHostUnavailable => "callback_host_unavailable",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::InvalidFile(_) => "Invalid file",
            Self::FileTooLarge(_) => "File too large",
            Self::InvalidReplay(_) => "Invalid replay",
            Self::InvalidSkin(_) => "Invalid skin",
            Self::SkinExists(_) => "Skin exists",
            Self::InvalidField(_) => "Invalid field",
            Self::RateLimited(..) => "Rate limit exceeded",
            Self::QueueFull { .. } => "Render queue full",
            Self::RenderCapacity { .. } => "Render capacity exhausted",
            Self::TooManyActiveJobs { .. } => "Too many active jobs",
            Self::DuplicateReplay(_) => "Duplicate replay",
            Self::InvalidIdempotencyKey(_) => "Invalid idempotency key",
            Self::IdempotencyKeyReused(_) => "Idempotency key reused",
            Self::IdempotencyInProgress => "Request in progress",
            Self::NotFound(_) => "Not found",
            Self::MethodNotAllowed(_) => "Method not allowed",
            Self::InvalidJobId(_) => "Invalid job id",
            Self::InvalidBody(_) => "Invalid body",
            Self::PayloadTooLarge(_) => "Payload too large",
            Self::InvalidSignature => "Invalid signature",
            Self::StaleTimestamp => "Stale timestamp",
            Self::NonceReused => "Nonce reused",
            Self::InvalidApiKey(_) => "Invalid API key",
            Self::ApiKeyRequired => "API key required",
            Self::WrongJob => "Report for another job",
            Self::IllegalTransition(_) => "Illegal status transition",
            Self::StorageFailed => "Storage failed",
            Self::SkinStorageUnavailable | Self::ReplayStorageUnavailable => "Storage unavailable",
            Self::LimiterUnavailable => "Rate limiter unavailable",
            Self::DatabaseUnavailable => "Database unavailable",
            Self::AdmissionUnknown => "Admission outcome unknown",
            Self::DeadlineExceeded => "Deadline exceeded",
            Self::OriginForbidden => "Origin forbidden",
            Self::SecretUnavailable => "Secret unavailable",
            Self::CallbackHostUnavailable => "Callback host unavailable",
        }
    }

    pub fn detail(&self) -> String {
        match self {
            Self::InvalidFile(d)
            | Self::FileTooLarge(d)
            | Self::InvalidReplay(d)
            | Self::InvalidSkin(d)
            | Self::SkinExists(d)
            | Self::InvalidField(d)
            | Self::InvalidIdempotencyKey(d)
            | Self::IdempotencyKeyReused(d)
            | Self::NotFound(d)
            | Self::MethodNotAllowed(d)
            | Self::InvalidJobId(d)
            | Self::InvalidBody(d)
            | Self::PayloadTooLarge(d)
            | Self::InvalidApiKey(d)
            | Self::IllegalTransition(d) => d.clone(),
            Self::InvalidSignature => {
                "X-Signature must be the hex HMAC-SHA256 of the body under the webhook secret"
                    .into()
            }
            Self::StaleTimestamp => "the timestamp is too far from the server's clock".into(),
            Self::NonceReused => "this nonce was already used; sign each report afresh".into(),
            Self::ApiKeyRequired => {
                "listing jobs needs `Authorization: Bearer <key>`; without a key, follow each \
                 job by the job_id its 202 gave"
                    .into()
            }
            Self::WrongJob => {
                "the signed report names another job (`job_id`); it applies only to that job".into()
            }
            Self::RateLimited(rate, scope) => format!(
                "the {} rate limit of {} requests is spent; retry in {} s",
                scope.noun(),
                rate.limit,
                rate.retry_after
            ),
            Self::QueueFull { retry_after } => {
                format!("the render queue is full; try again in about {retry_after} s")
            }
            Self::RenderCapacity { retry_after } => {
                format!("all renderers are busy; try again in about {retry_after} s")
            }
            Self::TooManyActiveJobs {
                limit,
                retry_after,
                scope,
            } => format!(
                "at most {limit} active jobs per {}; one should finish in about {retry_after} s",
                scope.noun()
            ),
            Self::DuplicateReplay(Some(id)) => format!(
                "this replay is already queued or rendering as job {id}; follow it at {}",
                id.status_path()
            ),
            Self::DuplicateReplay(None) => "this replay is already queued or rendering; follow \
                 the job your first submission was answered with"
                .into(),
            Self::IdempotencyInProgress => {
                "the first request with this Idempotency-Key is still running; retry shortly".into()
            }
            Self::StorageFailed => "the replay could not be stored; nothing was queued".into(),
            Self::SkinStorageUnavailable => "skin storage is unavailable; try again".into(),
            Self::ReplayStorageUnavailable => {
                "the replay could not be stored in time; nothing was queued; try again".into()
            }
            Self::LimiterUnavailable => "the rate limiter is unavailable; try again".into(),
            Self::DatabaseUnavailable => "the job database is unavailable; try again".into(),
            Self::AdmissionUnknown => {
                "the job database did not confirm the admission in time, and the job may exist: \
                 retry with the same Idempotency-Key (it answers with the job if there is one), \
                 or without one (a job that exists answers 409 duplicate_replay with its Location)"
                    .into()
            }
            Self::DeadlineExceeded => {
                "the request could not be finished in time; try again (with the same \
                 Idempotency-Key, a retry finds a job this request may have made)"
                    .into()
            }
            Self::OriginForbidden => {
                "requests reach this API only through its public address".into()
            }
            Self::SecretUnavailable => {
                "the service cannot check this request right now; try again".into()
            }
            Self::CallbackHostUnavailable => {
                "callback_url: its host could not be looked up in time; nothing was queued; \
                 try again"
                    .into()
            }
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited(rate, _) => Some(rate.retry_after),
            Self::QueueFull { retry_after }
            | Self::RenderCapacity { retry_after }
            | Self::TooManyActiveJobs { retry_after, .. } => Some(*retry_after),
            Self::IdempotencyInProgress => Some(RETRY_IN_PROGRESS_SECS),
            Self::SkinStorageUnavailable
            | Self::ReplayStorageUnavailable
            | Self::LimiterUnavailable
            | Self::DatabaseUnavailable
            | Self::AdmissionUnknown
            | Self::DeadlineExceeded
            | Self::SecretUnavailable
            | Self::CallbackHostUnavailable => Some(RETRY_UNAVAILABLE_SECS),
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
    /// The existing job of a key client's `duplicate_replay`.
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<JobId>,
    /// Whose limit a 429 hit.
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<LimitScope>,
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
            job_id: match &self {
                Self::DuplicateReplay(id) => *id,
                _ => None,
            },
            scope: match &self {
                Self::RateLimited(_, scope) | Self::TooManyActiveJobs { scope, .. } => Some(*scope),
                _ => None,
            },
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Self::RateLimited(rate, _) = &self {
            rate_limit_headers(rate, &mut headers);
        }
        if let Self::DuplicateReplay(Some(id)) = &self {
            if let Ok(location) = HeaderValue::try_from(id.status_path()) {
                headers.insert(header::LOCATION, location);
            }
        }
        if status == StatusCode::UNAUTHORIZED {
            // RFC 9110 wants a challenge on every 401: the scheme the refused credential was for.
            let challenge = match &self {
                Self::InvalidApiKey(_) => "Bearer error=\"invalid_token\"",
                // No credential was sent: the bare scheme (RFC 6750 §3).
                Self::ApiKeyRequired => "Bearer",
                _ => "HMAC-SHA256 header=\"X-Signature\"",
            };
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        let body = serde_json::to_vec(&problem).expect("problem serializes");
        (status, headers, body).into_response()
    }
}

/// The rate-limit headers of a limited endpoint's response: the de-facto `X-RateLimit-*` ones
/// (`Reset` in epoch seconds) and the IETF pair of draft-ietf-httpapi-ratelimit-headers-10/-11,
/// `RateLimit-Policy: "render";q=5;w=60` and `RateLimit: "render";r=4;t=37` (structured-field
/// lists: the policy name as a string, quota `q` per window `w` seconds; remaining `r`, and `t`
/// seconds until the window — and so the quota — resets).
pub fn rate_limit_headers(rate: &RateDecision, headers: &mut HeaderMap) {
    headers.insert("x-ratelimit-limit", HeaderValue::from(rate.limit));
    headers.insert("x-ratelimit-remaining", HeaderValue::from(rate.remaining));
    headers.insert("x-ratelimit-reset", HeaderValue::from(rate.reset));
    let policy = format!("\"{}\";q={};w={}", rate.policy, rate.limit, rate.window);
    let current = format!(
        "\"{}\";r={};t={}",
        rate.policy, rate.remaining, rate.retry_after
    );
    for (name, value) in [("ratelimit-policy", policy), ("ratelimit", current)] {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(name, value);
        }
    }
}
