//! The connection store in memory (STUB: being written).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::events::{ConnectionId, Topic};
use crate::ports::events::{ConnectionStore, Subscribed};
use crate::ports::StoreError;

#[derive(Default)]
pub struct MemoryConnections {}

#[async_trait]
impl ConnectionStore for MemoryConnections {
    async fn open(&self, _id: &ConnectionId, _until: DateTime<Utc>) -> Result<(), StoreError> {
        unimplemented!()
    }
    async fn close(&self, _id: &ConnectionId) -> Result<(), StoreError> {
        unimplemented!()
    }
    async fn subscribe(
        &self,
        _id: &ConnectionId,
        _topic: &Topic,
        _max: usize,
        _until: DateTime<Utc>,
    ) -> Result<Subscribed, StoreError> {
        unimplemented!()
    }
    async fn unsubscribe(&self, _id: &ConnectionId, _topic: &Topic) -> Result<bool, StoreError> {
        unimplemented!()
    }
    async fn subscribers(
        &self,
        _topic: &Topic,
        _limit: usize,
    ) -> Result<Vec<ConnectionId>, StoreError> {
        unimplemented!()
    }
}
