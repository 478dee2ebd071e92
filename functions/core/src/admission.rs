//! `POST /v1/render`: the admission steps of DESIGN.md §2, in order. The first failing step
//! decides; no step touches state or spends quota before the cheaper ones have passed.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::Stream;

use crate::app::App;
use crate::domain::{ClientKey, FieldError, JobId, RenderOptions};
use crate::form::{self, Form, FormError, FormSpec, TextValue, UploadedFile};
use crate::jobs::{CapacityLimits, NewJob, NoRoom};
use crate::limiter::{RateDecision, RateLimit};
use crate::outbox;
use crate::problem::Rejection;
use crate::replay::{self, GameMode, ReplayLimits};

/// The rate-limited endpoint name: the limiter counts each endpoint separately.
pub const RENDER_ENDPOINT: &str = "render";

/// A replay that passed steps 1 and 2: an `.osr` of allowed size that osrparse would read, std.
#[derive(Debug, Clone)]
pub struct ReplayFile {
    bytes: Bytes,
}

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

pub async fn submit_render<S, O, E>(
    app: &App,
    client: &ClientKey,
    upload: FormUpload<S>,
) -> Submission
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let (replay, options) = match validate_request(app, upload).await {
        Ok(valid) => valid,
        Err(rejection) => return Submission::refused(rejection),
    };
    let limit = app.config.rate_limits.render;
    let rate = match check_rate_limit(app, RENDER_ENDPOINT, limit, client).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = enqueue(app, client, replay, options).await;
    Submission { outcome, rate }
}

/// Steps 1–3: stateless, so a request refused here costs no quota and touches nothing.
async fn validate_request<S, O, E>(
    app: &App,
    upload: FormUpload<S>,
) -> Result<(ReplayFile, RenderOptions), Rejection>
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let spec = render_form_spec(app);
    let form = read_form(spec, upload).await?;
    let file = check_file(form.file, &spec, ".osr")?;
    let replay = check_replay_structure(file)?;
    let options = check_render_options(&form.fields)?;
    Ok((replay, options))
}

fn render_form_spec(app: &App) -> FormSpec {
    FormSpec {
        file_field: "replay",
        max_file_bytes: app.config.max_replay_bytes,
    }
}

/// Reads the form within `spec`'s bounds: 413 past the size, 400 for anything malformed.
pub(crate) async fn read_form<S, O, E>(
    spec: FormSpec,
    upload: FormUpload<S>,
) -> Result<Form, Rejection>
where
    S: Stream<Item = Result<O, E>> + Send + 'static,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
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
pub(crate) fn check_file(
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

/// Step 2: a replay osrparse would read, of a standard-mode play.
fn check_replay_structure(file: UploadedFile) -> Result<ReplayFile, Rejection> {
    let summary = replay::inspect(&file.bytes, &ReplayLimits::default())
        .map_err(|e| Rejection::InvalidReplay(format!("not a valid osu! replay: {e}")))?;
    if summary.mode != GameMode::Std {
        return Err(Rejection::InvalidReplay(
            "only osu!standard replays can be rendered".into(),
        ));
    }
    Ok(ReplayFile { bytes: file.bytes })
}

/// Step 3: skin name and render options.
fn check_render_options(fields: &[(String, TextValue)]) -> Result<RenderOptions, Rejection> {
    let mut texts = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        match value {
            TextValue::Text(text) => texts.push((name.as_str(), text.as_str())),
            TextValue::TooLong | TextValue::NotUtf8 => {
                return Err(invalid_field(&FieldError {
                    field: "form",
                    reason: format!("field `{}` is not a short UTF-8 text", truncate(name)),
                }))
            }
        }
    }
    RenderOptions::from_fields(texts).map_err(|e| invalid_field(&e))
}

fn invalid_field(error: &FieldError) -> Rejection {
    Rejection::InvalidField(error.to_string())
}

/// Field names are echoed in errors; keep a hostile one from making the answer large.
fn truncate(name: &str) -> &str {
    let end = name
        .char_indices()
        .map(|(i, _)| i)
        .nth(64)
        .unwrap_or(name.len());
    &name[..end]
}

/// Step 4: the endpoint's fixed window for this client. An outage refuses (503) unless
/// `RATE_LIMIT_FAIL_OPEN` lets requests through. Every rate-limited endpoint checks this way,
/// each under its own `endpoint` name.
pub(crate) async fn check_rate_limit(
    app: &App,
    endpoint: &str,
    limit: RateLimit,
    client: &ClientKey,
) -> Result<Option<RateDecision>, Rejection> {
    match app.limiter.hit(endpoint, client, limit, epoch_secs()).await {
        Ok(rate) if rate.allowed => Ok(Some(rate)),
        Ok(rate) => Err(Rejection::RateLimited(rate)),
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

/// Steps 5–10. An unlocked occupancy look refuses early without storing anything; then the
/// replay is stored under the new job's id, and only then is the job admitted, with the locked
/// re-checks, in one statement. So a job row is never visible without its replay (invariant 3);
/// a refused re-check deletes the object again, and a crash leaves at most an unreferenced
/// object for the bucket's lifecycle rule. Once committed, the job's event is published at
/// once (the fast path); whatever happens to that, the outbox sweep delivers it.
async fn enqueue(
    app: &App,
    client: &ClientKey,
    replay: ReplayFile,
    options: RenderOptions,
) -> Result<JobId, Rejection> {
    let limits = capacity_limits(app);
    check_capacity(app, client, &limits).await?;
    let id = JobId::new();
    let job = NewJob {
        id,
        client: client.clone(),
        options,
        replay_key: id.replay_key(),
    };
    store_replay(app, &job, replay).await?;
    let admitted = app.jobs.admit(&job, &limits).await;
    match admitted {
        Ok(Ok(event)) => {
            outbox::publish_admitted(app, &event).await;
            Ok(job.id)
        }
        Ok(Err(no_room)) => {
            discard_replay(app, &job).await;
            Err(no_room_rejection(no_room, &limits))
        }
        Err(error) => {
            tracing::error!(%error, job_id = %job.id, "admission transaction failed");
            discard_replay(app, &job).await;
            Err(Rejection::DatabaseUnavailable)
        }
    }
}

fn capacity_limits(app: &App) -> CapacityLimits {
    CapacityLimits {
        max_queued: app.config.max_queued,
        max_rendering: app.config.max_rendering,
        max_active_per_client: app.config.max_active_jobs_per_ip,
    }
}

/// Steps 5, 6 and 8 as a quick unlocked look: most refusals end here, before any upload.
async fn check_capacity(
    app: &App,
    client: &ClientKey,
    limits: &CapacityLimits,
) -> Result<(), Rejection> {
    let occupancy = app.jobs.occupancy(client).await.map_err(|error| {
        tracing::error!(%error, "occupancy check failed");
        Rejection::DatabaseUnavailable
    })?;
    occupancy
        .check(limits)
        .map_err(|no_room| no_room_rejection(no_room, limits))
}

fn no_room_rejection(no_room: NoRoom, limits: &CapacityLimits) -> Rejection {
    match no_room {
        NoRoom::QueueFull => Rejection::QueueFull,
        NoRoom::RenderCapacity => Rejection::RenderCapacity,
        NoRoom::TooManyActiveJobs => Rejection::TooManyActiveJobs {
            limit: limits.max_active_per_client,
        },
    }
}

/// Step 10, done before the job is visible: a failure leaves nothing behind.
async fn store_replay(app: &App, job: &NewJob, replay: ReplayFile) -> Result<(), Rejection> {
    app.replays
        .put(&job.replay_key, replay.bytes)
        .await
        .map_err(|error| {
            tracing::error!(%error, job_id = %job.id, "replay upload failed");
            Rejection::StorageFailed
        })
}

/// Best effort: an object left behind is unreferenced and expires by the lifecycle rule.
async fn discard_replay(app: &App, job: &NewJob) {
    if let Err(error) = app.replays.delete(&job.replay_key).await {
        tracing::warn!(%error, job_id = %job.id, "could not delete the replay of a refused job");
    }
}

pub(crate) fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
