//! The connection store in memory: what DynamoDB keeps (adapters/dynamo_events.rs), in maps.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::events::{ConnectionId, Topic};
use crate::ports::events::{ConnectionStore, Subscribed};
use crate::ports::StoreError;

#[derive(Default)]
pub struct MemoryConnections {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each open connection's end and the topics it follows.
    connections: BTreeMap<ConnectionId, (DateTime<Utc>, BTreeSet<String>)>,
    /// Each topic's subscribers, with the subscription's end.
    topics: BTreeMap<String, BTreeMap<ConnectionId, DateTime<Utc>>>,
}

impl MemoryConnections {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl ConnectionStore for MemoryConnections {
    async fn open(&self, id: &ConnectionId, until: DateTime<Utc>) -> Result<(), StoreError> {
        let mut state = self.state();
        state.connections.entry(id.clone()).or_default().0 = until;
        Ok(())
    }

    async fn close(&self, id: &ConnectionId) -> Result<(), StoreError> {
        let mut state = self.state();
        if let Some((_, topics)) = state.connections.remove(id) {
            for topic in topics {
                if let Some(subscribers) = state.topics.get_mut(&topic) {
                    subscribers.remove(id);
                }
            }
        }
        Ok(())
    }

    async fn subscribe(
        &self,
        id: &ConnectionId,
        topic: &Topic,
        max: usize,
        until: DateTime<Utc>,
    ) -> Result<Subscribed, StoreError> {
        let name = topic.name();
        let mut state = self.state();
        let held = state.connections.entry(id.clone()).or_default();
        if held.1.contains(&name) {
            return Ok(Subscribed::Already);
        }
        if held.1.len() >= max {
            return Ok(Subscribed::Full);
        }
        held.1.insert(name.clone());
        state
            .topics
            .entry(name)
            .or_default()
            .insert(id.clone(), until);
        Ok(Subscribed::Added)
    }

    async fn unsubscribe(&self, id: &ConnectionId, topic: &Topic) -> Result<bool, StoreError> {
        let name = topic.name();
        let mut state = self.state();
        let held = state
            .connections
            .get_mut(id)
            .is_some_and(|(_, topics)| topics.remove(&name));
        if let Some(subscribers) = state.topics.get_mut(&name) {
            subscribers.remove(id);
        }
        Ok(held)
    }

    async fn subscribers(
        &self,
        topic: &Topic,
        limit: usize,
    ) -> Result<Vec<ConnectionId>, StoreError> {
        let now = Utc::now();
        let state = self.state();
        Ok(state
            .topics
            .get(&topic.name())
            .map(|subscribers| {
                subscribers
                    .iter()
                    .filter(|(_, until)| **until > now)
                    .map(|(id, _)| id.clone())
                    .take(limit)
                    .collect()
            })
            .unwrap_or_default())
    }
}
