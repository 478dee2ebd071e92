//! The stateless checks of a render's form (DESIGN.md §2: the replay file, its structure and
//! rules, the form fields and entitlements): a request refused here costs no quota and
//! touches nothing. The callback's host is looked up later, after the rate limit: it waits on
//! the network.

use axum::http::HeaderValue;

use crate::domain::callback::{CallbackUrl, CALLBACK_FIELD};
use crate::domain::caller::Caller;
use crate::domain::failure::FailureCode;
use crate::domain::form::{last_field, BodyStream, Form, FormSpec, TextValue, UploadedFile};
use crate::domain::hash::{ReplayHash, RequestHash};
use crate::domain::job::ClientReference;
use crate::domain::render::RenderOptions;
use crate::domain::replay::{self, ReplayInfo, ReplayLimits, ReplaySummary};
use crate::domain::sandbox;
use crate::ports::idempotency::IdempotencyKey;
use crate::support::problem::{InvalidParam, Rejection, ReplayRule};
use crate::usecases::app::App;
use crate::usecases::callbacks::parse_callback;
use crate::usecases::request::{check_file, read_form, FormUpload};

use super::ReplayFile;

/// Where the form's replay is: uploaded (and checked: file, structure, rules), or at a URL to
/// fetch.
pub(super) enum Replay {
    Uploaded(ReplayFile),
    At(CallbackUrl),
}

/// A form that passed the stateless checks: its replay, and the rest of the request.
pub(super) struct ValidForm {
    pub(super) replay: Replay,
    pub(super) settings: RenderSettings,
}

/// What a render request asks besides its replay.
pub(super) struct RenderSettings {
    pub(super) options: RenderOptions,
    pub(super) client_reference: Option<ClientReference>,
    pub(super) key: Option<IdempotencyKey>,
    pub(super) callback: Option<CallbackUrl>,
    /// A sandbox key's request: how its job ends (`sandbox_outcome`); `None` for a real job.
    pub(super) sandbox: Option<sandbox::Outcome>,
    /// A sandbox request that rehearses a refusal: answered as the live service would.
    pub(super) rehearsed: Option<sandbox::Refusal>,
}

impl RenderSettings {
    pub(super) fn with(self, replay: ReplayFile) -> RenderRequest {
        RenderRequest {
            replay,
            settings: self,
        }
    }
}

/// A request that passed the stateless checks (and, named by URL, its replay's fetch and
/// checks).
pub(super) struct RenderRequest {
    pub(super) replay: ReplayFile,
    pub(super) settings: RenderSettings,
}

/// The replay file, structure and rules, and the form fields: stateless, so a request refused
/// here costs no quota and touches nothing. (The callback's host is looked up after the rate
/// limit: it waits on the network.)
pub(super) async fn check_form<S: BodyStream>(
    app: &App,
    caller: &Caller,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
) -> Result<ValidForm, Rejection> {
    let spec = render_form_spec(app);
    let form = read_form(spec, upload).await?;
    let replay = match replay_url(app, caller, &form)? {
        Some(url) => Replay::At(url),
        None => {
            let file = check_file(form.file, &spec, ".osr")?;
            Replay::Uploaded(check_replay(app, caller, file)?)
        }
    };
    let (options, client_reference) = check_render_options(&form.fields)?;
    let options = check_entitlements(app, caller, &form.fields, options)?;
    let key = idempotency_key.map(IdempotencyKey::parse).transpose()?;
    // The form fields' check has refused any field that is not text.
    let callback = match last_field(&form.fields, CALLBACK_FIELD) {
        Some(TextValue::Text(url)) => Some(url.as_str()),
        _ => None,
    };
    let callback = parse_callback(app, caller, callback)?;
    let (sandbox, rehearsed) = match check_sandbox_outcome(caller, &form.fields)? {
        None => (None, None),
        Some(sandbox::Rehearsal::Job(outcome)) => (Some(outcome), None),
        Some(sandbox::Rehearsal::Refused(refusal)) => {
            (Some(sandbox::Outcome::Completed), Some(refusal))
        }
    };
    Ok(ValidForm {
        replay,
        settings: RenderSettings {
            options,
            client_reference,
            key,
            callback,
            sandbox,
            rehearsed,
        },
    })
}

/// The form field that names the replay by URL, and o!rdr's name of it.
pub(super) const REPLAY_URL_FIELD: &str = "replay_url";
const ORDR_REPLAY_URL_FIELD: &str = "replayURL";

/// The replay file check of a form that names its replay by URL (`replay_url` or o!rdr's `replayURL`, the last
/// sent; a blank one is none): a key's request (as for `callback_url`, the service makes
/// requests out only for clients it can hold to a quota), on a deployment with a way out,
/// exactly one of `replay` (the file) and the URL, which the callbacks' rules allow. `None`: the
/// form uploads its replay.
fn replay_url(app: &App, caller: &Caller, form: &Form) -> Result<Option<CallbackUrl>, Rejection> {
    let invalid = |reason: &str| Rejection::InvalidField(format!("{REPLAY_URL_FIELD}: {reason}"));
    let sent = form
        .fields
        .iter()
        .rev()
        .find(|(name, _)| name == REPLAY_URL_FIELD || name == ORDR_REPLAY_URL_FIELD)
        .map(|(_, value)| value);
    let text = match sent {
        None => return Ok(None),
        Some(TextValue::Text(text)) if text.trim().is_empty() => return Ok(None),
        Some(TextValue::Text(text)) => text,
        Some(_) => return Err(invalid("must be a URL of at most 1024 bytes")),
    };
    if caller.is_anonymous() {
        return Err(Rejection::ApiKeyRequired(
            "a `replay_url` needs `Authorization: Bearer <key>`: only a client with an API key \
             can have the service fetch for it (without a key, upload the file)",
        ));
    }
    if !app.config.callbacks.egress {
        return Err(invalid(
            "this deployment cannot fetch replays (no way out: CALLBACKS_EGRESS=false); upload the file",
        ));
    }
    if form.file.is_some() {
        return Err(invalid(
            "send exactly one of `replay` (the file) and `replay_url`",
        ));
    }
    CallbackUrl::parse(text, app.config.callbacks.allow_private)
        .map(Some)
        .map_err(|reason| invalid(&reason))
}

/// The replay structure and rules of a replay's bytes, uploaded or fetched.
pub(super) fn check_replay(
    app: &App,
    caller: &Caller,
    file: UploadedFile,
) -> Result<ReplayFile, Rejection> {
    let summary = check_replay_structure(&file)?;
    Ok(ReplayFile {
        info: check_replay_rules(app, caller, &summary)?,
        sha256: ReplayHash::of(&file.bytes),
        bytes: file.bytes,
    })
}

fn render_form_spec(app: &App) -> FormSpec {
    FormSpec {
        file_field: "replay",
        max_file_bytes: app.config.renders.max_replay_bytes,
    }
}

/// The replay structure: a replay osrparse would read, parsed once: its summary serves the
/// replay rules and the job.
fn check_replay_structure(file: &UploadedFile) -> Result<ReplaySummary, Rejection> {
    replay::inspect(&file.bytes, &ReplayLimits::default())
        .map_err(|e| Rejection::InvalidReplay(format!("not a valid osu! replay: {e}")))
}

/// The replay rules: the render policy's rules for a well-formed replay, each its own code: a mode the
/// workers render, a play by a player (not Autoplay), within the length limit at its mods'
/// speed, with some input (a key pressed or the cursor moved), and hashes that are MD5s (a
/// policy, not the format: osrparse reads any text there). What the job shows of the replay.
fn check_replay_rules(
    app: &App,
    caller: &Caller,
    summary: &ReplaySummary,
) -> Result<ReplayInfo, Rejection> {
    let config = &app.config;
    let refuse = |rule, detail: String| Err(Rejection::ReplayRefused(rule, detail));
    if !config.renders.modes.renders(summary.mode) {
        return refuse(
            ReplayRule::UnsupportedMode,
            format!(
                "this is an osu!{} replay; this service renders {} replays only",
                summary.mode.as_str(),
                config.renders.modes.names()
            ),
        );
    }
    if summary.mods.is_autoplay() {
        return refuse(
            ReplayRule::Autoplay,
            "the replay was played by Autoplay (or Cinema); only a player's replays are rendered"
                .into(),
        );
    }
    // A key's own limit (`keys create --max-replay-length`), else `MAX_REPLAY_LENGTH`.
    let default_secs =
        u32::try_from(config.renders.max_replay_length.as_secs()).unwrap_or(u32::MAX);
    let max_secs = u64::from(caller.max_replay_length(default_secs));
    let length_ms = summary.length_ms();
    if length_ms > i64::try_from(max_secs.saturating_mul(1000)).unwrap_or(i64::MAX) {
        return refuse(
            ReplayRule::TooLong,
            format!(
                "the play lasts {} s at its mods' speed; at most {max_secs} s are rendered",
                length_ms.unsigned_abs().div_ceil(1000)
            ),
        );
    }
    if !summary.has_input {
        return refuse(
            ReplayRule::WithoutInput,
            "the replay never presses a key or moves the cursor: there is no play to render".into(),
        );
    }
    summary
        .info()
        .map_err(|e| Rejection::ReplayRefused(ReplayRule::InvalidMd5, e.to_string()))
}

/// The form fields: skin name, render options and `client_reference`, every bad field reported
/// (`invalid_params`): the fields that are not text first, then the options in form order,
/// then the reference.
fn check_render_options(
    fields: &[(String, TextValue)],
) -> Result<(RenderOptions, Option<ClientReference>), Rejection> {
    let mut texts = Vec::with_capacity(fields.len());
    let mut invalid = Vec::new();
    for (name, value) in fields {
        match value {
            TextValue::Text(text) => texts.push((name.as_str(), text.as_str())),
            TextValue::TooLong | TextValue::NotUtf8 => invalid.push(InvalidParam {
                name: truncate(name).to_owned(),
                reason: "must be a short UTF-8 text".into(),
            }),
        }
    }
    let options = RenderOptions::from_fields(texts).map_err(|errors| {
        invalid.extend(errors.into_iter().map(InvalidParam::from));
    });
    let reference = match last_field(fields, ClientReference::FIELD) {
        Some(TextValue::Text(text)) => ClientReference::parse(text).map(Some).map_err(|reason| {
            invalid.push(InvalidParam {
                name: ClientReference::FIELD.into(),
                reason,
            })
        }),
        _ => Ok(None),
    };
    match (options, reference) {
        (Ok(options), Ok(reference)) if invalid.is_empty() => Ok((options, reference)),
        _ => Err(Rejection::InvalidParams(invalid)),
    }
}

/// A sandbox key's request rehearses what `sandbox_outcome` says (default: a job that
/// completes); the field is a sandbox key's alone: anyone else sending it is told so rather
/// than ignored.
fn check_sandbox_outcome(
    caller: &Caller,
    fields: &[(String, TextValue)],
) -> Result<Option<sandbox::Rehearsal>, Rejection> {
    let sent = match last_field(fields, sandbox::Outcome::FIELD) {
        Some(TextValue::Text(text)) => Some(text.trim()),
        _ => None,
    };
    match (caller.is_sandbox(), sent) {
        (false, None) => Ok(None),
        (false, Some(_)) => Err(Rejection::InvalidField(format!(
            "{}: only a sandbox key's request (osr_test_…) may choose how its job ends",
            sandbox::Outcome::FIELD
        ))),
        (true, None) => Ok(Some(sandbox::Rehearsal::Job(sandbox::Outcome::default()))),
        (true, Some(text)) => text
            .parse()
            .map(Some)
            .map_err(|reason: String| Rejection::InvalidField(reason)),
    }
}

/// The form fields, last: options within the caller's entitlements, which came with the caller (the
/// key's record, or the configuration): refused here, no quota is spent and nothing is read.
/// What a form does not name is fitted to them: the default resolution within them, a denied
/// option that is on by default turned off.
fn check_entitlements(
    app: &App,
    caller: &Caller,
    fields: &[(String, TextValue)],
    mut options: RenderOptions,
) -> Result<RenderOptions, Rejection> {
    let entitlements = caller.entitlements(app.config.renders.anonymous_entitlements);
    entitlements.fit_unnamed(&mut options, |name| last_field(fields, name).is_some());
    entitlements
        .permit(&options)
        .map_err(|refused| refused.as_sent(|name| last_field(fields, name).is_some()))
        .map_err(|refused| Rejection::OptionNotPermitted {
            field: refused.field,
            detail: refused.to_string(),
        })?;
    Ok(options)
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

/// The same replay with the same options (and callback, reference, sandbox outcome) is the
/// same request, however the form was framed. A field left out adds nothing to the hash, so a
/// request's hash stays the same across releases that add fields (a retry across a deploy
/// still matches its key).
pub(super) fn render_request_hash(request: &RenderRequest) -> RequestHash {
    let options = serde_json::to_vec(&request.settings.options).expect("options serialize");
    let mut parts: Vec<&[u8]> = vec![request.replay.sha256.as_bytes(), &options[..]];
    if let Some(callback) = &request.settings.callback {
        parts.push(callback.as_str().as_bytes());
    }
    if let Some(reference) = &request.settings.client_reference {
        parts.push(b"client_reference=");
        parts.push(reference.as_str().as_bytes());
    }
    // A sandbox job that fails is another request than one that completes; the sample
    // failure hashes as `failed`, the name `sandbox_outcome` takes for it.
    let failure = match request.settings.sandbox.and_then(sandbox::Outcome::failure) {
        Some(sandbox::SAMPLE_FAILURE_CODE) => Some("failed"),
        other => other.map(FailureCode::as_str),
    };
    let failure = failure.map(|code| format!("sandbox_outcome={code}"));
    if let Some(failure) = &failure {
        parts.push(failure.as_bytes());
    }
    RequestHash::of(&parts)
}
