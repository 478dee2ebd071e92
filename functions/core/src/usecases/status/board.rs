//! `GET /v1/status`'s counts as an instance keeps them: read at most once per
//! `STATUS_INTERVAL`, one read at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::ports::jobs::{JobAdmission, Overview};
use crate::ports::StoreError;

/// How old an answer may be; also its `Cache-Control: max-age`.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// One read of the counts and the farm, and when it was made.
#[derive(Debug, Clone)]
pub struct Reading {
    pub overview: Overview,
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
                return Ok(reading.clone());
            }
        }
        if board
            .failed_at
            .is_some_and(|at| fresh(&at, RETRY_AFTER_FAILURE))
        {
            return board
                .reading
                .as_ref()
                .map(|(_, reading)| reading.clone())
                .ok_or_else(|| StoreError::new("the last read of the counts failed"));
        }
        let read_at = Instant::now();
        match jobs.overview().await {
            Ok(overview) => {
                let reading = Reading {
                    overview,
                    at: Utc::now(),
                };
                *board = Board {
                    reading: Some((read_at, reading.clone())),
                    failed_at: None,
                };
                Ok(reading)
            }
            Err(error) => {
                board.failed_at = Some(read_at);
                match &board.reading {
                    Some((_, reading)) => {
                        tracing::error!(%error, "status read failed; answering the last reading");
                        Ok(reading.clone())
                    }
                    None => Err(error),
                }
            }
        }
    }
}
