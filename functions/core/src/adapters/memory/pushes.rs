//! The push queue in memory (STUB: being written).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::MemoryDatabase;
use crate::domain::events::Topic;
use crate::domain::JobId;
use crate::ports::events::{DuePush, PushQueue};
use crate::ports::StoreError;

#[async_trait]
impl PushQueue for MemoryDatabase {
    async fn watch(&self, _topic: &Topic, _until: DateTime<Utc>) -> Result<(), StoreError> {
        unimplemented!()
    }
    async fn claim(&self, _limit: i64, _lease: Duration) -> Result<Vec<DuePush>, StoreError> {
        unimplemented!()
    }
    async fn pushed(&self, _job: JobId, _sequence: i64) -> Result<(), StoreError> {
        unimplemented!()
    }
    async fn push_at(&self, _job: JobId, _at: DateTime<Utc>) -> Result<(), StoreError> {
        unimplemented!()
    }
    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        unimplemented!()
    }
    async fn prune_watches(&self, _limit: i64) -> Result<u64, StoreError> {
        unimplemented!()
    }
}
