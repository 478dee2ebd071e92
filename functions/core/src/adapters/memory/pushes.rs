//! The push queue on the memory database: the watches and queued pushes, which `job_changed`
//! (mod.rs) fills as Postgres' triggers (`queue_job_push`) do.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{MemoryDatabase, MemoryPush};
use crate::domain::events::Topic;
use crate::domain::JobId;
use crate::ports::events::{DuePush, PushQueue};
use crate::ports::StoreError;

#[async_trait]
impl PushQueue for MemoryDatabase {
    async fn watch(&self, topic: &Topic, until: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tables = self.statement("pushes.watch");
        let watch = tables.watches.entry(topic.name()).or_insert(until);
        *watch = (*watch).max(until);
        Ok(())
    }

    async fn claim(&self, limit: i64, lease: Duration) -> Result<Vec<DuePush>, StoreError> {
        let mut tables = self.statement("pushes.claim");
        let now = Utc::now();
        let leased_until = now + chrono::Duration::from_std(lease).unwrap_or_default();
        let mut due: Vec<(DateTime<Utc>, JobId)> = tables
            .pushes
            .iter()
            .filter(|(_, push)| push.due_at <= now && push.leased_until.is_none_or(|at| at <= now))
            .map(|(id, push)| (push.due_at, *id))
            .collect();
        due.sort_by_key(|(at, id)| (*at, id.as_uuid()));
        due.truncate(usize::try_from(limit).unwrap_or(0));
        Ok(due
            .into_iter()
            .filter_map(|(_, id)| {
                let push = tables.pushes.get_mut(&id)?;
                push.attempts += 1;
                push.leased_until = Some(leased_until);
                push.due_at = leased_until;
                Some(DuePush {
                    job: id,
                    client: push.client.clone(),
                    attempts: push.attempts,
                })
            })
            .collect())
    }

    async fn pushed(&self, job: JobId, sequence: i64) -> Result<(), StoreError> {
        let mut tables = self.statement("pushes.pushed");
        if tables
            .pushes
            .get(&job)
            .is_some_and(|push| push.sequence <= sequence)
        {
            tables.pushes.remove(&job);
        }
        Ok(())
    }

    async fn push_at(&self, job: JobId, at: DateTime<Utc>) -> Result<(), StoreError> {
        let mut tables = self.statement("pushes.push_at");
        let Some((client, sequence)) = tables
            .jobs
            .iter()
            .find(|j| j.id == job)
            .map(|j| (j.client.clone(), j.event_seq))
        else {
            return Ok(());
        };
        let push = tables.pushes.entry(job).or_insert(MemoryPush {
            client,
            sequence,
            due_at: at,
            attempts: 0,
            leased_until: None,
        });
        // A claimed push is being sent: its claimer says when the next is due.
        if push.leased_until.is_some_and(|until| until > Utc::now()) || at < push.due_at {
            push.due_at = at;
            push.leased_until = None;
        }
        Ok(())
    }

    async fn next_due(&self) -> Result<Option<Duration>, StoreError> {
        let tables = self.statement("pushes.next_due");
        let now = Utc::now();
        Ok(tables
            .pushes
            .values()
            .map(|push| push.due_at)
            .min()
            .map(|at| (at - now).to_std().unwrap_or_default()))
    }

    async fn prune_watches(&self, limit: i64) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut tables = self.statement("pushes.prune_watches");
        Ok(super::prune_oldest(&mut tables.watches, limit, |until| {
            (*until <= now).then_some(*until)
        }))
    }
}
