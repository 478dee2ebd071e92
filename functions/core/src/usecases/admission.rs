//! `POST /v1/render`: the admission steps of DESIGN.md §2, in order. The first failing step
//! decides; no step touches state or spends quota before the cheaper ones have passed.
//!
//! Two steps sit between the stateless checks (1–3) and the rate limit (4), because what they
//! answer must not cost quota and their inputs (the replay's hash, the normalized request)
//! exist only once the request is known to be valid. Both only read, in one round trip:
//! - 3a `Idempotency-Key` (idempotency.rs): a retry of a request that succeeded gets its
//!   response again; a malformed key is a 400, a key reused for another request a 422. The key
//!   is claimed only once the rate limit and the capacity pre-checks have passed (9a), right
//!   before the replay is stored: a request refused before writes no claim.
//! - 3b duplicate replay: the client's job of the same replay (by SHA-256), if queued or
//!   rendering, answers 409 with its `Location`. This read also takes the occupancy counts the
//!   capacity steps 5, 6 and 8 pre-check with; admit_job re-checks both under its locks.
//!
//! An anonymous client is limited three times (DESIGN.md §3, "Fair share"): as itself (an
//! address, an IPv6 /64), as its network (an IPv4 /24, an IPv6 /48) and as its wide network (an
//! IPv4 /16, an IPv6 /32), in the rate limit (step 4) and the active-job cap (step 8); anonymous
//! clients together hold at most `ANONYMOUS_QUEUE_SHARE` of the queue (step 5). A key is its own
//! client, under none of these.
//!
//! A sandbox key's request (`osr_test_…`) runs every step, but its job holds no capacity: the
//! global caps do not apply to it, its active jobs are its recent sandbox jobs, its replay is
//! not stored, and it never reaches the render queue (domain/sandbox.rs).

use axum::http::HeaderValue;
use bytes::Bytes;
use serde_json::json;

use crate::domain::callback::{CallbackUrl, CALLBACK_FIELD};
use crate::domain::caller::Caller;
use crate::domain::deadline;
use crate::domain::failure::FailureCode;
use crate::domain::farm::{RenderCost, Weight};
use crate::domain::form::{last_field, BodyStream, FormSpec, TextValue, UploadedFile};
use crate::domain::hash::{ReplayHash, RequestHash};
use crate::domain::job::{ClientReference, JobId};
use crate::domain::rate::{LimitScope, RateDecision};
use crate::domain::render::RenderOptions;
use crate::domain::replay::{self, ReplayInfo, ReplayLimits, ReplaySummary};
use crate::domain::sandbox;
use crate::ports::idempotency::{Claim, IdempotencyKey, Reply, StoredResponse};
use crate::ports::jobs::{
    Admission, CapacityLimits, Load, NewJob, NoRoom, Occupancy, OccupancyLook, Resolved,
};
use crate::ports::outbox::OutboxEvent;
use crate::support::config::Config;
use crate::support::estimate;
use crate::support::problem::{InvalidParam, Rejection, ReplayRule};
use crate::usecases::app::App;
use crate::usecases::callbacks::{self, check_callback_host, parse_callback};
use crate::usecases::idempotency::{self, Begin};
use crate::usecases::outbox;
use crate::usecases::policy::{check_caller_ban_during, check_intake_open, check_player_ban};
use crate::usecases::request::{
    check_file, count_rate_windows, epoch_secs, read_form, Counted, FormUpload, Spent, Submission,
    Window,
};
use crate::usecases::skins;

/// The rate-limited endpoint name: the limiter counts each endpoint separately.
pub const RENDER_ENDPOINT: &str = "render";
/// The renders of one anonymous network, counted together.
pub const RENDER_NETWORK_ENDPOINT: &str = "render_network";
/// The renders of one anonymous wide network, counted together.
pub const RENDER_WIDE_NETWORK_ENDPOINT: &str = "render_wide_network";

/// A replay that passed steps 1, 2 and 2a: an `.osr` of allowed size that osrparse would read,
/// and the render policy renders.
#[derive(Debug, Clone)]
pub struct ReplayFile {
    bytes: Bytes,
    sha256: ReplayHash,
    /// What it renders, as the job shows it; its `player` is what a player ban matches (step
    /// 3c: both are at most 64 characters).
    info: ReplayInfo,
}

/// `idempotency_key`: the request's `Idempotency-Key` header, if any.
pub async fn submit_render<S: BodyStream>(
    app: &App,
    caller: &Caller,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
) -> Submission<Reply<JobId>> {
    // Step 0b: a banned address or key reads no form, spends no quota (DESIGN.md §2); then
    // steps 1–3, which on a cold instance overlap the policy's first read.
    let validation = validate_request(app, caller, idempotency_key, upload);
    let form = match check_caller_ban_during(app, caller, validation).await {
        Ok(valid) => valid,
        Err(rejection) => return Submission::refused(rejection),
    };
    // A replay named by URL is fetched after the rate limit (by_url.rs), which it then spent;
    // a rehearsed 429 is answered before anything is fetched.
    if form.settings.rehearsed == Some(sandbox::Refusal::RateLimited) {
        return Submission::refused(rehearsed_rate_limit(app, caller));
    }
    let (request, counted) = match form.replay {
        Replay::Uploaded(replay) => (form.settings.with(replay), None),
        Replay::At(url) => match by_url::fetch_replay(app, caller, &url).await {
            Ok((replay, spent)) => (form.settings.with(replay), Some(spent)),
            Err(refused) => return refused,
        },
    };
    // Step 3c: a banned player's replay, before any read or quota (DESIGN.md §2).
    if let Err(rejection) = check_player_ban(app, &request.replay.info.player).await {
        return refused_after(rejection, counted);
    }
    let keyed = Keyed {
        request_hash: render_request_hash(&request),
        claim: request.settings.key.clone().map(|key| {
            Claim::new(
                caller.client(),
                RENDER_ENDPOINT,
                key,
                app.config.request_deadline,
            )
        }),
    };
    match look(app, caller, &request.replay, &keyed).await {
        // A retry of a replay named by URL was counted (and fetched) before its key could be
        // read: its hit is given back, as a retry spends none.
        Ok(Looked::Replay(response)) => {
            if let Some(spent) = counted {
                spent.give_back(app).await;
            }
            Submission::replayed(response)
        }
        Ok(Looked::Run(occupancy)) => admit(app, caller, request, occupancy, keyed, counted).await,
        Err(rejection) => refused_after(rejection, counted),
    }
}

/// A refusal, with the rate limit's headers when the request was counted already (a replay
/// named by URL is, before its checks).
fn refused_after(rejection: Rejection, counted: Option<Spent>) -> Submission<Reply<JobId>> {
    Submission {
        outcome: Err(rejection),
        rate: counted.and_then(|spent| spent.rate),
    }
}

/// Where the form's replay is: uploaded (and checked, steps 1–2a), or at a URL to fetch.
enum Replay {
    Uploaded(ReplayFile),
    At(CallbackUrl),
}

/// A form that passed steps 1–3: its replay, and the rest of the request.
struct ValidForm {
    replay: Replay,
    settings: RenderSettings,
}

/// What a render request asks besides its replay.
struct RenderSettings {
    options: RenderOptions,
    client_reference: Option<ClientReference>,
    key: Option<IdempotencyKey>,
    callback: Option<CallbackUrl>,
    /// A sandbox key's request: how its job ends (`sandbox_outcome`); `None` for a real job.
    sandbox: Option<sandbox::Outcome>,
    /// A sandbox request that rehearses a refusal: answered as the live service would.
    rehearsed: Option<sandbox::Refusal>,
}

impl RenderSettings {
    fn with(self, replay: ReplayFile) -> RenderRequest {
        RenderRequest {
            replay,
            settings: self,
        }
    }
}

/// A request's `Idempotency-Key`, if it sent one, as the claim it would take (9a), and the hash
/// of the request that a retry with the key must match.
struct Keyed {
    claim: Option<Claim>,
    request_hash: RequestHash,
}

/// A request that passed steps 1–3 (and, named by URL, its replay's fetch and checks).
struct RenderRequest {
    replay: ReplayFile,
    settings: RenderSettings,
}

/// Steps 1–3, the key's format and the callback URL's form: stateless, so a request refused
/// here costs no quota and touches nothing. (The callback's host is looked up after the rate
/// limit: it waits on the network.)
async fn validate_request<S: BodyStream>(
    app: &App,
    caller: &Caller,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
) -> Result<ValidForm, Rejection> {
    let spec = render_form_spec(app);
    let form = read_form(spec, upload).await?;
    let replay = match by_url::replay_url(app, caller, &form)? {
        Some(url) => Replay::At(url),
        None => {
            let file = check_file(form.file, &spec, ".osr")?;
            Replay::Uploaded(check_replay(app, caller, file)?)
        }
    };
    let (options, client_reference) = check_render_options(&form.fields)?;
    let options = check_entitlements(app, caller, &form.fields, options)?;
    let key = idempotency_key.map(IdempotencyKey::parse).transpose()?;
    // Step 3 has refused any field that is not text.
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

/// Steps 2 and 2a of a replay's bytes, uploaded or fetched.
fn check_replay(app: &App, caller: &Caller, file: UploadedFile) -> Result<ReplayFile, Rejection> {
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
        max_file_bytes: app.config.max_replay_bytes,
    }
}

/// Step 2: a replay osrparse would read, parsed once: its summary serves step 2a and the job.
fn check_replay_structure(file: &UploadedFile) -> Result<ReplaySummary, Rejection> {
    replay::inspect(&file.bytes, &ReplayLimits::default())
        .map_err(|e| Rejection::InvalidReplay(format!("not a valid osu! replay: {e}")))
}

/// Step 2a: the render policy's rules for a well-formed replay, each its own code: a mode the
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
    if !config.render_modes.renders(summary.mode) {
        return refuse(
            ReplayRule::UnsupportedMode,
            format!(
                "this is an osu!{} replay; this service renders {} replays only",
                summary.mode.as_str(),
                config.render_modes.names()
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
    let default_secs = u32::try_from(config.max_replay_length.as_secs()).unwrap_or(u32::MAX);
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

/// Step 3: skin name, render options and `client_reference`, every bad field reported
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

/// Step 3, last: options within the caller's entitlements, which came with the caller (the
/// key's record, or the configuration): refused here, no quota is spent and nothing is read.
/// What a form does not name is fitted to them: the default resolution within them, a denied
/// option that is on by default turned off.
fn check_entitlements(
    app: &App,
    caller: &Caller,
    fields: &[(String, TextValue)],
    mut options: RenderOptions,
) -> Result<RenderOptions, Rejection> {
    let entitlements = caller.entitlements(app.config.anonymous_entitlements);
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

/// The same replay with the same options (and callback) is the same request, however the
/// form was framed. (Without a callback, the hash is what it was before callbacks existed.)
fn render_request_hash(request: &RenderRequest) -> RequestHash {
    let options = serde_json::to_vec(&request.settings.options).expect("options serialize");
    let mut parts: Vec<&[u8]> = vec![request.replay.sha256.as_bytes(), &options[..]];
    if let Some(callback) = &request.settings.callback {
        parts.push(callback.as_str().as_bytes());
    }
    if let Some(reference) = &request.settings.client_reference {
        parts.push(b"client_reference=");
        parts.push(reference.as_str().as_bytes());
    }
    // A sandbox job that fails is another request than one that completes; the default
    // leaves the hash as it was before the field existed (and `failed` as it was since).
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

/// How steps 3a and 3b's read came out.
enum Looked {
    /// Go on, with this occupancy look.
    Run(Occupancy),
    Replay(StoredResponse),
}

/// Steps 3a and 3b's reads in one round trip: the key's holder (if there is a key) and the
/// occupancy look that also finds a duplicate. A key completed for this request answers; one
/// held by a request in progress is waited for (idempotency::answered), and if that request
/// freed it, this one goes on with the occupancy it read (admit_job re-checks under its locks).
async fn look(
    app: &App,
    caller: &Caller,
    replay: &ReplayFile,
    keyed: &Keyed,
) -> Result<Looked, Rejection> {
    let cooldown = app.config.replay_failure_cooldown;
    let looked = app
        .admissions
        .occupancy(&OccupancyLook {
            caller,
            replay: &replay.sha256,
            failure_cooldown: cooldown,
            key: keyed.claim.as_ref(),
        })
        .await;
    let (occupancy, held) = looked.map_err(|error| {
        tracing::error!(%error, "occupancy check failed");
        Rejection::DatabaseUnavailable
    })?;
    if let Some(claim) = &keyed.claim {
        let hash = &keyed.request_hash;
        if let Some(response) = idempotency::answered(app, claim, hash, held).await? {
            return Ok(Looked::Replay(response));
        }
    }
    Ok(Looked::Run(occupancy))
}

/// Steps 3b–10, with the request's key (if any) not yet claimed.
/// `counted`: the rate limit's count when it came first (a replay named by URL).
async fn admit(
    app: &App,
    caller: &Caller,
    request: RenderRequest,
    occupancy: Occupancy,
    keyed: Keyed,
    counted: Option<Spent>,
) -> Submission<Reply<JobId>> {
    if let Some(existing) = occupancy.duplicate {
        return refused_after(duplicate(caller, existing), counted);
    }
    if let Some(left) = occupancy.failed_recently {
        let retry_after = left.as_secs_f64().ceil() as u64;
        return refused_after(Rejection::ReplayFailedRecently { retry_after }, counted);
    }
    if request.settings.rehearsed == Some(sandbox::Refusal::RateLimited) {
        return refused_after(rehearsed_rate_limit(app, caller), counted);
    }
    // A request counted before its replay was fetched keeps its hit whatever refuses it: the
    // fetch was work done for it (so a client's fetches stay within its render limit).
    let fetched = counted.is_some();
    let spent = match counted {
        Some(spent) => spent,
        None => match check_render_rate(app, caller).await {
            Ok(spent) => spent,
            Err(rejection) => return Submission::refused(rejection),
        },
    };
    let outcome = admit_counted(app, caller, request, occupancy, keyed).await;
    // Waiting costs no quota: a refusal for the service's state gives the hits back (the
    // client's, its network's), so a client that honours Retry-After is not locked out.
    let rate = match &outcome {
        Err(rejection) if rejection.is_the_services() && !fetched => spent.give_back(app).await,
        _ => spent.rate,
    };
    Submission { outcome, rate }
}

/// Steps 4a–10, once the rate limit has counted the request.
async fn admit_counted(
    app: &App,
    caller: &Caller,
    request: RenderRequest,
    occupancy: Occupancy,
    keyed: Keyed,
) -> Result<Reply<JobId>, Rejection> {
    match request.settings.rehearsed {
        Some(sandbox::Refusal::QueueFull) => {
            let retry_after = sandbox::REHEARSED_QUEUE_WAIT.as_secs();
            return Err(Rejection::QueueFull { retry_after });
        }
        Some(sandbox::Refusal::RenderJobsPaused) => {
            let reason = Some("a sandbox rehearsal (sandbox_outcome=render_jobs_paused)".into());
            return Err(Rejection::RenderJobsPaused { reason });
        }
        _ => {}
    }
    // The skin's registry row: after the rate limit, which bounds these reads (DESIGN.md §2).
    skins::check_renderable(app, &request.settings.options.skin).await?;
    // Step 5a, with the capacity steps: a paused intake inserts and stores nothing.
    check_intake_open(app, caller).await?;
    if let Some(url) = &request.settings.callback {
        check_callback_host(app, url).await?;
    }
    enqueue(app, caller, request, occupancy, keyed).await
}

/// A sandbox request's rehearsed 429 (`sandbox_outcome=rate_limited`): its render window as
/// spent, with the headers and `Retry-After` a spent window has; nothing is counted.
fn rehearsed_rate_limit(app: &App, caller: &Caller) -> Rejection {
    let limit = caller.render_limit(app.config.rate_limits.render);
    let decision = RateDecision::new(RENDER_ENDPOINT, limit, None, epoch_secs());
    Rejection::RateLimited(decision, caller.client().scope())
}

/// Step 3b's refusal. It names the job only to a key's client: an address may be shared (a
/// NAT, a campus), and its other users must not learn a job id, which reads the job.
fn duplicate(caller: &Caller, existing: JobId) -> Rejection {
    Rejection::DuplicateReplay((!caller.is_anonymous()).then_some(existing))
}

/// Step 4: the client's window, then an anonymous client's network's and its wide network's,
/// each only for a request the ones before allowed (`check_rate_windows`).
async fn check_render_rate(app: &App, caller: &Caller) -> Result<Spent, Rejection> {
    let limits = &app.config.rate_limits;
    let windows = [
        Window {
            endpoint: RENDER_ENDPOINT,
            limit: caller.render_limit(limits.render),
            counted: Counted::Client,
        },
        Window {
            endpoint: RENDER_NETWORK_ENDPOINT,
            limit: limits.render_network,
            counted: Counted::Network,
        },
        Window {
            endpoint: RENDER_WIDE_NETWORK_ENDPOINT,
            limit: limits.render_wide_network,
            counted: Counted::WideNetwork,
        },
    ];
    count_rate_windows(app, caller, &windows).await
}

/// Steps 5–10. The unlocked occupancy look refuses early without storing or claiming anything;
/// then the key is claimed (9a), the replay stored under the new job's id, and only then is the
/// job admitted, with the locked re-checks, in one statement. So a job row is never visible
/// without its replay (invariant 3).
/// The object is deleted again only when the job is known not to exist: a refused re-check, or
/// an unknown outcome resolved as abandoned. An outcome that stays unknown keeps it (a crash
/// too): at worst an unreferenced object, which the bucket's lifecycle rule removes. Once
/// committed, the job waits in the queue of record; the release pipelined behind the admission
/// hands the farm what it has room for, in fair order (this job or others), and those events
/// are published at once (the fast path); whatever happens to that, the outbox sweep delivers
/// them. A job with a callback wakes the dispatcher for its first one.
async fn enqueue(
    app: &App,
    caller: &Caller,
    request: RenderRequest,
    occupancy: Occupancy,
    keyed: Keyed,
) -> Result<Reply<JobId>, Rejection> {
    let limits = capacity_limits(app, caller);
    if let Err(no_room) = occupancy.check(&limits) {
        return Err(no_room_rejection(app, caller, no_room, &limits).await);
    }
    if !caller.is_sandbox() {
        check_queue_wait(app, caller).await?;
    }
    // Step 9a: the key's claim, only now that the cheaper refusals have passed. Another request
    // that claimed it first (a concurrent retry) answers this one too.
    let claim = match idempotency::claim(app, keyed.claim, &keyed.request_hash).await? {
        Begin::Run(claim) => claim,
        Begin::Replay(response) => return Ok(Reply::Replayed(response)),
    };
    let admitted = store_and_admit(app, caller, request, &limits, claim.clone()).await;
    // Only successes are kept: a refused request's repeat runs afresh. A request whose
    // admission may have committed keeps its claim: a retry with the key then finds the job, or
    // takes the claim over once it is stale (and admit_job refuses the old request).
    if let (Some(claim), Err(rejection)) = (&claim, &admitted) {
        if *rejection != Rejection::AdmissionUnknown {
            idempotency::release(app, claim).await;
        }
    }
    admitted.map(Reply::Fresh)
}

/// Steps 9 and 10 of a request holding its key's claim, if it has a key: the replay stored,
/// then the job admitted and released to the farm.
async fn store_and_admit(
    app: &App,
    caller: &Caller,
    request: RenderRequest,
    limits: &CapacityLimits,
    claim: Option<Claim>,
) -> Result<JobId, Rejection> {
    let RenderRequest {
        replay,
        settings:
            RenderSettings {
                options,
                client_reference,
                callback,
                sandbox,
                ..
            },
    } = request;
    let client = caller.client();
    let id = JobId::new();
    let job = NewJob {
        id,
        client: client.clone(),
        address: (!caller.is_anonymous()).then(|| caller.address().clone()),
        network: caller.network().cloned(),
        wide_network: caller.wide_network().cloned(),
        options,
        client_reference,
        replay_key: id.replay_key(),
        replay_sha256: replay.sha256,
        replay: replay.info.clone(),
        completes: claim.map(|claim| {
            let response = admitted_response(&app.config, id);
            (claim, response)
        }),
        sandbox,
        callback,
        cost: RenderCost::of(replay.info.length_ms, app.config.render_overhead),
        weight: fair_weight(app, caller),
    };
    store_replay(app, &job, replay).await?;
    let refusal = match admit_or_resolve(app, &job, limits).await {
        Ok(released) => {
            let publish = async {
                match released {
                    Some(events) => outbox::publish_released(app, &events).await,
                    // Resolved as committed: its release is this request's to start.
                    None if job.sandbox.is_none() => {
                        outbox::release_to_farm(app).await;
                    }
                    None => {}
                }
            };
            let wake = async {
                if job.callback.is_some() || live_event_due(app, caller).await {
                    callbacks::wake_dispatcher(app).await;
                }
            };
            tokio::join!(publish, wake);
            return Ok(job.id);
        }
        Err(NotAdmitted::Unknown) => return Err(Rejection::AdmissionUnknown),
        Err(NotAdmitted::NoRoom(no_room)) => no_room_rejection(app, caller, no_room, limits).await,
        Err(NotAdmitted::ClaimLost) => Rejection::IdempotencyInProgress,
        Err(NotAdmitted::Failed) => Rejection::DatabaseUnavailable,
    };
    discard_replay(app, &job).await;
    Err(refusal)
}

/// The global caps are everyone's but a sandbox key's, whose jobs hold no capacity; the
/// per-client one is the key's `max_active`, if any; the anonymous share and the network caps
/// are an anonymous client's alone.
fn capacity_limits(app: &App, caller: &Caller) -> CapacityLimits {
    let config = &app.config;
    let global = |cap| if caller.is_sandbox() { i64::MAX } else { cap };
    let anonymous = |cap| caller.network().map(|_| cap);
    CapacityLimits {
        max_queued: global(config.max_queued),
        max_anonymous_queued: anonymous(config.max_anonymous_queued()),
        max_rendering: global(config.max_rendering),
        max_active_per_client: caller.max_active(config.max_active_jobs_per_ip),
        max_active_per_network: anonymous(config.max_active_per_network),
        max_active_per_wide_network: anonymous(config.max_active_per_wide_network),
        farm: outbox::farm_room(app),
    }
}

/// The caller's share of the farm's time: its key's weight, or `ANONYMOUS_WEIGHT`.
fn fair_weight(app: &App, caller: &Caller) -> Weight {
    caller.fair_weight(app.config.anonymous_weight)
}

/// Step 5's cap by time (`MAX_QUEUE_WAIT`, off by default): a job whose estimated start, behind
/// the caller's own active jobs in fair order, is later than the cap is refused `queue_full`,
/// told when it would fit. One more read, only where the cap is set.
async fn check_queue_wait(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let Some(cap) = app.config.max_queue_wait else {
        return Ok(());
    };
    let wait = app.admissions.next_wait(caller).await.map_err(|error| {
        tracing::error!(%error, "queue wait read failed");
        Rejection::DatabaseUnavailable
    })?;
    let start = estimate::start_in(&app.config.farm(), &wait);
    if start <= cap {
        return Ok(());
    }
    Err(Rejection::QueueFull {
        retry_after: estimate::queue_wait_retry(start - cap),
    })
}

/// The refusal, with a `Retry-After` estimated from the farm model (estimate.rs). Reading the
/// load costs a refused request one more round trip; if it fails, the estimate is made from an
/// idle farm (a second) rather than failing the answer.
async fn no_room_rejection(
    app: &App,
    caller: &Caller,
    no_room: NoRoom,
    limits: &CapacityLimits,
) -> Rejection {
    let scope = caller.client().scope();
    if let (NoRoom::TooManyActiveJobs, true) = (no_room, caller.is_sandbox()) {
        // A sandbox job is active for a fixed time: a slot frees within it.
        return Rejection::TooManyActiveJobs {
            limit: limits.max_active_per_client,
            retry_after: sandbox::ACTIVE_FOR.as_secs(),
            scope,
        };
    }
    let load = match no_room {
        NoRoom::Duplicate(_) => Load::default(),
        _ => app.admissions.load(caller).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "could not read the load for a Retry-After estimate");
            Load::default()
        }),
    };
    let (model, farm) = (app.config.farm(), &load.farm);
    match no_room {
        NoRoom::Duplicate(existing) => duplicate(caller, existing),
        NoRoom::QueueFull | NoRoom::AnonymousQueueFull => Rejection::QueueFull {
            retry_after: estimate::queue_full_retry(&model, farm),
        },
        NoRoom::RenderCapacity => Rejection::RenderCapacity {
            retry_after: estimate::render_capacity_retry(&model, farm),
        },
        NoRoom::TooManyActiveJobs => Rejection::TooManyActiveJobs {
            limit: limits.max_active_per_client,
            retry_after: estimate::active_jobs_retry(&model, farm, &load.client),
            scope,
        },
        NoRoom::TooManyNetworkJobs => Rejection::TooManyActiveJobs {
            limit: limits.max_active_per_network.unwrap_or_default(),
            retry_after: estimate::active_jobs_retry(&model, farm, &load.network),
            scope: LimitScope::Network,
        },
        NoRoom::TooManyWideNetworkJobs => Rejection::TooManyActiveJobs {
            limit: limits.max_active_per_wide_network.unwrap_or_default(),
            retry_after: estimate::active_jobs_retry(&model, farm, &load.wide_network),
            scope: LimitScope::WideNetwork,
        },
    }
}

/// Step 10, done before the job is visible: a failure leaves nothing behind. A sandbox job
/// renders nothing, so its replay is not kept.
async fn store_replay(app: &App, job: &NewJob, replay: ReplayFile) -> Result<(), Rejection> {
    if job.sandbox.is_some() {
        return Ok(());
    }
    app.replays
        .put(&job.replay_key, replay.bytes)
        .await
        .map_err(|error| {
            tracing::error!(%error, job_id = %job.id, "replay upload failed");
            if error.is_transient() {
                Rejection::ReplayStorageUnavailable
            } else {
                Rejection::StorageFailed
            }
        })
}

/// Why `admit_or_resolve` admitted nothing.
enum NotAdmitted {
    NoRoom(NoRoom),
    ClaimLost,
    /// The database failed and nothing was applied (or the job was fenced).
    Failed,
    /// Whether the job was committed could not be learned in time.
    Unknown,
}

/// Step 9's statement, and the truth about it when no answer came: a late answer after a
/// commit, or a connection lost mid-statement, is resolved on a fresh connection (the job, or
/// a fence that makes the statement refuse if it runs later). The statement runs with a reserve
/// of the request's deadline kept for that.
/// Admitted, the events its release leased to this request; resolved as admitted, `None`.
async fn admit_or_resolve(
    app: &App,
    job: &NewJob,
    limits: &CapacityLimits,
) -> Result<Option<Vec<OutboxEvent>>, NotAdmitted> {
    let reserve = app.config.settle_reserve(app.config.db_timeout);
    let error = match deadline::reserving(reserve, app.admissions.admit(job, limits)).await {
        Ok(Admission::Admitted(released)) => return Ok(Some(released)),
        Ok(Admission::NoRoom(no_room)) => return Err(NotAdmitted::NoRoom(no_room)),
        Ok(Admission::ClaimLost) => return Err(NotAdmitted::ClaimLost),
        Ok(Admission::Abandoned) => return Err(NotAdmitted::Failed),
        Err(error) => error,
    };
    if !error.outcome_unknown() {
        tracing::error!(%error, job_id = %job.id, "admission transaction failed");
        return Err(NotAdmitted::Failed);
    }
    tracing::warn!(%error, job_id = %job.id, "admission outcome unknown; resolving it");
    match app.admissions.resolve(job).await {
        Ok(Resolved::Admitted) => Ok(None),
        Ok(Resolved::Abandoned) => Err(NotAdmitted::Failed),
        Err(error) => {
            tracing::error!(%error, job_id = %job.id, "admission outcome unresolved; replay kept");
            Err(NotAdmitted::Unknown)
        }
    }
}

/// Best effort: an object left behind is unreferenced and expires by the lifecycle rule.
async fn discard_replay(app: &App, job: &NewJob) {
    if job.sandbox.is_some() {
        return;
    }
    if let Err(error) = app.replays.delete(&job.replay_key).await {
        tracing::warn!(%error, job_id = %job.id, "could not delete the replay of a refused job");
    }
}

/// Whether a keyed job's admission queued a live event (its key is followed: the insert
/// queued its push), so the dispatcher is woken for it. An anonymous job is followed by its
/// id only, known from this answer on, which queues nothing before it is subscribed.
async fn live_event_due(app: &App, caller: &Caller) -> bool {
    if caller.is_anonymous() {
        return false;
    }
    matches!(app.pushes.next_due().await, Ok(Some(due)) if due.is_zero())
}

/// The response to an admitted render, and to every retry with its idempotency key.
pub fn admitted_response(config: &Config, job_id: JobId) -> StoredResponse {
    let location = config.link(&job_id.status_path());
    let mut links = json!({ "status": location });
    if let Some(url) = &config.events_url {
        links["events"] = json!(url);
    }
    StoredResponse {
        status: 202,
        body: json!({
            "job_id": job_id,
            "status": "queued",
            "links": links,
        }),
        location: Some(location),
    }
}

mod by_url;
#[cfg(test)]
mod tests;
