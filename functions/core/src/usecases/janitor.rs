//! The scheduled `janitor`: ends jobs that will not finish, so they stop holding capacity.
//!
//! Every step is one conditional statement over rows still in the state it ends, so a run is
//! idempotent and two runs at once split the work instead of repeating it: a row one run has
//! changed no longer matches the other's condition when Postgres re-checks it, and a worker's
//! report racing a run is serialized with it by the row lock, each re-checking the other's
//! result (a job the janitor failed refuses a late `completed` with 409).
//!
//! Outbox events need no re-arming here: a claimed event whose publisher died becomes due again
//! when its lease ends (see `outbox`). The janitor's part is the events that have used all
//! their attempts that way, which no sweep will claim again: they are marked failed. So are
//! callbacks in that state (callbacks.rs), or the job's later callbacks would wait forever.
//!
//! History does not pile up: jobs that ended over `JOB_RETENTION` ago go with their outbox
//! events; spent nonces, idempotency keys and admission fences go once nothing can use them
//! (all well before `JOB_RETENTION`). Every delete is a statement of at most `PRUNE_BATCH` rows,
//! oldest first by an index, repeated while batches come back full, for at most
//! `MAX_PRUNE_BATCHES` per kind and while the run is within `REQUEST_DEADLINE_MS`; what is left
//! waits for the next run.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::time::Instant;

use crate::ports::StoreError;
use crate::usecases::app::App;
use crate::usecases::callbacks;
use crate::usecases::outbox;
use crate::usecases::skins::ingest;

/// Rows one delete statement removes at most: its locks are short and its time bounded.
pub const PRUNE_BATCH: i64 = 1_000;
/// Batches of one kind a run deletes at most.
pub const MAX_PRUNE_BATCHES: u64 = 50;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JanitorReport {
    /// Queued longer than `QUEUED_TTL`: now `expired`.
    pub expired: u64,
    /// Downloading/rendering with no report for `RENDER_STALL_TIMEOUT`: now `failed`.
    pub timed_out: u64,
    /// Released to the farm and not taken by a worker for twice `RENDER_STALL_TIMEOUT`: now
    /// `failed`, their room free again.
    pub unclaimed: u64,
    /// Outbox events out of attempts after their last lease ran out: now `failed`.
    pub outbox_failed: u64,
    /// Callbacks likewise.
    pub callbacks_failed: u64,
    /// Webhook nonces past the time their reports could be accepted: deleted.
    pub nonces_pruned: u64,
    /// Idempotency keys past their day: deleted.
    pub idempotency_keys_pruned: u64,
    /// Fences of resolved admissions past their day: deleted.
    pub admission_fences_pruned: u64,
    /// Fair clients whose last finish the clock has passed: forgotten.
    pub fair_clients_pruned: u64,
    /// Jobs ended over `JOB_RETENTION` ago: deleted.
    pub jobs_deleted: u64,
    /// Their outbox events: deleted with them.
    pub outbox_events_deleted: u64,
    /// Presigned uploads' ingest claims past their day (skins/ingest.rs): deleted.
    pub skin_ingests_pruned: u64,
    /// Live-event watches past their connections' longest life: deleted.
    pub watches_pruned: u64,
}

pub async fn run(app: &App) -> Result<JanitorReport, StoreError> {
    let jobs = &app.housekeeping;
    let mut report = JanitorReport::default();
    let ended = end_what_will_not_finish(app, &mut report).await;
    // An ended job, or a callback given up (its job's next one is due now), may have a
    // callback to send: the dispatcher is woken for what was committed, even if a later
    // step failed.
    if report.expired + report.timed_out + report.unclaimed + report.callbacks_failed > 0 {
        callbacks::wake_dispatcher(app).await;
    }
    // Ended jobs free their slots: the farm takes the next ones in fair order.
    if report.expired + report.timed_out + report.unclaimed > 0 {
        outbox::release_to_farm(app).await;
    }
    ended?;
    let until = Instant::now() + app.config.http.request_deadline;
    report.nonces_pruned = in_batches(until, || jobs.prune_nonces(PRUNE_BATCH)).await?;
    report.idempotency_keys_pruned =
        in_batches(until, || app.idempotency.prune(PRUNE_BATCH)).await?;
    report.admission_fences_pruned = in_batches(until, || jobs.prune_fences(PRUNE_BATCH)).await?;
    report.fair_clients_pruned = in_batches(until, || jobs.prune_fair_clients(PRUNE_BATCH)).await?;
    report.skin_ingests_pruned = in_batches(until, || {
        app.skin_names
            .prune_ingests(ingest::CLAIMS_KEPT, PRUNE_BATCH.unsigned_abs())
    })
    .await?;
    report.watches_pruned = in_batches(until, || app.pushes.prune_watches(PRUNE_BATCH)).await?;
    let retention = app.config.lifecycle.job_retention;
    let outbox_events_deleted = &AtomicU64::new(0);
    report.jobs_deleted = in_batches(until, || async move {
        let deleted = jobs.delete_ended(retention, PRUNE_BATCH).await?;
        outbox_events_deleted.fetch_add(deleted.outbox_events, Ordering::Relaxed);
        Ok(deleted.jobs)
    })
    .await?;
    report.outbox_events_deleted = outbox_events_deleted.load(Ordering::Relaxed);
    if report != JanitorReport::default() {
        tracing::info!(?report, "janitor run");
    }
    Ok(report)
}

/// The steps that end what will not finish, each counted in `report` as it commits.
async fn end_what_will_not_finish(app: &App, report: &mut JanitorReport) -> Result<(), StoreError> {
    let (jobs, config) = (&app.housekeeping, &app.config);
    // Both leased queues give up after the same attempts.
    let attempts = config.lifecycle.max_delivery_attempts;
    report.expired = jobs.expire_queued(config.lifecycle.queued_ttl).await?;
    report.timed_out = jobs
        .fail_stalled(config.lifecycle.render_stall_timeout)
        .await?;
    // A released job waits at most for one render to end (RELEASE_AHEAD): twice the stall
    // timeout is past any honest wait.
    report.unclaimed = jobs
        .fail_unclaimed(config.lifecycle.render_stall_timeout.saturating_mul(2))
        .await?;
    report.outbox_failed = app.outbox.fail_exhausted(attempts).await?;
    report.callbacks_failed = app.callbacks.fail_exhausted(attempts).await?;
    Ok(())
}

/// Runs `batch` (a delete of at most `PRUNE_BATCH` rows) until one comes back short, for at
/// most `MAX_PRUNE_BATCHES`, and not past `until`. Returns the rows deleted.
async fn in_batches<F, Fut>(until: Instant, mut batch: F) -> Result<u64, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, StoreError>>,
{
    let mut deleted = 0;
    for _ in 0..MAX_PRUNE_BATCHES {
        let rows = batch().await?;
        deleted += rows;
        if rows < PRUNE_BATCH as u64 || Instant::now() >= until {
            break;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::JobStatus;
    use crate::support::config::Config;

    #[tokio::test]
    async fn a_run_prunes_the_watches_that_ended() {
        use crate::domain::events::Topic;
        use crate::domain::JobId;

        let (app, _memory) = App::in_memory(Config::from_lookup(|_| None).unwrap());
        let ended = chrono::Utc::now() - chrono::Duration::seconds(1);
        for _ in 0..3 {
            app.pushes
                .watch(&Topic::Job(JobId::new()), ended)
                .await
                .unwrap();
        }
        let open = chrono::Utc::now() + chrono::Duration::hours(1);
        app.pushes
            .watch(&Topic::Job(JobId::new()), open)
            .await
            .unwrap();
        assert_eq!(run(&app).await.unwrap().watches_pruned, 3);
        assert_eq!(
            run(&app).await.unwrap().watches_pruned,
            0,
            "the open one stays"
        );
    }

    #[tokio::test]
    async fn a_run_ends_what_will_not_finish_once() {
        let config = Config::from_lookup(|name| {
            matches!(name, "QUEUED_TTL" | "RENDER_STALL_TIMEOUT").then(|| "0".to_owned())
        })
        .unwrap();
        let (app, memory) = App::in_memory(config);
        memory.database.occupy(JobStatus::Queued, 2);
        memory.database.occupy(JobStatus::Rendering, 1);
        // Zero timeouts: a job is overdue as soon as any time has passed.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let report = run(&app).await.unwrap();
        assert_eq!((report.expired, report.timed_out), (2, 1));
        assert_eq!(
            memory.wake.asked(),
            [Duration::ZERO],
            "the jobs it ended may have callbacks to send: the dispatcher is woken"
        );
        assert_eq!(
            run(&app).await.unwrap(),
            JanitorReport::default(),
            "idempotent"
        );
        assert_eq!(memory.wake.asked().len(), 1, "nothing ended, nothing woken");
    }

    #[tokio::test]
    async fn a_run_deletes_jobs_ended_past_the_retention_in_batches() {
        let (app, memory) = App::in_memory(Config::from_lookup(|_| None).unwrap());
        let month = std::time::Duration::from_secs(31 * 86_400);
        let old = 2 * PRUNE_BATCH as usize + 5;
        memory.database.occupy(JobStatus::Completed, old);
        memory.database.occupy(JobStatus::Expired, 1);
        // Active for a month: the stall timeout fails it now, so it ended just now.
        memory.database.occupy(JobStatus::Rendering, 1);
        memory.database.age_jobs(month);
        memory.database.occupy(JobStatus::Failed, 2);
        memory.calls.take();

        let report = run(&app).await.unwrap();
        assert_eq!((report.jobs_deleted, report.timed_out), (old as u64 + 1, 1));
        let batches = memory.calls.take();
        let batches = batches.iter().filter(|c| **c == "jobs.delete_ended");
        assert_eq!(
            batches.count(),
            3,
            "full batches are repeated, a short one ends"
        );
        assert_eq!(memory.database.job_ids().len(), 3, "the recent ones stay");
        assert_eq!(run(&app).await.unwrap().jobs_deleted, 0);
    }
}
