//! Live job events' ports: the open connections and what each follows (DynamoDB, never
//! Postgres: a crowd of watchers costs the database nothing), what sends a frame to one
//! connection (API Gateway's Management API, or the dev server's own sockets), and the jobs
//! whose watchers are owed their state (a Postgres queue the database fills when a watched job
//! changes; the dispatcher drains it).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;
use crate::domain::client::ClientKey;
use crate::domain::events::{ConnectionId, Topic};
use crate::domain::job::JobId;

/// How long a connection, its subscriptions and a watch are kept: API Gateway closes a
/// WebSocket after 2 hours whatever it does, and its `$disconnect` is best effort.
pub const CONNECTION_TTL: Duration = Duration::from_secs(2 * 3600);

/// What a subscribe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subscribed {
    Added,
    /// The connection already held it: nothing changed.
    Already,
    /// The connection holds its most: nothing changed.
    Full,
}

#[async_trait]
pub trait ConnectionStore: Send + Sync {
    /// Records a connection just opened, kept until `until`.
    async fn open(&self, id: &ConnectionId, until: DateTime<Utc>) -> Result<(), StoreError>;

    /// Forgets a connection and every subscription it held. Forgetting an unknown one is no
    /// error.
    async fn close(&self, id: &ConnectionId) -> Result<(), StoreError>;

    /// Subscribes the connection to `topic`, unless it holds `max` subscriptions already.
    async fn subscribe(
        &self,
        id: &ConnectionId,
        topic: &Topic,
        max: usize,
        until: DateTime<Utc>,
    ) -> Result<Subscribed, StoreError>;

    /// Ends the connection's subscription to `topic`; whether it held one.
    async fn unsubscribe(&self, id: &ConnectionId, topic: &Topic) -> Result<bool, StoreError>;

    /// The connections subscribed to `topic` (at most `limit`), unexpired.
    async fn subscribers(
        &self,
        topic: &Topic,
        limit: usize,
    ) -> Result<Vec<ConnectionId>, StoreError>;
}

/// A frame's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Delivered,
    /// The connection is closed (API Gateway's 410): forget it.
    Gone,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The sender may not post to this API (API Gateway's 403): a deployment's rights are
    /// wrong.
    #[error("not allowed to post to the connection")]
    Forbidden,
    /// Over the largest frame (API Gateway's 413, 128 KiB).
    #[error("the frame is over the largest one sent")]
    TooLarge,
    /// No answer, a throttle, a server error: the frame may not have been sent.
    #[error("push failed: {0}")]
    Unavailable(String),
}

/// The largest frame API Gateway sends (128 KiB); both adapters refuse a larger one.
pub const MAX_FRAME_BYTES: usize = 128 * 1024;

#[async_trait]
pub trait Pusher: Send + Sync {
    /// Sends one text frame to the connection.
    async fn push(&self, id: &ConnectionId, frame: &str) -> Result<Pushed, PushError>;
}

/// A job whose watchers are owed its state, as claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePush {
    pub job: JobId,
    /// Its client: a key's client's subscribers are sent it too. Never shown.
    pub client: ClientKey,
    /// The claims it had, this one included.
    pub attempts: i32,
}

#[async_trait]
pub trait PushQueue: Send + Sync {
    /// Marks `topic` watched until `until`: from now on each change of its jobs (status or
    /// progress; for a key, its jobs admitted later too) queues a push.
    async fn watch(&self, topic: &Topic, until: DateTime<Utc>) -> Result<(), StoreError>;

    /// Claims at most `limit` due pushes, each leased for `lease`: a claimed push is not due
    /// again before, unless its job changes again.
    async fn claim(&self, limit: i64, lease: Duration) -> Result<Vec<DuePush>, StoreError>;

    /// The push of `job`'s state as of `sequence` went out (or was given up): it is removed,
    /// unless a change after `sequence` queued it again.
    async fn pushed(&self, job: JobId, sequence: i64) -> Result<(), StoreError>;

    /// Queues a push of `job` at `at` (a sandbox job's next step, which no change marks), or
    /// brings a queued one forward to it.
    async fn push_at(&self, job: JobId, at: DateTime<Utc>) -> Result<(), StoreError>;

    /// How long until the next push falls due, if one is queued (zero if one is due now).
    async fn next_due(&self) -> Result<Option<Duration>, StoreError>;

    /// Removes at most `limit` watches that ended: how many.
    async fn prune_watches(&self, limit: i64) -> Result<u64, StoreError>;
}
