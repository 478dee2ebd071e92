//! `POST /v1/render`: the admission steps of DESIGN.md §2, in the order they run. The first
//! failing step decides; no step touches state or spends quota before the cheaper ones have
//! passed. `admit` reads top to bottom like the table, each step a function that returns its
//! refusal.
//!
//! An anonymous client is limited three times (DESIGN.md §3, "Fair share"): as itself (an
//! address, an IPv6 /64), as its network (an IPv4 /24, an IPv6 /48) and as its wide network (an
//! IPv4 /16, an IPv6 /32), in the rate limit and the active-jobs cap; anonymous clients together
//! hold at most `ANONYMOUS_QUEUE_SHARE` of the queue. A key is its own client, under none of
//! these.
//!
//! A sandbox key's request (`osr_test_…`) runs every step, but its job holds no capacity: the
//! global caps do not apply to it, its active jobs are its recent sandbox jobs, its replay is
//! not stored, and it never reaches the render queue (domain/sandbox.rs).

use axum::http::HeaderValue;
use bytes::Bytes;
use serde_json::json;

use crate::domain::caller::Caller;
use crate::domain::form::BodyStream;
use crate::domain::hash::{ReplayHash, RequestHash};
use crate::domain::job::JobId;
use crate::domain::rate::RateDecision;
use crate::domain::replay::ReplayInfo;
use crate::domain::sandbox;
use crate::ports::idempotency::{Claim, Reply, StoredResponse};
use crate::ports::jobs::{Occupancy, OccupancyLook};
use crate::support::config::Config;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::callbacks::check_callback_host;
use crate::usecases::idempotency::{self, Begin};
use crate::usecases::policy::{check_caller_ban_during, check_intake_open, check_player_ban};
use crate::usecases::request::{
    count_rate_windows, epoch_secs, Counted, FormUpload, Spent, Submission, Window,
};
use crate::usecases::skins;

use capacity::{capacity_limits, check_capacity, check_queue_wait};
use form::{check_form, render_request_hash, RenderRequest, RenderSettings, Replay};
use store::store_and_admit;

/// The rate-limited endpoint name: the limiter counts each endpoint separately.
pub const RENDER_ENDPOINT: &str = "render";
/// The renders of one anonymous network, counted together.
pub const RENDER_NETWORK_ENDPOINT: &str = "render_network";
/// The renders of one anonymous wide network, counted together.
pub const RENDER_WIDE_NETWORK_ENDPOINT: &str = "render_wide_network";

/// A replay that passed the replay file, structure and rules checks: an `.osr` of allowed size
/// that osrparse would read, and the render policy renders.
#[derive(Debug, Clone)]
pub struct ReplayFile {
    bytes: Bytes,
    sha256: ReplayHash,
    /// What it renders, as the job shows it; its `player` is what a player ban matches (both
    /// are at most 64 characters).
    info: ReplayInfo,
}

/// `idempotency_key`: the request's `Idempotency-Key` header, if any.
pub async fn submit_render<S: BodyStream>(
    app: &App,
    caller: &Caller,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
) -> Submission<Reply<JobId>> {
    let mut count = RateCount::NotYet;
    let outcome = admit(app, caller, idempotency_key, upload, &mut count).await;
    count.settle(app, outcome).await
}

/// The admission steps, in order (DESIGN.md §2).
async fn admit<S: BodyStream>(
    app: &App,
    caller: &Caller,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
    count: &mut RateCount,
) -> Result<Reply<JobId>, Rejection> {
    // The caller ban, while the stateless checks run: a cold instance reads its policy meanwhile.
    let form = check_form(app, caller, idempotency_key, upload);
    let form = check_caller_ban_during(app, caller, form).await?;
    check_rehearsed_rate_limit(app, caller, &form.settings)?;
    let request = match form.replay {
        Replay::Uploaded(replay) => form.settings.with(replay),
        // The rate limit counts it first, then the replay is fetched and checked.
        Replay::At(url) => {
            let replay = by_url::fetch_replay(app, caller, &url, count).await?;
            form.settings.with(replay)
        }
    };
    check_player_ban(app, &request.replay.info.player).await?;
    let keyed = Keyed::of(app, caller, &request);
    let occupancy = match look(app, caller, &request.replay, &keyed).await? {
        Looked::Run(occupancy) => occupancy,
        Looked::Replay(response) => {
            count.give_back(app).await;
            return Ok(Reply::Replayed(response));
        }
    };
    check_looked(caller, &occupancy)?;
    count.rate_limit(app, caller).await?;
    check_rehearsed_refusal(&request.settings)?;
    skins::check_renderable(app, &request.settings.options.skin).await?;
    check_intake_open(app, caller).await?;
    if let Some(url) = &request.settings.callback {
        check_callback_host(app, url).await?;
    }
    let limits = capacity_limits(app, caller);
    check_capacity(app, caller, &occupancy, &limits).await?;
    if !caller.is_sandbox() {
        check_queue_wait(app, caller).await?;
    }
    // The idempotency claim, only now that the cheaper refusals have passed. Another request
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

/// Whether, and when, the rate limit counted the request; what its answer says of that.
enum RateCount {
    NotYet,
    /// Counted at its place in the order.
    Counted(Spent),
    /// Counted before its replay was fetched: the fetch was work done for the client, so the
    /// hit is kept whatever refuses it (a client's fetches stay within its render limit).
    BeforeFetch(Spent),
}

impl RateCount {
    /// The rate limit, unless the request was counted already.
    async fn rate_limit(&mut self, app: &App, caller: &Caller) -> Result<(), Rejection> {
        if let RateCount::NotYet = self {
            *self = RateCount::Counted(check_render_rate(app, caller).await?);
        }
        Ok(())
    }

    /// A retry answered from its key's first response spends no quota: a hit counted before
    /// the key could be read is given back.
    async fn give_back(&mut self, app: &App) {
        match std::mem::replace(self, RateCount::NotYet) {
            RateCount::Counted(spent) | RateCount::BeforeFetch(spent) => {
                spent.give_back(app).await;
            }
            RateCount::NotYet => {}
        }
    }

    /// The answer, with the rate limit's headers when the request was counted. Waiting costs
    /// no quota: a refusal for the service's state gives the hits back (the client's, its
    /// network's), so a client that honours Retry-After is not locked out.
    async fn settle<T>(self, app: &App, outcome: Result<T, Rejection>) -> Submission<T> {
        let rate = match self {
            RateCount::NotYet => None,
            RateCount::Counted(spent)
                if outcome.as_ref().is_err_and(Rejection::is_the_services) =>
            {
                spent.give_back(app).await
            }
            RateCount::Counted(spent) | RateCount::BeforeFetch(spent) => spent.rate,
        };
        Submission { outcome, rate }
    }
}

/// A request's `Idempotency-Key`, if it sent one, as the claim it would take, and the hash of
/// the request that a retry with the key must match.
struct Keyed {
    claim: Option<Claim>,
    request_hash: RequestHash,
}

impl Keyed {
    fn of(app: &App, caller: &Caller, request: &RenderRequest) -> Self {
        Self {
            request_hash: render_request_hash(request),
            claim: request.settings.key.clone().map(|key| {
                Claim::new(
                    caller.client(),
                    RENDER_ENDPOINT,
                    key,
                    app.config.http.request_deadline,
                )
            }),
        }
    }
}

/// How the look came out.
enum Looked {
    /// Go on, with this occupancy look.
    Run(Occupancy),
    Replay(StoredResponse),
}

/// The look: its reads in one round trip: the key's holder (if there is a key) and the
/// occupancy look that also finds a duplicate. A key completed for this request answers; one
/// held by a request in progress is waited for (idempotency::answered), and if that request
/// freed it, this one goes on with the occupancy it read (admit_job re-checks under its locks).
async fn look(
    app: &App,
    caller: &Caller,
    replay: &ReplayFile,
    keyed: &Keyed,
) -> Result<Looked, Rejection> {
    let cooldown = app.config.renders.replay_failure_cooldown;
    let looked = app
        .admissions
        .occupancy(&OccupancyLook {
            caller,
            replay: &replay.sha256,
            failure_cooldown: cooldown,
            key: keyed.claim.as_ref(),
        })
        .await;
    let (occupancy, held) = looked.map_err(|error| error.into_rejection("occupancy check"))?;
    if let Some(claim) = &keyed.claim {
        let hash = &keyed.request_hash;
        if let Some(response) = idempotency::answered(app, claim, hash, held).await? {
            return Ok(Looked::Replay(response));
        }
    }
    Ok(Looked::Run(occupancy))
}

/// The look's refusals: the client's active job of the same replay, a recent failure of it.
fn check_looked(caller: &Caller, occupancy: &Occupancy) -> Result<(), Rejection> {
    if let Some(existing) = occupancy.duplicate {
        return Err(duplicate(caller, existing));
    }
    if let Some(left) = occupancy.failed_recently {
        let retry_after = left.as_secs_f64().ceil() as u64;
        return Err(Rejection::ReplayFailedRecently { retry_after });
    }
    Ok(())
}

/// The duplicate's refusal. It names the job only to a key's client: an address may be shared
/// (a NAT, a campus), and its other users must not learn a job id, which reads the job.
fn duplicate(caller: &Caller, existing: JobId) -> Rejection {
    Rejection::DuplicateReplay((!caller.is_anonymous()).then_some(existing))
}

/// The rate limit: the client's window, then an anonymous client's network's and its wide network's,
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

/// A sandbox request's rehearsed 429 (`sandbox_outcome=rate_limited`), right after the form
/// fields: its render window as spent, with the headers and `Retry-After` a spent window has;
/// nothing is counted or fetched.
fn check_rehearsed_rate_limit(
    app: &App,
    caller: &Caller,
    settings: &RenderSettings,
) -> Result<(), Rejection> {
    if settings.rehearsed != Some(sandbox::Refusal::RateLimited) {
        return Ok(());
    }
    let limit = caller.render_limit(app.config.rate_limits.render);
    let decision = RateDecision::new(RENDER_ENDPOINT, limit, None, epoch_secs());
    Err(Rejection::RateLimited(decision, caller.client().scope()))
}

/// A sandbox request's rehearsed capacity refusals, right after the rate limit.
fn check_rehearsed_refusal(settings: &RenderSettings) -> Result<(), Rejection> {
    match settings.rehearsed {
        Some(sandbox::Refusal::QueueFull) => Err(Rejection::QueueFull {
            retry_after: sandbox::REHEARSED_QUEUE_WAIT.as_secs(),
        }),
        Some(sandbox::Refusal::RenderJobsPaused) => Err(Rejection::RenderJobsPaused {
            reason: Some("a sandbox rehearsal (sandbox_outcome=render_jobs_paused)".into()),
        }),
        _ => Ok(()),
    }
}

/// The response to an admitted render, and to every retry with its idempotency key.
pub fn admitted_response(config: &Config, job_id: JobId) -> StoredResponse {
    let location = config.http.link(&job_id.status_path());
    let mut links = json!({ "status": location });
    if let Some(url) = &config.http.events_url {
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
mod capacity;
mod form;
mod store;
#[cfg(test)]
mod tests;
