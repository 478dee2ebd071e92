//! A request's job made real (DESIGN.md §2: the replay stored, the admission, the release):
//! the replay is stored under the new job's id, and only then is the job admitted, with the
//! locked re-checks, in one statement, so a job row is never visible without its replay.

use crate::domain::caller::Caller;
use crate::domain::deadline;
use crate::domain::farm::RenderCost;
use crate::domain::job::JobId;
use crate::ports::idempotency::Claim;
use crate::ports::jobs::{Admission, CapacityLimits, NewJob, NoRoom, Resolved};
use crate::ports::outbox::OutboxEvent;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::{callbacks, outbox};

use super::capacity::{fair_weight, no_room_rejection};
use super::form::{RenderRequest, RenderSettings};
use super::{admitted_response, ReplayFile};

/// The replay stored, the admission and the release, for a request holding its key's claim if
/// it has a key (invariant 3: a job row is never visible without its replay). The object is
/// deleted again only when the job is known not to exist: a refused re-check, or an unknown
/// outcome resolved as abandoned. An outcome that stays unknown keeps it (a crash too): at
/// worst an unreferenced object, which the bucket's lifecycle rule removes. Once committed, the
/// job waits in the queue of record; the release pipelined behind the admission hands the farm
/// what it has room for, in fair order, and those events are published at once; whatever
/// happens to that, the outbox sweep delivers them. A job with a callback, or a followed key's,
/// wakes the dispatcher.
pub(super) async fn store_and_admit(
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
        cost: RenderCost::of(replay.info.length_ms, app.config.capacity.render_overhead),
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
/// The replay stored, before the job is visible: a failure leaves nothing behind. A sandbox job
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

/// The admission's statement, and the truth about it when no answer came: a late answer after a
/// commit, or a connection lost mid-statement, is resolved on a fresh connection (the job, or
/// a fence that makes the statement refuse if it runs later). The statement runs with a reserve
/// of the request's deadline kept for that.
/// Admitted, the events its release leased to this request; resolved as admitted, `None`.
async fn admit_or_resolve(
    app: &App,
    job: &NewJob,
    limits: &CapacityLimits,
) -> Result<Option<Vec<OutboxEvent>>, NotAdmitted> {
    let reserve = app.config.http.settle_reserve(app.config.database.timeout);
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
