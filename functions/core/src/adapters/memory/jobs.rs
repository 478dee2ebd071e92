//! The jobs port on the memory database: admission under one lock, as `admit_job`.

use super::*;
use crate::ports::jobs::TOTAL_CAP;

#[async_trait]
impl JobAdmission for MemoryDatabase {
    async fn occupancy(&self, look: &OccupancyLook<'_>) -> Result<OccupancyFound, StoreError> {
        let tables = self.statement("jobs.occupancy");
        let (caller, replay) = (look.caller, look.replay);
        let held = look.key.and_then(|key| idempotency::held(&tables, key));
        let occupancy = Occupancy {
            failed_recently: failed_recently(&tables, replay, look.failure_cooldown),
            ..occupancy_of(
                &tables,
                caller.client(),
                caller.network(),
                caller.wide_network(),
                replay,
                caller.is_sandbox(),
            )
        };
        Ok((occupancy, held))
    }

    async fn overview(&self) -> Result<Overview, StoreError> {
        self.calls.record("jobs.overview");
        if self.overview_fails.load(Ordering::SeqCst) {
            return Err(StoreError::new("connection refused"));
        }
        Ok(farm::overview(&lock(&self.tables)))
    }

    async fn load(&self, caller: &Caller) -> Result<Load, StoreError> {
        let tables = self.statement("jobs.load");
        let network = |j: &MemoryJob| {
            caller
                .network()
                .is_some_and(|n| j.network.as_ref() == Some(n))
        };
        let wide_network = |j: &MemoryJob| {
            caller
                .wide_network()
                .is_some_and(|n| j.wide_network.as_ref() == Some(n))
        };
        Ok(Load {
            farm: farm::state(&tables),
            client: farm::active_work(&tables, |j| j.client == *caller.client()),
            network: farm::active_work(&tables, network),
            wide_network: farm::active_work(&tables, wide_network),
        })
    }

    async fn next_wait(&self, caller: &Caller) -> Result<QueueWait, StoreError> {
        let tables = self.statement("jobs.next_wait");
        let fair_client = caller.network().unwrap_or(caller.client());
        let last = tables.fair_clients.get(fair_client.as_str()).copied();
        let start = last.map_or(tables.fair_clock, |last| last.max(tables.fair_clock));
        Ok(QueueWait {
            farm: farm::state(&tables),
            place: farm::place_at(&tables, start),
        })
    }

    async fn admit(&self, job: &NewJob, limits: &CapacityLimits) -> Result<Admission, StoreError> {
        let fault = lock(&self.admit_fault).take();
        let mut tables = self.statement("jobs.admit");
        match fault {
            None => Ok(match self.admit_now(&mut tables, job, limits) {
                // The release pipelined behind it (a sandbox job holds no room).
                Admission::Admitted(_) if job.sandbox.is_none() => {
                    Admission::Admitted(farm::release(&mut tables, limits.farm, self.event_lease))
                }
                other => other,
            }),
            Some(AdmitFault::Error) => Err(StoreError::new("55P03: lock timeout")),
            Some(AdmitFault::LateAnswer) => {
                self.admit_now(&mut tables, job, limits);
                Err(StoreError::unknown("no answer within 500 ms"))
            }
            Some(AdmitFault::ArrivesAfterResolve) => {
                tables.held_admission = Some((job.clone(), *limits));
                Err(StoreError::unknown("no answer within 500 ms"))
            }
        }
    }

    async fn resolve(&self, job: &NewJob) -> Result<Resolved, StoreError> {
        self.calls.record("jobs.resolve");
        if self.resolve_fails.load(Ordering::SeqCst) {
            return Err(StoreError::unknown("no answer within 500 ms"));
        }
        let mut tables = lock(&self.tables);
        let resolved = if tables.jobs.iter().any(|j| j.id == job.id) {
            Resolved::Admitted
        } else {
            tables.fences.insert(job.id, Utc::now());
            Resolved::Abandoned
        };
        // The held statement arrives now, after the resolution.
        if let Some((held, limits)) = tables.held_admission.take() {
            self.admit_now(&mut tables, &held, &limits);
        }
        Ok(resolved)
    }
}

#[async_trait]
impl JobReads for MemoryDatabase {
    async fn find(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        let tables = self.statement("jobs.find");
        Ok(tables
            .jobs
            .iter()
            .find(|j| j.id == id)
            .map(|j| record(j, &tables)))
    }

    async fn list(&self, client: &ClientKey, query: &JobQuery) -> Result<JobPage, StoreError> {
        let tables = self.statement("jobs.list");
        let position = |j: &MemoryJob| (j.created_at, j.id.as_uuid());
        let mut matching: Vec<&MemoryJob> = tables
            .jobs
            .iter()
            .filter(|j| &j.client == client)
            .filter(|j| query.status.is_none_or(|status| shown_status(j) == status))
            .filter(|j| {
                let of = |member: &str| {
                    j.replay
                        .as_ref()
                        .and_then(|replay| replay[member].as_str())
                        .map(str::to_owned)
                };
                let lower = |text: Option<String>| text.map(|t| t.to_lowercase());
                (query.player.is_none() || lower(of("player")) == lower(query.player.clone()))
                    && query
                        .beatmap_md5
                        .as_ref()
                        .is_none_or(|md5| of("beatmap_md5").as_deref() == Some(md5.as_str()))
            })
            .collect();
        let total = query
            .after
            .is_none()
            .then(|| (matching.len() as i64).min(TOTAL_CAP + 1));
        matching.retain(|j| {
            query
                .after
                .is_none_or(|after| position(j) < (after.created_at, after.id.as_uuid()))
        });
        matching.sort_by_key(|j| std::cmp::Reverse(position(j)));
        let rows = matching
            .iter()
            .take(usize::try_from(query.limit.saturating_add(1)).unwrap_or(0))
            .map(|j| record(j, &tables))
            .collect();
        Ok(JobPage::from_rows(rows, query.limit, total))
    }
}

#[async_trait]
impl JobTransitions for MemoryDatabase {
    async fn transition(&self, report: &JobReport<'_>) -> Result<TransitionOutcome, StoreError> {
        let (transition, nonce) = (report.transition, report.nonce);
        let mut tables = self.statement("jobs.transition");
        if tables.nonces.contains_key(&nonce.value) {
            return Ok(TransitionOutcome::NonceReused);
        }
        tables.nonces.insert(nonce.value.clone(), nonce.expires_at);
        let Some(job) = tables.jobs.iter_mut().find(|j| j.id == report.id) else {
            return Ok(TransitionOutcome::UnknownJob);
        };
        if !transition.to.predecessors().contains(&job.status) {
            return Ok(TransitionOutcome::Illegal {
                current: job.status,
            });
        }
        let progress = transition
            .progress
            .unwrap_or(if job.status == transition.to {
                job.progress
            } else {
                0.0
            });
        // As the `queue_job_callback` trigger (but for its bound on a key's undelivered callbacks):
        // a status change queues a callback, a progress update once 5 s have passed since the last.
        let now = Utc::now();
        let progress_due = progress != job.progress
            && job
                .callback_at
                .is_none_or(|at| at <= now - chrono::Duration::seconds(5));
        let calls_back = job.calls_back && (transition.to != job.status || progress_due);
        if calls_back {
            job.callback_at = Some(now);
        }
        if job.started_at.is_none()
            && matches!(transition.to, JobStatus::Downloading | JobStatus::Rendering)
        {
            job.started_at = Some(now);
        }
        let changed = job.status != transition.to || job.progress != progress;
        job.status = transition.to;
        job.progress = progress;
        job.video_key = transition.video_key.clone().or(job.video_key.take());
        job.thumb_key = transition.thumb_key.clone().or(job.thumb_key.take());
        job.error = transition.error.clone().or(job.error.take());
        job.error_code = transition.error_code.or(job.error_code);
        job.updated_at = Utc::now();
        job.deadline = transition.deadline_in.map(|within| job.updated_at + within);
        let (id, status) = (job.id, job.status);
        let pushes = changed && job_changed(&mut tables, id, true);
        Ok(TransitionOutcome::Applied {
            status,
            progress,
            calls_back,
            pushes,
        })
    }
}

#[async_trait]
impl JobHousekeeping for MemoryDatabase {
    async fn expire_queued(&self, ttl: Duration) -> Result<u64, StoreError> {
        let before = Utc::now() - ttl;
        let past_ttl = |job: &MemoryJob| job.status == JobStatus::Queued && job.created_at < before;
        let mut tables = self.statement("jobs.expire_queued");
        Ok(sweep(&mut tables, past_ttl, |job| {
            job.status = JobStatus::Expired;
            job.error = Some("no renderer took the job in time".into());
            job.error_code = Some(FailureCode::QueueExpired);
            job.updated_at = Utc::now();
        }))
    }

    async fn fail_stalled(&self, stall_timeout: Duration) -> Result<u64, StoreError> {
        let now = Utc::now();
        let stalled = |job: &MemoryJob| {
            let working = matches!(job.status, JobStatus::Downloading | JobStatus::Rendering);
            working && job.deadline.unwrap_or(job.updated_at + stall_timeout) < now
        };
        let mut tables = self.statement("jobs.fail_stalled");
        Ok(sweep(&mut tables, stalled, |job| {
            job.status = JobStatus::Failed;
            job.error = Some("timed out".into());
            job.error_code = Some(FailureCode::TimedOut);
            job.deadline = None;
            job.updated_at = now;
        }))
    }

    async fn fail_unclaimed(&self, older_than: Duration) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut tables = self.statement("jobs.fail_unclaimed");
        let started: Vec<DateTime<Utc>> = tables
            .jobs
            .iter()
            .filter(|j| j.started_at.is_some())
            .filter_map(|j| j.released_at)
            .collect();
        let passed_over = |job: &MemoryJob| {
            let released = job.released_at.is_some_and(|at| at < now - older_than);
            let started_after = job
                .released_at
                .is_some_and(|at| started.iter().any(|later| *later > at));
            job.status == JobStatus::Queued && released && started_after
        };
        Ok(sweep(&mut tables, passed_over, |job| {
            job.status = JobStatus::Failed;
            job.error = Some("no render worker took the job in time".into());
            job.error_code = Some(FailureCode::TimedOut);
            job.updated_at = now;
        }))
    }

    async fn delete_ended(&self, retention: Duration, batch: i64) -> Result<Deleted, StoreError> {
        let before = Utc::now() - retention;
        let tables = &mut *self.statement("jobs.delete_ended");
        let mut ended: Vec<&MemoryJob> = tables
            .jobs
            .iter()
            .filter(|j| !j.status.is_active() && j.updated_at < before)
            .collect();
        ended.sort_by_key(|j| j.updated_at);
        let doomed: HashSet<JobId> = ended.iter().take(batch_len(batch)).map(|j| j.id).collect();
        let (jobs, events) = (tables.jobs.len(), tables.events.len());
        tables.jobs.retain(|j| !doomed.contains(&j.id));
        tables.events.retain(|e| !doomed.contains(&e.event.job_id));
        tables.pushes.retain(|id, _| !doomed.contains(id));
        Ok(Deleted {
            jobs: (jobs - tables.jobs.len()) as u64,
            outbox_events: (events - tables.events.len()) as u64,
        })
    }

    async fn prune_nonces(&self, batch: i64) -> Result<u64, StoreError> {
        let now = Utc::now();
        Ok(prune_oldest(
            &mut self.statement("jobs.prune_nonces").nonces,
            batch,
            |expires_at| (*expires_at < now).then_some(*expires_at),
        ))
    }

    async fn prune_fair_clients(&self, batch: i64) -> Result<u64, StoreError> {
        let mut tables = self.statement("jobs.prune_fair_clients");
        let clock = tables.fair_clock;
        let mut passed: Vec<(f64, String)> = tables
            .fair_clients
            .iter()
            .filter(|(_, finish)| **finish <= clock)
            .map(|(client, finish)| (*finish, client.clone()))
            .collect();
        passed.sort_by(|a, b| a.0.total_cmp(&b.0));
        passed.truncate(batch_len(batch));
        for (_, client) in &passed {
            tables.fair_clients.remove(client);
        }
        Ok(passed.len() as u64)
    }

    async fn prune_fences(&self, batch: i64) -> Result<u64, StoreError> {
        let day_ago = Utc::now() - Duration::from_secs(24 * 3600);
        Ok(prune_oldest(
            &mut self.statement("jobs.prune_fences").fences,
            batch,
            |fenced_at| (*fenced_at < day_ago).then_some(*fenced_at),
        ))
    }
}

/// One janitor sweep of `jobs`: `end` applied to each job `due` picks (a change of its status,
/// counted and pushed as any). How many it ended.
fn sweep(
    tables: &mut Tables,
    due: impl Fn(&MemoryJob) -> bool,
    end: impl Fn(&mut MemoryJob),
) -> u64 {
    let mut ended = Vec::new();
    for job in tables.jobs.iter_mut().filter(|job| due(job)) {
        end(job);
        ended.push(job.id);
    }
    for id in &ended {
        job_changed(tables, *id, true);
    }
    ended.len() as u64
}

pub(super) fn record(job: &MemoryJob, tables: &Tables) -> JobRecord {
    let place = (job.status == JobStatus::Queued).then(|| farm::place_of(tables, job));
    // A sandbox job young enough to show queued: the place a new client's job would have now.
    let age = (Utc::now() - job.created_at).to_std().unwrap_or_default();
    let shows_queued = job.sandbox && age < sandbox::QUEUED_FOR;
    let place = place.or_else(|| shows_queued.then(|| farm::place_at(tables, tables.fair_clock)));
    let wait = place.map(|place| QueueWait {
        farm: farm::state(tables),
        place,
    });
    let record = JobRecord {
        id: job.id,
        status: job.status,
        progress: job.progress,
        queue_position: wait.as_ref().map(|wait| wait.place.position),
        created_at: job.created_at,
        updated_at: job.updated_at,
        error: job.error.clone(),
        error_code: job.error_code,
        config: job.config.clone(),
        video_key: job.video_key.clone(),
        thumb_key: job.thumb_key.clone(),
        replay: job.replay.clone(),
        wait,
        sandbox: job.sandbox,
        sequence: job.event_seq,
        client_reference: job.client_reference.clone(),
    };
    match job.sandbox {
        true => record.as_sandbox_shows(age),
        false => record,
    }
}

/// The status a job shows: a sandbox job's, as its age makes it.
pub(super) fn shown_status(job: &MemoryJob) -> JobStatus {
    if !job.sandbox {
        return job.status;
    }
    let age = (Utc::now() - job.created_at).to_std().unwrap_or_default();
    sandbox::state_at(age, job.status).0
}
