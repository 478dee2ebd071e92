//! The capacity checks (DESIGN.md §2: queue depth, render capacity, active jobs, queue wait)
//! and the refusals they answer, each with a `Retry-After` from the farm model (estimate.rs).

use crate::domain::caller::Caller;
use crate::domain::farm::Weight;
use crate::domain::rate::LimitScope;
use crate::domain::sandbox;
use crate::ports::jobs::{CapacityLimits, Load, NoRoom, Occupancy};
use crate::support::estimate;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::outbox;

use super::duplicate;

/// The global caps are everyone's but a sandbox key's, whose jobs hold no capacity; the
/// per-client one is the key's `max_active`, if any; the anonymous share and the network caps
/// are an anonymous client's alone.
pub(super) fn capacity_limits(app: &App, caller: &Caller) -> CapacityLimits {
    let config = &app.config;
    let global = |cap| if caller.is_sandbox() { i64::MAX } else { cap };
    let anonymous = |cap| caller.network().map(|_| cap);
    CapacityLimits {
        max_queued: global(config.capacity.max_queued),
        max_anonymous_queued: anonymous(config.capacity.max_anonymous_queued()),
        max_rendering: global(config.capacity.max_rendering),
        max_active_per_client: caller.max_active(config.capacity.max_active_per_client),
        max_active_per_network: anonymous(config.capacity.max_active_per_network),
        max_active_per_wide_network: anonymous(config.capacity.max_active_per_wide_network),
        farm: outbox::farm_room(app),
    }
}

/// The caller's share of the farm's time: its key's weight, or `ANONYMOUS_WEIGHT`.
pub(super) fn fair_weight(app: &App, caller: &Caller) -> Weight {
    caller.fair_weight(app.config.capacity.anonymous_weight)
}

/// Queue depth, render capacity and active jobs, from the look's unlocked read: a request
/// refused here stores and claims nothing (the admission re-checks them under its locks).
pub(super) async fn check_capacity(
    app: &App,
    caller: &Caller,
    occupancy: &Occupancy,
    limits: &CapacityLimits,
) -> Result<(), Rejection> {
    match occupancy.check(limits) {
        Ok(()) => Ok(()),
        Err(no_room) => Err(no_room_rejection(app, caller, no_room, limits).await),
    }
}

/// The queue wait: the queue depth's cap by time (`MAX_QUEUE_WAIT`, off by default): a job whose estimated start, behind
/// the caller's own active jobs in fair order, is later than the cap is refused `queue_full`,
/// told when it would fit. One more read, only where the cap is set.
pub(super) async fn check_queue_wait(app: &App, caller: &Caller) -> Result<(), Rejection> {
    let Some(cap) = app.config.capacity.max_queue_wait else {
        return Ok(());
    };
    let wait = app.admissions.next_wait(caller).await;
    let wait = wait.map_err(|error| error.into_rejection("queue wait read"))?;
    let start = estimate::start_in(&app.config.capacity.farm(), &wait);
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
pub(super) async fn no_room_rejection(
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
    let (model, farm) = (app.config.capacity.farm(), &load.farm);
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
