//! The `jobs` table: admission (steps 5–9: global capacity, the per-client lock and limit, the
//! job + outbox insert), the status reads, the workers' transitions and the janitor's.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::client::ClientKey;
use crate::domain::job::{JobId, JobStatus};
use crate::domain::render::RenderOptions;
use crate::estimate::Recent;
use crate::ports::idempotency::{Claim, StoredResponse};
use crate::ports::outbox::{OutboxEvent, RENDER_JOB_CREATED};
use crate::ports::StoreError;

/// The caps admission enforces (DESIGN.md invariants 1 and 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityLimits {
    pub max_queued: i64,
    pub max_rendering: i64,
    pub max_active_per_client: i64,
}

/// Why a job cannot be admitted, in the order the checks are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The client has this replay queued or rendering already, as this job.
    Duplicate(JobId),
    QueueFull,
    RenderCapacity,
    TooManyActiveJobs,
}

/// How an admission came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Committed, with its outbox event for the caller to publish.
    Admitted(OutboxEvent),
    /// Refused by a re-check under the locks.
    NoRoom(NoRoom),
    /// The request's idempotency claim is no longer its own (released, or taken over as stale):
    /// nothing was inserted, so the key never points at a job it did not make.
    ClaimLost,
    /// `resolve` gave this job up before the admission ran: nothing was inserted.
    Abandoned,
}

/// What `resolve` found out about an admission whose answer never came.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// It committed: the job exists, with this outbox event.
    Admitted(OutboxEvent),
    /// It did not, and now never will: the job id is fenced.
    Abandoned,
}

/// Active job counts, globally and of one client, and the client's active job of one replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occupancy {
    pub queued: i64,
    pub rendering: i64,
    pub active_for_client: i64,
    pub duplicate: Option<JobId>,
}

impl Occupancy {
    /// The capacity checks (steps 5, 6 and 8); the duplicate is checked before the rate limit.
    pub fn check(&self, limits: &CapacityLimits) -> Result<(), NoRoom> {
        if self.queued >= limits.max_queued {
            Err(NoRoom::QueueFull)
        } else if self.rendering >= limits.max_rendering {
            Err(NoRoom::RenderCapacity)
        } else if self.active_for_client >= limits.max_active_per_client {
            Err(NoRoom::TooManyActiveJobs)
        } else {
            Ok(())
        }
    }
}

/// A job about to be admitted; its replay is already stored under `replay_key`.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: JobId,
    pub client: ClientKey,
    pub options: RenderOptions,
    pub replay_key: String,
    pub replay_sha256: [u8; 32],
    /// The idempotency claim this admission completes, with the response its retries get.
    pub completes: Option<(Claim, StoredResponse)>,
}

impl NewJob {
    /// This job's `render_job_created` event, as admission stored it under `id`.
    pub fn event(&self, id: i64) -> OutboxEvent {
        OutboxEvent {
            id,
            job_id: self.id,
            event_type: RENDER_JOB_CREATED.to_owned(),
            payload: self.event_payload(),
            attempts: 1,
        }
    }

    /// The `render_job_created` payload the workers receive.
    pub fn event_payload(&self) -> serde_json::Value {
        serde_json::json!({
            "job_id": self.id,
            "replay_key": self.replay_key,
            "skin": self.options.skin,
            "config": self.options,
        })
    }
}

/// A job as the API shows it. Who submitted it is not selected, so it cannot leak.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub status: JobStatus,
    pub progress: f32,
    /// 1-based place among the queued jobs, oldest first; `None` unless queued.
    pub queue_position: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub error: Option<String>,
    pub config: serde_json::Value,
    pub video_key: Option<String>,
    pub thumb_key: Option<String>,
    /// Jobs completed in the last hour, read for queued jobs only (their `estimated_start`).
    pub recent_completed: Option<i64>,
}

/// What capacity refusals estimate their `Retry-After` from (estimate.rs).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    pub recent: Recent,
    pub queued: i64,
    /// Age of the client's oldest active job, seconds.
    pub oldest_active_age_secs: Option<f64>,
}

/// A page of `GET /v1/jobs`, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobQuery {
    pub status: Option<JobStatus>,
    pub limit: i64,
    pub offset: i64,
}

/// A render worker's validated report: what the job moves to and what to record with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub to: JobStatus,
    /// `None` keeps the stored progress within a state, and is 0 in a new one.
    pub progress: Option<f32>,
    pub video_key: Option<String>,
    pub thumb_key: Option<String>,
    pub error: Option<String>,
    /// The janitor fails the job if no report comes by then; `None` for a terminal state.
    pub deadline_in: Option<Duration>,
}

/// The report's nonce and how long it must be remembered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    pub value: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TransitionOutcome {
    Applied { status: JobStatus, progress: f32 },
    NonceReused,
    UnknownJob,
    Illegal { current: JobStatus },
}

#[async_trait]
pub trait JobStore: Send + Sync {
    /// An unlocked look at occupancy and at the client's active job of this replay, to refuse
    /// early before anything is stored; with `claim`, the idempotency claim is tried in the same
    /// round trip (pipelined) and whether it was made comes back too.
    async fn occupancy(
        &self,
        client: &ClientKey,
        replay_sha256: &[u8; 32],
        claim: Option<(&Claim, &[u8; 32])>,
    ) -> Result<(Occupancy, Option<bool>), StoreError>;

    /// Recent throughput, the queue's length and the client's oldest active job.
    async fn load(&self, client: &ClientKey) -> Result<Load, StoreError>;

    /// Locks, re-checks the duplicate and `limits` and inserts the job with its outbox event
    /// (completing its idempotency claim), atomically; the event comes back for the caller to
    /// publish.
    async fn admit(&self, job: &NewJob, limits: &CapacityLimits) -> Result<Admission, StoreError>;

    /// Settles an `admit` of `job` whose outcome is unknown (no answer came): the job if it
    /// was committed, else a fence that makes a late `admit` of it refuse. Final either way.
    async fn resolve(&self, job: &NewJob) -> Result<Resolved, StoreError>;

    async fn find(&self, id: JobId) -> Result<Option<JobRecord>, StoreError>;

    /// One page and the number of jobs matching the filter.
    async fn list(&self, query: &JobQuery) -> Result<(Vec<JobRecord>, i64), StoreError>;

    /// Spends the nonce and, if it was fresh and the job's current state may move to
    /// `transition.to`, applies the transition; one statement, so it is all or nothing and a
    /// concurrent change of the job is re-checked rather than overwritten.
    async fn transition(
        &self,
        id: JobId,
        transition: &Transition,
        nonce: &Nonce,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Ends the jobs queued longer than `ttl` as `expired`. Returns how many.
    async fn expire_queued(&self, ttl: Duration) -> Result<u64, StoreError>;

    /// Fails the downloading/rendering jobs past their deadline (or, without one, not updated
    /// for `stall_timeout`). Returns how many.
    async fn fail_stalled(&self, stall_timeout: Duration) -> Result<u64, StoreError>;

    /// Forgets the nonces whose reports could no longer be accepted. Returns how many.
    async fn prune_nonces(&self) -> Result<u64, StoreError>;

    /// Forgets, a bounded batch at a time, the fences of `resolve` older than any statement
    /// can be in flight. Returns how many.
    async fn prune_fences(&self) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn occupancy_checks_in_admission_order() {
        let limits = CapacityLimits {
            max_queued: 2,
            max_rendering: 1,
            max_active_per_client: 1,
        };
        let at = |queued, rendering, active_for_client| Occupancy {
            queued,
            rendering,
            active_for_client,
            duplicate: None,
        };
        assert_eq!(at(1, 0, 0).check(&limits), Ok(()));
        assert_eq!(at(2, 1, 1).check(&limits), Err(NoRoom::QueueFull));
        assert_eq!(at(1, 1, 1).check(&limits), Err(NoRoom::RenderCapacity));
        assert_eq!(at(1, 0, 1).check(&limits), Err(NoRoom::TooManyActiveJobs));
    }
}
