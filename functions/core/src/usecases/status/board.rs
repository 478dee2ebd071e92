//! `GET /v1/status`'s counts as an instance keeps them: read at most once per
//! `STATUS_INTERVAL`, one read at a time.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::ports::jobs::{JobAdmission, Overview};
use crate::ports::StoreError;
use crate::support::refreshed::{Refresh, Refreshed, WhileLoading, RETRY_AFTER_FAILURE};

/// How old an answer may be; also its `Cache-Control: max-age`.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// One read of the counts and the farm, and when it was made.
#[derive(Debug, Clone)]
pub struct Reading {
    pub overview: Overview,
    pub at: DateTime<Utc>,
}

/// The instance's last reading: requests that find it stale wait for one read, not one each.
pub struct StatusBoard(Refreshed<Reading>);

impl Default for StatusBoard {
    fn default() -> Self {
        Self(Refreshed::new(Refresh {
            ttl: STATUS_INTERVAL,
            retry_after_failure: RETRY_AFTER_FAILURE,
            while_loading: WhileLoading::Wait,
        }))
    }
}

impl StatusBoard {
    /// The last reading while it is fresh; else a new one. While reads fail, the last reading
    /// (its `at` says how old); `None` while none has succeeded.
    pub async fn reading(&self, jobs: &dyn JobAdmission) -> Option<Reading> {
        self.0
            .get(|| async {
                let overview = jobs.overview().await.inspect_err(|error| {
                    tracing::error!(%error, "status read failed");
                })?;
                Ok::<_, StoreError>(Reading {
                    overview,
                    at: Utc::now(),
                })
            })
            .await
    }
}
