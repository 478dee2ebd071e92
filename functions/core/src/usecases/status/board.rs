//! `GET /v1/status`'s counts as an instance keeps them: read at most once per
//! `STATUS_INTERVAL`, one read at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::ports::jobs::{Capacity, JobAdmission};
use crate::ports::StoreError;
use crate::support::estimate::Recent;

/// How old an answer may be; also its `Cache-Control: max-age`.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// One read of the counts, and when it was made.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub capacity: Capacity,
    pub recent: Recent,
    pub at: DateTime<Utc>,
}

/// The instance's last reading, and its last failed read; an async lock, so requests that find
/// the reading stale wait for one read, not one each.
#[derive(Default)]
pub struct StatusBoard {
    last: Mutex<Board>,
}

#[derive(Default)]
struct Board {
    reading: Option<(Instant, Reading)>,
    failed_at: Option<Instant>,
}

/// After a failed read, requests are answered without reading for this long: an outage costs
/// the database one read per second per instance, not one per request.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

impl StatusBoard {
    /// The last reading while it is fresh; else a new one. While reads fail, the last reading
    /// (its `at` says how old), or the failure, without reading again within
    /// `RETRY_AFTER_FAILURE`.
    pub async fn reading(&self, jobs: &dyn JobAdmission) -> Result<Reading, StoreError> {
        let mut board = self.last.lock().await;
        let fresh = |at: &Instant, interval| at.elapsed() < interval;
        if let Some((read_at, reading)) = &board.reading {
            if fresh(read_at, STATUS_INTERVAL) {
                return Ok(*reading);
            }
        }
        if board
            .failed_at
            .is_some_and(|at| fresh(&at, RETRY_AFTER_FAILURE))
        {
            return board
                .reading
                .map(|(_, reading)| reading)
                .ok_or_else(|| StoreError::new("the last read of the counts failed"));
        }
        let read_at = Instant::now();
        match jobs.overview().await {
            Ok((capacity, recent)) => {
                let reading = Reading {
                    capacity,
                    recent,
                    at: Utc::now(),
                };
                *board = Board {
                    reading: Some((read_at, reading)),
                    failed_at: None,
                };
                Ok(reading)
            }
            Err(error) => {
                board.failed_at = Some(read_at);
                match board.reading {
                    Some((_, reading)) => {
                        tracing::error!(%error, "status read failed; answering the last reading");
                        Ok(reading)
                    }
                    None => Err(error),
                }
            }
        }
    }
}
