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
//! their attempts that way, which no sweep will claim again: they are marked failed.

use serde::Serialize;

use crate::app::App;
use crate::ports::StoreError;
use crate::skins::ingest;

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct JanitorReport {
    /// Queued longer than `QUEUED_TTL`: now `expired`.
    pub expired: u64,
    /// Downloading/rendering with no report for `RENDER_STALL_TIMEOUT`: now `failed`.
    pub timed_out: u64,
    /// Outbox events out of attempts after their last lease ran out: now `failed`.
    pub outbox_failed: u64,
    /// Webhook nonces past the time their reports could be accepted: deleted.
    pub nonces_pruned: u64,
    /// Idempotency keys past their day: deleted.
    pub idempotency_keys_pruned: u64,
    /// Fences of resolved admissions past their day: deleted.
    pub admission_fences_pruned: u64,
    /// Presigned uploads' ingest claims past their day (skins/ingest.rs): deleted.
    pub skin_ingests_pruned: u64,
}

pub async fn run(app: &App) -> Result<JanitorReport, StoreError> {
    let report = JanitorReport {
        expired: app.jobs.expire_queued(app.config.queued_ttl).await?,
        timed_out: app
            .jobs
            .fail_stalled(app.config.render_stall_timeout)
            .await?,
        outbox_failed: app
            .outbox
            .fail_exhausted(app.config.outbox_max_attempts)
            .await?,
        nonces_pruned: app.jobs.prune_nonces().await?,
        idempotency_keys_pruned: app.idempotency.prune().await?,
        admission_fences_pruned: app.jobs.prune_fences().await?,
        skin_ingests_pruned: app
            .skin_names
            .prune_ingests(ingest::CLAIMS_KEPT, ingest::PRUNE_BATCH)
            .await?,
    };
    if report != JanitorReport::default() {
        tracing::info!(?report, "janitor run");
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::domain::JobStatus;
    use crate::store::memory::Memory;

    #[tokio::test]
    async fn a_run_ends_what_will_not_finish_once() {
        let config = Config::from_lookup(|name| {
            matches!(name, "QUEUED_TTL" | "RENDER_STALL_TIMEOUT").then(|| "0".to_owned())
        })
        .unwrap();
        let (app, memory) = Memory::app(config);
        memory.database.occupy(JobStatus::Queued, 2);
        memory.database.occupy(JobStatus::Rendering, 1);
        // Zero timeouts: a job is overdue as soon as any time has passed.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let report = run(&app).await.unwrap();
        assert_eq!((report.expired, report.timed_out), (2, 1));
        assert_eq!(
            run(&app).await.unwrap(),
            JanitorReport::default(),
            "idempotent"
        );
    }
}
