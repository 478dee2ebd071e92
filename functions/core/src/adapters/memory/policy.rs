//! The operator's policy.

use super::*;
use crate::domain::policy::{Ban, Pause, Policy, Reason};
use crate::ports::policy::{NewBan, PolicyStore, MAX_BANS};
use std::sync::atomic::AtomicBool;

/// The `intake_pause` and `bans` tables, as `PgPolicyStore` keeps them. Counts its reads
/// (what the instance's cache saves) and can be told to fail.
#[derive(Default)]
pub struct MemoryPolicy {
    tables: Mutex<(Option<Pause>, Vec<Ban>)>,
    next_id: std::sync::atomic::AtomicI64,
    reads: std::sync::atomic::AtomicUsize,
    down: Outage,
    /// While set, reads wait (a database slow to answer); `released` wakes them.
    stalled: AtomicBool,
    released: tokio::sync::Notify,
}

impl MemoryPolicy {
    /// How many `read` calls reached the tables.
    pub fn reads(&self) -> usize {
        self.reads.load(Ordering::SeqCst)
    }

    /// Every call fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }

    /// Reads wait until told otherwise, then answer as the tables (or an outage) say.
    pub fn stall_reads(&self, stalled: bool) {
        self.stalled.store(stalled, Ordering::SeqCst);
        if !stalled {
            self.released.notify_waiters();
        }
    }
}

#[async_trait]
impl PolicyStore for MemoryPolicy {
    async fn read(&self, max_bans: usize) -> Result<Policy, StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        // A read takes a moment: concurrent callers overlap as they would on a database.
        tokio::task::yield_now().await;
        loop {
            // Registered before the check: a release between the two is not missed.
            let released = self.released.notified();
            if !self.stalled.load(Ordering::SeqCst) {
                break;
            }
            released.await;
        }
        self.down.check("the policy tables are down")?;
        let (pause, bans) = &*lock(&self.tables);
        let now = Utc::now();
        let mut bans: Vec<Ban> = bans
            .iter()
            .filter(|ban| ban.until.is_none_or(|until| until > now))
            .cloned()
            .collect();
        // Until removed lasts longest.
        bans.sort_by_key(|ban| std::cmp::Reverse(ban.until.unwrap_or(DateTime::<Utc>::MAX_UTC)));
        bans.truncate(max_bans.min(MAX_BANS));
        Ok(Policy {
            pause: pause.clone(),
            bans,
        })
    }

    async fn pause(
        &self,
        anonymous_only: bool,
        reason: Option<&Reason>,
    ) -> Result<Pause, StoreError> {
        self.down.check("the policy tables are down")?;
        let pause = Pause {
            anonymous_only,
            reason: reason.cloned(),
            since: Utc::now(),
        };
        lock(&self.tables).0 = Some(pause.clone());
        Ok(pause)
    }

    async fn resume(&self) -> Result<Option<Pause>, StoreError> {
        self.down.check("the policy tables are down")?;
        Ok(lock(&self.tables).0.take())
    }

    async fn add_ban(&self, ban: &NewBan) -> Result<Ban, StoreError> {
        self.down.check("the policy tables are down")?;
        let ban = Ban {
            id: self.next_id.fetch_add(1, Ordering::SeqCst) + 1,
            target: ban.target.clone(),
            reason: ban.reason.clone(),
            until: ban.until,
            created_at: Utc::now(),
        };
        lock(&self.tables).1.push(ban.clone());
        Ok(ban)
    }

    async fn remove_ban(&self, id: i64) -> Result<Option<Ban>, StoreError> {
        self.down.check("the policy tables are down")?;
        let bans = &mut lock(&self.tables).1;
        Ok(bans
            .iter()
            .position(|ban| ban.id == id)
            .map(|at| bans.remove(at)))
    }
}
