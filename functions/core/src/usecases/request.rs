//! Steps every submission route shares (render, skin uploads, the reads): the form's bounded
//! read (400/413), the file check (step 1), the endpoint's rate limit (step 4), and what a
//! submission came to.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::domain::client::ClientKey;
use crate::domain::form::{self, BodyStream, Form, FormError, FormSpec, UploadedFile};
use crate::domain::job::JobId;
use crate::domain::rate::{RateDecision, RateLimit};
use crate::ports::idempotency::{Reply, StoredResponse};
use crate::ports::limiter::Hit;
use crate::support::problem::Rejection;
use crate::usecases::app::App;

/// What a submission came to: what it made (the job, for a render), or the step that refused
/// it, plus the rate-limit state once the limit step has run (reported on every later response).
#[derive(Debug)]
pub struct Submission<T = JobId> {
    pub outcome: Result<T, Rejection>,
    pub rate: Option<RateDecision>,
}

impl<T> Submission<T> {
    /// Refused before the rate limit counted it.
    pub fn refused(rejection: Rejection) -> Self {
        Self {
            outcome: Err(rejection),
            rate: None,
        }
    }
}

/// A form body as it arrives, with the headers that describe it.
pub struct FormUpload<S> {
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    pub body: S,
}

impl<T> Submission<Reply<T>> {
    /// Answered with a first request's stored response: before the rate limit counted it.
    pub fn replayed(response: StoredResponse) -> Self {
        Self {
            outcome: Ok(Reply::Replayed(response)),
            rate: None,
        }
    }
}

/// Reads the form within `spec`'s bounds: 413 past the size, 400 for anything malformed.
pub async fn read_form<S: BodyStream>(
    spec: FormSpec,
    upload: FormUpload<S>,
) -> Result<Form, Rejection> {
    let form = async {
        spec.check_declared_length(upload.content_length)?;
        form::read_form(spec, upload.content_type.as_deref(), upload.body).await
    };
    form.await.map_err(|error| match error {
        FormError::FileTooLarge { .. } => Rejection::FileTooLarge(error.to_string()),
        other => Rejection::InvalidFile(other.to_string()),
    })
}

/// Step 1: the spec's file field, named `*{extension}` (any case), with 1..=`max_file_bytes`
/// bytes (the upper bound was enforced while reading): `*.osr` up to `MAX_REPLAY_BYTES` here.
pub fn check_file(
    file: Option<UploadedFile>,
    spec: &FormSpec,
    extension: &str,
) -> Result<UploadedFile, Rejection> {
    let field = spec.file_field;
    let file = file
        .ok_or_else(|| Rejection::InvalidFile(format!("the form has no `{field}` file field")))?;
    if !file.file_name.to_ascii_lowercase().ends_with(extension) {
        return Err(Rejection::InvalidFile(format!(
            "the {field} file name must end in {extension}"
        )));
    }
    if file.bytes.is_empty() {
        return Err(Rejection::InvalidFile(format!("the {field} file is empty")));
    }
    debug_assert!(file.bytes.len() <= spec.max_file_bytes);
    Ok(file)
}

/// Step 4: the endpoint's fixed window for this client. An outage refuses (503) unless
/// `RATE_LIMIT_FAIL_OPEN` lets requests through. Every rate-limited endpoint checks this way,
/// each under its own `endpoint` name.
pub async fn check_rate_limit(
    app: &App,
    endpoint: &'static str,
    limit: RateLimit,
    client: &ClientKey,
) -> Result<Option<RateDecision>, Rejection> {
    match app
        .limiter
        .hit(Hit {
            endpoint,
            client,
            limit,
            now: epoch_secs(),
        })
        .await
    {
        Ok(rate) if rate.allowed => Ok(Some(rate)),
        Ok(rate) => Err(Rejection::RateLimited(rate, client.scope())),
        Err(error) if app.config.rate_limit_fail_open => {
            tracing::warn!(%error, "rate limiter unavailable; failing open");
            Ok(None)
        }
        Err(error) => {
            tracing::error!(%error, "rate limiter unavailable");
            Err(Rejection::LimiterUnavailable)
        }
    }
}

pub fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
