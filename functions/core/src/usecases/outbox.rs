//! Releasing queued jobs to the farm, and delivering their events to the render queue at least
//! once (DESIGN.md invariant 4, "Fair service").
//!
//! A job's event is held in the queue of record until the farm has room for it: `release`
//! hands the farm the next jobs in fair order and leases their events to the releaser, which
//! publishes them at once and marks them dispatched (`publish_released`). It runs wherever room
//! may have appeared: after an admission (pipelined with it), after a worker's report that ends
//! a job, after a janitor run that ended some, and first in every sweep (the fallback).
//!
//! Each event has a lease: while `available_at` lies ahead, one publisher owns it. The scheduled `sweep` claims due events with
//! `FOR UPDATE SKIP LOCKED`, pushing `available_at` one lease ahead and counting the attempt in
//! the same committed statement, then sends and marks. So two sweepers never claim one event,
//! and an event whose publisher failed or died becomes due again when its lease or backoff
//! ends: there is nothing stuck to re-arm. Normally each event is sent exactly once; it is sent
//! twice only when a publisher dies (or its marking fails) after SQS took the message, which is
//! why consumers dedupe by event id.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::ports::jobs::FarmRoom;
use crate::ports::leased::{LeaseClaim, Retry};
use crate::ports::outbox::OutboxEvent;
use crate::ports::StoreError;
use crate::support::metrics;
use crate::usecases::app::App;
/// Events one claim takes: ten `SendMessageBatch` calls, sent concurrently.
const CLAIM_BATCH: i64 = 100;
/// Claims per sweep, so one sweep's work is bounded however far behind it is.
const MAX_CLAIMS_PER_SWEEP: usize = 10;
/// First retry delay; doubled per attempt up to `MAX_BACKOFF`.
const BASE_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// Delay before the next publish after `attempts` failed ones: 5 s, 10 s, 20 s, … capped at
/// 10 minutes, so a queue outage of about half an hour is ridden out with the default ten
/// attempts without hammering SQS.
pub fn backoff(attempts: i32) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 16) as u32;
    BASE_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub claimed: u64,
    pub dispatched: u64,
    pub retried: u64,
    pub failed: u64,
    /// It stopped at its bound (the events': its claims all full; the callbacks': its time
    /// budget) with due items maybe left.
    pub unfinished: bool,
}

impl std::ops::AddAssign for SweepReport {
    fn add_assign(&mut self, round: Self) {
        self.claimed += round.claimed;
        self.dispatched += round.dispatched;
        self.retried += round.retried;
        self.failed += round.failed;
        self.unfinished |= round.unfinished;
    }
}

/// The `outbox-dispatcher`'s work: releases what the farm has room for, then publishes due
/// events until none are left (at most `MAX_CLAIMS_PER_SWEEP` claims).
pub async fn sweep(app: &App) -> Result<SweepReport, StoreError> {
    let mut report = SweepReport::default();
    release_to_farm(app).await;
    let lease = app.config.event_lease();
    for _ in 0..MAX_CLAIMS_PER_SWEEP {
        let events = app
            .outbox
            .claim(LeaseClaim {
                limit: CLAIM_BATCH,
                lease,
                max_attempts: app.config.lifecycle.max_delivery_attempts,
            })
            .await?;
        report += deliver(app, &events).await?;
        report.unfinished = events.len() as i64 == CLAIM_BATCH;
        if !report.unfinished {
            break;
        }
    }
    Ok(report)
}

/// Publishes claimed events and records the outcome of each.
async fn deliver(app: &App, events: &[OutboxEvent]) -> Result<SweepReport, StoreError> {
    if events.is_empty() {
        return Ok(SweepReport::default());
    }
    let published = app.queue.publish(events).await;
    if !published.sent.is_empty() {
        app.outbox.mark_dispatched(&published.sent).await?;
    }
    let retries = retries(events, &published);
    for retry in &retries {
        tracing::warn!(event_id = retry.id, error = %retry.error, "outbox publish failed");
    }
    let failed = if retries.is_empty() {
        0
    } else {
        app.outbox
            .mark_retry(&retries, app.config.lifecycle.max_delivery_attempts)
            .await?
    };
    Ok(SweepReport {
        claimed: events.len() as u64,
        dispatched: published.sent.len() as u64,
        retried: retries.len() as u64 - failed,
        failed,
        unfinished: false,
    })
}

/// Every event SQS did not acknowledge, with its backoff.
fn retries(events: &[OutboxEvent], published: &crate::ports::queue::Published) -> Vec<Retry> {
    let reasons: HashMap<i64, &str> = published
        .failed
        .iter()
        .map(|(id, reason)| (*id, reason.as_str()))
        .collect();
    events
        .iter()
        .filter(|event| !published.sent.contains(&event.id))
        .map(|event| Retry {
            id: event.id,
            delay: backoff(event.attempts),
            error: reasons
                .get(&event.id)
                .copied()
                .unwrap_or("not acknowledged by SQS")
                .to_owned(),
        })
        .collect()
}

/// The farm's room as configured (`RENDER_SLOTS`, `RELEASE_AHEAD`).
pub fn farm_room(app: &App) -> FarmRoom {
    FarmRoom {
        render_slots: app.config.capacity.render_slots,
        release_ahead: app.config.capacity.release_ahead,
    }
}

/// Releases what the farm has room for and publishes it. Best effort: what fails here is
/// released by the next report, janitor run or sweep; a released event is published by the
/// sweep once its lease ends. Returns how many jobs were released.
pub async fn release_to_farm(app: &App) -> usize {
    let started = std::time::Instant::now();
    match app.release.release(farm_room(app)).await {
        Ok(events) => {
            if !events.is_empty() {
                metrics::released(events.len(), started.elapsed());
            }
            publish_released(app, &events).await;
            events.len()
        }
        Err(error) => {
            tracing::warn!(%error, "release to the farm failed; the next release or sweep retries");
            0
        }
    }
}

/// The fast path of released jobs: publish their events and mark them dispatched. A failure
/// is only logged: each event's lease runs out and the sweep delivers it.
pub async fn publish_released(app: &App, events: &[OutboxEvent]) {
    if events.is_empty() {
        return;
    }
    let published = app.queue.publish(events).await;
    for (event_id, error) in &published.failed {
        tracing::warn!(event_id, %error, "fast-path publish failed; the sweep will deliver");
    }
    if published.sent.is_empty() {
        return;
    }
    if let Err(error) = app.outbox.mark_dispatched(&published.sent).await {
        tracing::warn!(%error, "published but not marked; the sweep may send them again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::JobId;
    use crate::ports::outbox::RENDER_JOB_CREATED;
    use crate::ports::queue::Published;
    use crate::support::config::Config;
    use crate::support::config::MIN_LEASE;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs = |attempts| backoff(attempts).as_secs();
        assert_eq!(
            (1..=9).map(secs).collect::<Vec<_>>(),
            [5, 10, 20, 40, 80, 160, 320, 600, 600]
        );
        assert_eq!(secs(0), 5);
        assert_eq!(secs(-3), 5);
        assert_eq!(secs(i32::MAX), 600);
    }

    #[test]
    fn lease_outlasts_the_slowest_publish() {
        let config = |aws_ms: &str| {
            Config::from_lookup(|name| (name == "AWS_TIMEOUT_MS").then(|| aws_ms.to_owned()))
                .unwrap()
        };
        assert_eq!(config("5000").event_lease(), MIN_LEASE);
        assert_eq!(config("20000").event_lease(), Duration::from_secs(60));
    }

    fn event(id: i64, attempts: i32) -> OutboxEvent {
        OutboxEvent {
            id,
            job_id: JobId::new(),
            event_type: RENDER_JOB_CREATED.into(),
            payload: serde_json::json!({ "skin": "Default" }),
            attempts,
            group: None,
        }
    }

    #[test]
    fn everything_not_acknowledged_is_retried_with_its_backoff() {
        let events = [event(1, 1), event(2, 3), event(3, 1)];
        let published = Published {
            sent: vec![1],
            failed: vec![(2, "throttled".into())],
        };
        assert_eq!(
            retries(&events, &published),
            [
                Retry {
                    id: 2,
                    delay: Duration::from_secs(20),
                    error: "throttled".into()
                },
                Retry {
                    id: 3,
                    delay: Duration::from_secs(5),
                    error: "not acknowledged by SQS".into()
                },
            ]
        );
    }

    #[test]
    fn the_message_carries_the_event_id() {
        let e = event(42, 1);
        let body: serde_json::Value = serde_json::from_str(&e.message_body()).unwrap();
        assert_eq!(body["event_id"], 42);
        assert_eq!(body["event_type"], RENDER_JOB_CREATED);
        assert_eq!(body["job_id"], e.job_id.to_string());
        assert_eq!(body["payload"]["skin"], "Default");
    }
}
