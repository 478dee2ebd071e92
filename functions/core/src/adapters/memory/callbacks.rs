//! Jobs' callbacks, their addresses and their sender.

use super::*;
use crate::domain::callback::{is_public, CallbackUrl};
use crate::ports::callbacks::{
    Callback, CallbackAddresses, CallbackClaim, CallbackSender, SendError, SignedBody,
};

/// Jobs' callbacks and their sender. The memory database queues none itself (the
/// `queue_job_callback` trigger is Postgres'): a test pushes them, and reads what the sender was
/// asked to send. The sender checks literal addresses as the real one does; a host name counts as
/// public (no DNS here).
#[derive(Default)]
pub struct MemoryCallbacks {
    queued: Mutex<Vec<(Callback, EventStatus, DateTime<Utc>)>>,
    sent: Mutex<Vec<(String, Vec<u8>, String)>>,
    down: Outage,
    failing_marks: Mutex<Vec<i64>>,
    lookups_fail: AtomicBool,
}

impl MemoryCallbacks {
    /// As the `job_callback_client` insert trigger: not due before the job's pending callbacks'
    /// available_at.
    pub fn push(&self, callback: Callback) {
        let mut queued = lock(&self.queued);
        let at = queued
            .iter()
            .filter(|(c, status, _)| c.job_id == callback.job_id && *status == EventStatus::Pending)
            .map(|(_, _, at)| *at)
            .fold(Utc::now(), DateTime::max);
        queued.push((callback, EventStatus::Pending, at));
    }

    /// As adapters/postgres/callbacks.rs' marks: the job's pending callbacks after `sequence` that
    /// are at exactly `from` (they waited for its lease) are moved to `to`; if `push` (a retry),
    /// the others before `to` are too.
    fn move_later(
        queued: &mut [(Callback, EventStatus, DateTime<Utc>)],
        (job, sequence): (JobId, i32),
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        push: bool,
    ) {
        for (c, status, due) in queued.iter_mut() {
            if c.job_id != job || c.sequence <= sequence || *status != EventStatus::Pending {
                continue;
            }
            if *due == from {
                *due = to;
            } else if push {
                *due = (*due).max(to);
            }
        }
    }

    /// What was sent, in order: the URL, the body and the signature.
    pub fn sent(&self) -> Vec<(String, Vec<u8>, String)> {
        lock(&self.sent).clone()
    }

    /// Every callback's status (`Pending`, `Dispatched`, `Failed`), by id.
    pub fn statuses(&self) -> Vec<(i64, String)> {
        lock(&self.queued)
            .iter()
            .map(|(c, status, _)| (c.id, format!("{status:?}")))
            .collect()
    }

    /// Marking callback `id` (delivered or to retry) fails, as a database that does not answer.
    pub fn fail_mark_of(&self, id: i64) {
        lock(&self.failing_marks).push(id);
    }

    fn check_mark(&self, ids: impl IntoIterator<Item = i64>) -> Result<(), StoreError> {
        let failing = lock(&self.failing_marks);
        match ids.into_iter().find(|id| failing.contains(id)) {
            Some(id) => Err(StoreError::new(format!("marking callback {id} failed"))),
            None => Ok(()),
        }
    }

    /// Every host name's lookup fails (the resolver does not answer).
    pub fn set_lookups_failing(&self, failing: bool) {
        self.lookups_fail.store(failing, Ordering::SeqCst);
    }

    /// Every receiver fails to answer.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }

    /// Makes every pending callback due now (its backoff passed).
    pub fn make_due(&self) {
        for (_, _, at) in lock(&self.queued).iter_mut() {
            *at = Utc::now();
        }
    }
}

#[async_trait]
impl LeasedQueue for MemoryCallbacks {
    type Item = Callback;
    type Claim = CallbackClaim;

    /// Every callback counts as one client's here: `per_client` caps a claim too. Nothing is
    /// queued here but what a test pushes, so `max_pending_per_key` bounds nothing.
    async fn claim(&self, claim: CallbackClaim) -> Result<Vec<Callback>, StoreError> {
        let CallbackClaim {
            lease: claim,
            shares,
        } = claim;
        let limit = claim.limit.min(shares.per_client);
        let mut queued = lock(&self.queued);
        let now = Utc::now();
        let pending = |job: JobId, before: i32, rows: &[(Callback, EventStatus, DateTime<Utc>)]| {
            rows.iter().any(|(c, status, _)| {
                c.job_id == job && c.sequence < before && *status == EventStatus::Pending
            })
        };
        let due: Vec<usize> = (0..queued.len())
            .filter(|&i| {
                let (c, status, at) = &queued[i];
                *status == EventStatus::Pending
                    && *at <= now
                    && c.attempts < claim.max_attempts
                    && !pending(c.job_id, c.sequence, &queued)
            })
            .take(usize::try_from(limit).unwrap_or(0))
            .collect();
        let lease_end = now + claim.lease;
        let claimed: Vec<Callback> = due
            .into_iter()
            .map(|i| {
                let (c, _, at) = &mut queued[i];
                c.attempts += 1;
                *at = lease_end;
                c.clone()
            })
            .collect();
        // As the Postgres claim's `held`: the claimed ones' later due callbacks wait for the lease.
        for (c, status, at) in queued.iter_mut() {
            let behind = claimed
                .iter()
                .any(|head| head.job_id == c.job_id && head.sequence < c.sequence);
            if behind && *status == EventStatus::Pending && *at <= now {
                *at = lease_end;
            }
        }
        Ok(claimed)
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        self.check_mark(ids.iter().copied())?;
        let mut queued = lock(&self.queued);
        let mut sent = Vec::new();
        for (c, status, at) in queued.iter_mut() {
            if ids.contains(&c.id) && *status == EventStatus::Pending {
                *status = EventStatus::Dispatched;
                sent.push(((c.job_id, c.sequence), *at));
            }
        }
        let now = Utc::now();
        for (callback, at) in sent.into_iter().filter(|&(_, at)| at > now) {
            Self::move_later(&mut queued, callback, at, now, false);
        }
        Ok(())
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        self.check_mark(retries.iter().map(|r| r.id))?;
        let mut queued = lock(&self.queued);
        let mut failed = 0;
        let mut moved = Vec::new();
        for (c, status, at) in queued.iter_mut() {
            let Some(retry) = retries.iter().find(|r| r.id == c.id) else {
                continue;
            };
            if *status != EventStatus::Pending {
                continue;
            }
            let leased_until = *at;
            *at = Utc::now() + retry.delay;
            if c.attempts >= max_attempts {
                *status = EventStatus::Failed;
                failed += 1;
                moved.push(((c.job_id, c.sequence), leased_until, Utc::now(), false));
            } else {
                moved.push(((c.job_id, c.sequence), leased_until, *at, true));
            }
        }
        for (callback, from, to, push) in moved {
            Self::move_later(&mut queued, callback, from, to, push);
        }
        Ok(failed)
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut failed = 0;
        for (c, status, at) in lock(&self.queued).iter_mut() {
            if *status == EventStatus::Pending && *at <= now && c.attempts >= max_attempts {
                *status = EventStatus::Failed;
                failed += 1;
            }
        }
        Ok(failed)
    }

    async fn next_due(&self, max_attempts: i32) -> Result<Option<Duration>, StoreError> {
        let queued = lock(&self.queued);
        let waiting = queued
            .iter()
            .filter(|(c, status, _)| *status == EventStatus::Pending && c.attempts < max_attempts);
        Ok(next_due(waiting.map(|(_, _, at)| *at)))
    }
}

#[async_trait]
impl CallbackAddresses for MemoryCallbacks {
    async fn check(&self, url: &CallbackUrl) -> Result<(), SendError> {
        match url.literal_address() {
            Some(address) if !is_public(address) => Err(SendError::Refused {
                host: url.host_and_port().0,
                address,
            }),
            None if self.lookups_fail.load(Ordering::SeqCst) => {
                Err(SendError::LookupFailed(url.host_and_port().0))
            }
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl CallbackSender for MemoryCallbacks {
    async fn send(&self, url: &CallbackUrl, signed: SignedBody) -> Result<(), SendError> {
        self.check(url).await?;
        if self.down.is_down() {
            return Err(SendError::Status(503));
        }
        lock(&self.sent).push((url.as_str().to_owned(), signed.body, signed.signature));
        Ok(())
    }
}
