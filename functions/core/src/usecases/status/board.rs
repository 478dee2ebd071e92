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

/// The instance's last reading; an async lock, so requests that find it stale wait for one
/// read, not one each.
#[derive(Default)]
pub struct StatusBoard {
    last: Mutex<Option<(Instant, Reading)>>,
}

impl StatusBoard {
    pub async fn reading(&self, jobs: &dyn JobAdmission) -> Result<Reading, StoreError> {
        let mut last = self.last.lock().await;
        if let Some((read_at, reading)) = last.as_ref() {
            if read_at.elapsed() < STATUS_INTERVAL {
                return Ok(*reading);
            }
        }
        let read_at = Instant::now();
        let (capacity, recent) = jobs.overview().await?;
        let reading = Reading {
            capacity,
            recent,
            at: Utc::now(),
        };
        *last = Some((read_at, reading));
        Ok(reading)
    }
}
