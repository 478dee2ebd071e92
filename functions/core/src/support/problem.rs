//! Rejections as RFC 9457 problem documents, one stable `code` each. `detail` keeps clients of
//! the FastAPI original (`{"detail": …}`) working; `request_id` names the request answered
//! (the `X-Request-Id` of the answer), so a client's report leads to its log lines.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::domain::job::JobId;
use crate::domain::rate::{LimitScope, RateDecision};
use crate::domain::render::FieldError;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// Runs `answer` as the request `request_id` (entry/http.rs): every problem it answers with
/// names it. A problem made outside (a test's, a non-HTTP function's) names none.
pub async fn answering<F: std::future::Future>(request_id: String, answer: F) -> F::Output {
    REQUEST_ID.scope(request_id, answer).await
}

/// How long to wait before retrying when a dependency is down: long enough for a failover or a
/// cold pool, short enough that clients do not give up.
pub(crate) const RETRY_UNAVAILABLE_SECS: u64 = 5;
/// A retry that found its key's first request still running may look again in a second.
const RETRY_IN_PROGRESS_SECS: u64 = 1;
/// A paused intake (`osurender-admin pause`) has no end to estimate: a minute is how long an
/// operator's pause usually lasts at the least, and a client asking every minute costs little.
pub const RETRY_PAUSED_SECS: u64 = 60;

#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    InvalidFile(String),
    FileTooLarge(String),
    InvalidReplay(String),
    /// The replay named by `replay_url` could not be fetched: why, without any address the
    /// host resolved to.
    ReplayUrlFailed(String),
    /// A well-formed replay the render policy refuses (domain/replay: `RENDER_MODES`, Autoplay,
    /// `MAX_REPLAY_LENGTH`, no input): which rule, and why.
    ReplayRefused(ReplayRule, String),
    /// A render of this replay failed less than `REPLAY_FAILURE_COOLDOWN` ago; retry after.
    ReplayFailedRecently {
        retry_after: u64,
    },
    /// An `.osk` that is not a valid skin archive (domain::archive).
    InvalidSkin(String),
    /// The skin name is taken (uploaded before, or built in).
    SkinExists(String),
    /// The operator keeps the skin name from uploads: reserved, or its skin removed.
    SkinNameReserved(String),
    InvalidField(String),
    /// Several fields validated together (a render form's options, a listing's query), every
    /// bad one: the problem's `invalid_params`; its `detail` is the first's.
    InvalidParams(Vec<InvalidParam>),
    /// A render option beyond the client's entitlements (domain/entitlement.rs): which form
    /// field, and why.
    OptionNotPermitted {
        field: &'static str,
        detail: String,
    },
    /// A render's `skin` that is neither built in nor in the skin registry.
    UnknownSkin(String),
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
    /// A request without `Authorization` where only a key may ask: the job listing (an
    /// address is not an identity, so it lists no one's jobs), or a render with a
    /// `callback_url` (the service would send traffic anywhere for anyone). The detail says what
    /// needed the key.
    ApiKeyRequired(&'static str),
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
    /// A state-changing request sent by a browser for a page of another site than the allowed
    /// CORS origin (`Origin`, `Sec-Fetch-Site`: routes/mod.rs `check_request_site`).
    CrossSiteRequest,
    /// A secret the request is checked against (origin, webhook) could not be read.
    SecretUnavailable,
    /// The `callback_url`'s host could not be looked up (no answer in time, a resolver
    /// failure): whether it is allowed is unknown, not no.
    CallbackHostUnavailable,
    /// This deployment cannot deliver callbacks (`CALLBACKS_EGRESS=false`: its dispatcher has
    /// no route out), so a `callback_url` is refused rather than accepted and never sent.
    CallbacksUnavailable,
    /// The operator paused the intake (`osurender-admin pause`), with this reason if one was
    /// given.
    RenderJobsPaused {
        reason: Option<String>,
    },
    /// The caller's address or key, or the replay's player, is banned (`osurender-admin bans`):
    /// why, and until when (`None`: until the ban is removed).
    Banned {
        reason: Option<String>,
        until: Option<chrono::DateTime<chrono::Utc>>,
    },
}

/// One bad field of an `invalid_params` list (RFC 9457 §3's example extension member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

impl InvalidParam {
    /// A parameter's value if it checked out; else `None`, and its reason added to `invalid`:
    /// how a request whose parameters are checked together collects every bad one.
    pub fn collect<T>(invalid: &mut Vec<Self>, name: &str, value: Result<T, String>) -> Option<T> {
        value
            .map_err(|reason| {
                invalid.push(Self {
                    name: name.to_owned(),
                    reason,
                })
            })
            .ok()
    }
}

impl From<FieldError> for InvalidParam {
    fn from(error: FieldError) -> Self {
        Self {
            name: error.field.to_owned(),
            reason: error.reason,
        }
    }
}

/// The render policy's rules for a well-formed replay, each its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayRule {
    UnsupportedMode,
    Autoplay,
    TooLong,
    WithoutInput,
    InvalidMd5,
}

/// Whether a kind of refusal carries `Retry-After`, and where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// None: the same request will be refused again.
    Never,
    /// A fixed wait, in seconds.
    Fixed(u64),
    /// The rejection's own estimate (a window's reset, the queue's throughput).
    Estimated,
}

/// What every problem of one kind says, whatever its detail: its code, status, title and
/// `Retry-After`.
#[derive(Debug, Clone, Copy)]
pub struct ProblemKind {
    pub code: &'static str,
    pub status: StatusCode,
    pub title: &'static str,
    pub retry_after: RetryAfter,
}

/// The table of problem kinds: a constant each, and `PROBLEMS`, all of them (what openapi.yaml
/// is checked against).
macro_rules! problem_kinds {
    ($($name:ident: $code:literal, $status:ident, $title:literal, $retry:expr;)*) => {
        $(pub const $name: ProblemKind = ProblemKind {
            code: $code,
            status: StatusCode::$status,
            title: $title,
            retry_after: { use RetryAfter::*; $retry },
        };)*
        /// Every kind of problem the API answers with.
        pub const PROBLEMS: &[ProblemKind] = &[$($name),*];
    };
}

problem_kinds! {
    INVALID_FILE: "invalid_file", BAD_REQUEST, "Invalid file", Never;
    FILE_TOO_LARGE: "file_too_large", PAYLOAD_TOO_LARGE, "File too large", Never;
    INVALID_REPLAY: "invalid_replay", UNSUPPORTED_MEDIA_TYPE, "Invalid replay", Never;
    REPLAY_URL_FAILED: "replay_url_failed", UNPROCESSABLE_ENTITY, "Replay URL failed", Never;
    UNSUPPORTED_MODE: "unsupported_mode", UNPROCESSABLE_ENTITY, "Unsupported game mode", Never;
    AUTOPLAY_REPLAY: "autoplay_replay", UNPROCESSABLE_ENTITY, "Autoplay replay", Never;
    REPLAY_TOO_LONG: "replay_too_long", UNPROCESSABLE_ENTITY, "Replay too long", Never;
    REPLAY_WITHOUT_INPUT: "replay_without_input", UNPROCESSABLE_ENTITY, "Replay without input", Never;
    INVALID_MD5: "invalid_md5", UNPROCESSABLE_ENTITY, "Invalid MD5", Never;
    REPLAY_FAILED_RECENTLY: "replay_failed_recently", UNPROCESSABLE_ENTITY, "Replay failed recently", Estimated;
    INVALID_SKIN: "invalid_skin", UNSUPPORTED_MEDIA_TYPE, "Invalid skin", Never;
    SKIN_EXISTS: "skin_exists", CONFLICT, "Skin exists", Never;
    SKIN_NAME_RESERVED: "skin_name_reserved", CONFLICT, "Skin name reserved", Never;
    INVALID_FIELD: "invalid_field", UNPROCESSABLE_ENTITY, "Invalid field", Never;
    OPTION_NOT_PERMITTED: "option_not_permitted", FORBIDDEN, "Option not permitted", Never;
    UNKNOWN_SKIN: "unknown_skin", UNPROCESSABLE_ENTITY, "Unknown skin", Never;
    RATE_LIMITED: "rate_limited", TOO_MANY_REQUESTS, "Rate limit exceeded", Estimated;
    QUEUE_FULL: "queue_full", SERVICE_UNAVAILABLE, "Render queue full", Estimated;
    RENDER_CAPACITY: "render_capacity", SERVICE_UNAVAILABLE, "Render capacity exhausted", Estimated;
    TOO_MANY_ACTIVE_JOBS: "too_many_active_jobs", TOO_MANY_REQUESTS, "Too many active jobs", Estimated;
    DUPLICATE_REPLAY: "duplicate_replay", CONFLICT, "Duplicate replay", Never;
    INVALID_IDEMPOTENCY_KEY: "invalid_idempotency_key", BAD_REQUEST, "Invalid idempotency key", Never;
    IDEMPOTENCY_KEY_REUSED: "idempotency_key_reused", UNPROCESSABLE_ENTITY, "Idempotency key reused", Never;
    IDEMPOTENCY_IN_PROGRESS: "idempotency_in_progress", CONFLICT, "Request in progress", Fixed(RETRY_IN_PROGRESS_SECS);
    NOT_FOUND: "not_found", NOT_FOUND, "Not found", Never;
    METHOD_NOT_ALLOWED: "method_not_allowed", METHOD_NOT_ALLOWED, "Method not allowed", Never;
    INVALID_JOB_ID: "invalid_job_id", BAD_REQUEST, "Invalid job id", Never;
    INVALID_BODY: "invalid_body", BAD_REQUEST, "Invalid body", Never;
    PAYLOAD_TOO_LARGE: "payload_too_large", PAYLOAD_TOO_LARGE, "Payload too large", Never;
    INVALID_SIGNATURE: "invalid_signature", UNAUTHORIZED, "Invalid signature", Never;
    STALE_TIMESTAMP: "stale_timestamp", UNAUTHORIZED, "Stale timestamp", Never;
    NONCE_REUSED: "nonce_reused", UNAUTHORIZED, "Nonce reused", Never;
    INVALID_API_KEY: "invalid_api_key", UNAUTHORIZED, "Invalid API key", Never;
    API_KEY_REQUIRED: "api_key_required", UNAUTHORIZED, "API key required", Never;
    WRONG_JOB: "wrong_job", FORBIDDEN, "Report for another job", Never;
    ILLEGAL_TRANSITION: "illegal_transition", CONFLICT, "Illegal status transition", Never;
    STORAGE_FAILED: "storage_failed", INTERNAL_SERVER_ERROR, "Storage failed", Never;
    STORAGE_UNAVAILABLE: "storage_unavailable", SERVICE_UNAVAILABLE, "Storage unavailable", Fixed(RETRY_UNAVAILABLE_SECS);
    LIMITER_UNAVAILABLE: "limiter_unavailable", SERVICE_UNAVAILABLE, "Rate limiter unavailable", Fixed(RETRY_UNAVAILABLE_SECS);
    DATABASE_UNAVAILABLE: "database_unavailable", SERVICE_UNAVAILABLE, "Database unavailable", Fixed(RETRY_UNAVAILABLE_SECS);
    ADMISSION_UNKNOWN: "admission_unknown", SERVICE_UNAVAILABLE, "Admission outcome unknown", Fixed(RETRY_UNAVAILABLE_SECS);
    DEADLINE_EXCEEDED: "deadline_exceeded", SERVICE_UNAVAILABLE, "Deadline exceeded", Fixed(RETRY_UNAVAILABLE_SECS);
    ORIGIN_FORBIDDEN: "origin_forbidden", FORBIDDEN, "Origin forbidden", Never;
    CROSS_SITE_REQUEST: "cross_site_request", FORBIDDEN, "Cross-site request", Never;
    SECRET_UNAVAILABLE: "secret_unavailable", SERVICE_UNAVAILABLE, "Secret unavailable", Fixed(RETRY_UNAVAILABLE_SECS);
    CALLBACK_HOST_UNAVAILABLE: "callback_host_unavailable", SERVICE_UNAVAILABLE, "Callback host unavailable", Fixed(RETRY_UNAVAILABLE_SECS);
    CALLBACKS_UNAVAILABLE: "callbacks_unavailable", UNPROCESSABLE_ENTITY, "Callbacks unavailable", Never;
    RENDER_JOBS_PAUSED: "render_jobs_paused", SERVICE_UNAVAILABLE, "Render jobs paused", Fixed(RETRY_PAUSED_SECS);
    BANNED: "banned", FORBIDDEN, "Banned", Never;
}

impl Rejection {
    /// This rejection's row of the table.
    pub fn kind(&self) -> &'static ProblemKind {
        match self {
            Self::InvalidFile(_) => &INVALID_FILE,
            Self::FileTooLarge(_) => &FILE_TOO_LARGE,
            Self::ReplayUrlFailed(_) => &REPLAY_URL_FAILED,
            Self::InvalidReplay(_) => &INVALID_REPLAY,
            Self::ReplayRefused(rule, _) => match rule {
                ReplayRule::UnsupportedMode => &UNSUPPORTED_MODE,
                ReplayRule::Autoplay => &AUTOPLAY_REPLAY,
                ReplayRule::TooLong => &REPLAY_TOO_LONG,
                ReplayRule::WithoutInput => &REPLAY_WITHOUT_INPUT,
                ReplayRule::InvalidMd5 => &INVALID_MD5,
            },
            Self::ReplayFailedRecently { .. } => &REPLAY_FAILED_RECENTLY,
            Self::InvalidSkin(_) => &INVALID_SKIN,
            Self::SkinExists(_) => &SKIN_EXISTS,
            Self::SkinNameReserved(_) => &SKIN_NAME_RESERVED,
            Self::InvalidField(_) | Self::InvalidParams(_) => &INVALID_FIELD,
            Self::OptionNotPermitted { .. } => &OPTION_NOT_PERMITTED,
            Self::UnknownSkin(_) => &UNKNOWN_SKIN,
            Self::RateLimited(..) => &RATE_LIMITED,
            Self::QueueFull { .. } => &QUEUE_FULL,
            Self::RenderCapacity { .. } => &RENDER_CAPACITY,
            Self::TooManyActiveJobs { .. } => &TOO_MANY_ACTIVE_JOBS,
            Self::DuplicateReplay(_) => &DUPLICATE_REPLAY,
            Self::InvalidIdempotencyKey(_) => &INVALID_IDEMPOTENCY_KEY,
            Self::IdempotencyKeyReused(_) => &IDEMPOTENCY_KEY_REUSED,
            Self::IdempotencyInProgress => &IDEMPOTENCY_IN_PROGRESS,
            Self::NotFound(_) => &NOT_FOUND,
            Self::MethodNotAllowed(_) => &METHOD_NOT_ALLOWED,
            Self::InvalidJobId(_) => &INVALID_JOB_ID,
            Self::InvalidBody(_) => &INVALID_BODY,
            Self::PayloadTooLarge(_) => &PAYLOAD_TOO_LARGE,
            Self::InvalidSignature => &INVALID_SIGNATURE,
            Self::StaleTimestamp => &STALE_TIMESTAMP,
            Self::NonceReused => &NONCE_REUSED,
            Self::InvalidApiKey(_) => &INVALID_API_KEY,
            Self::ApiKeyRequired(_) => &API_KEY_REQUIRED,
            Self::WrongJob => &WRONG_JOB,
            Self::IllegalTransition(_) => &ILLEGAL_TRANSITION,
            Self::StorageFailed => &STORAGE_FAILED,
            Self::SkinStorageUnavailable | Self::ReplayStorageUnavailable => &STORAGE_UNAVAILABLE,
            Self::LimiterUnavailable => &LIMITER_UNAVAILABLE,
            Self::DatabaseUnavailable => &DATABASE_UNAVAILABLE,
            Self::AdmissionUnknown => &ADMISSION_UNKNOWN,
            Self::DeadlineExceeded => &DEADLINE_EXCEEDED,
            Self::OriginForbidden => &ORIGIN_FORBIDDEN,
            Self::CrossSiteRequest => &CROSS_SITE_REQUEST,
            Self::SecretUnavailable => &SECRET_UNAVAILABLE,
            Self::CallbackHostUnavailable => &CALLBACK_HOST_UNAVAILABLE,
            Self::CallbacksUnavailable => &CALLBACKS_UNAVAILABLE,
            Self::RenderJobsPaused { .. } => &RENDER_JOBS_PAUSED,
            Self::Banned { .. } => &BANNED,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.kind().status
    }

    /// A refusal for the service's state, not the request's: the queue, the farm, the
    /// client's running jobs, a paused intake, a skin not (yet) in the registry. One that comes
    /// after the rate limit gives its hit back (DESIGN.md §4, "Waiting costs no quota").
    pub fn is_the_services(&self) -> bool {
        matches!(
            self,
            Self::QueueFull { .. }
                | Self::RenderCapacity { .. }
                | Self::TooManyActiveJobs { .. }
                | Self::RenderJobsPaused { .. }
                | Self::UnknownSkin(_)
        )
    }

    /// The stable machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        self.kind().code
    }

    fn title(&self) -> &'static str {
        self.kind().title
    }

    pub fn detail(&self) -> String {
        match self {
            Self::InvalidFile(d)
            | Self::FileTooLarge(d)
            | Self::ReplayUrlFailed(d)
            | Self::InvalidReplay(d)
            | Self::ReplayRefused(_, d)
            | Self::InvalidSkin(d)
            | Self::SkinExists(d)
            | Self::SkinNameReserved(d)
            | Self::InvalidField(d)
            | Self::OptionNotPermitted { detail: d, .. }
            | Self::UnknownSkin(d)
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
            Self::InvalidParams(params) => params
                .first()
                .map(|param| format!("{}: {}", param.name, param.reason))
                .unwrap_or_default(),
            Self::StaleTimestamp => "the timestamp is too far from the server's clock".into(),
            Self::NonceReused => "this nonce was already used; sign each report afresh".into(),
            Self::ApiKeyRequired(detail) => (*detail).into(),
            Self::WrongJob => {
                "the signed report names another job (`job_id`); it applies only to that job".into()
            }
            Self::RateLimited(rate, scope) => format!(
                "the {} rate limit of {} requests is spent; retry in {} s",
                scope.noun(),
                rate.limit,
                rate.retry_after
            ),
            Self::ReplayFailedRecently { retry_after } => format!(
                "a render of this replay failed recently; it is not rendered again for another \
                 {retry_after} s"
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
            Self::CrossSiteRequest => {
                "a web page of another site may not submit to this API (the request's Origin, \
                 or Sec-Fetch-Site: cross-site); send it from a program, or from a page of the \
                 origin this deployment allows"
                    .into()
            }
            Self::SecretUnavailable => {
                "the service cannot check this request right now; try again".into()
            }
            Self::CallbackHostUnavailable => {
                "callback_url: its host could not be looked up in time; nothing was queued; \
                 try again"
                    .into()
            }
            Self::CallbacksUnavailable => {
                "callback_url: this deployment cannot deliver callbacks (it has no route to the \
                 internet); nothing was queued: submit without callback_url and follow the job \
                 at its status link"
                    .into()
            }
            Self::RenderJobsPaused { reason } => {
                let why = reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(": {r}"));
                format!("new render jobs are paused{why}; nothing was queued; try again later")
            }
            Self::Banned { reason, until } => {
                let why = reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(": {r}"));
                let until = until.map_or("until further notice".to_owned(), |until| {
                    format!(
                        "until {}",
                        until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    )
                });
                format!("banned {until}{why}")
            }
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self.kind().retry_after {
            RetryAfter::Never => None,
            RetryAfter::Fixed(secs) => Some(secs),
            RetryAfter::Estimated => match self {
                Self::RateLimited(rate, _) => Some(rate.retry_after),
                Self::QueueFull { retry_after }
                | Self::ReplayFailedRecently { retry_after }
                | Self::RenderCapacity { retry_after }
                | Self::TooManyActiveJobs { retry_after, .. } => Some(*retry_after),
                _ => None,
            },
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
    /// The operator's reason for a pause or a ban, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// When a temporary ban ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// The form field an `option_not_permitted` refuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
    /// Every bad field of an `invalid_field` that validated several.
    #[serde(skip_serializing_if = "Option::is_none")]
    invalid_params: Option<&'a [InvalidParam]>,
    /// The request answered, as its `X-Request-Id` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<String>,
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
            reason: match &self {
                Self::RenderJobsPaused { reason } | Self::Banned { reason, .. } => reason.clone(),
                _ => None,
            },
            until: match &self {
                Self::Banned { until, .. } => *until,
                _ => None,
            },
            field: match &self {
                Self::OptionNotPermitted { field, .. } => Some(field),
                _ => None,
            },
            invalid_params: match &self {
                Self::InvalidParams(params) => Some(params),
                _ => None,
            },
            request_id: REQUEST_ID.try_with(Clone::clone).ok(),
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
                Self::ApiKeyRequired(_) => "Bearer",
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
