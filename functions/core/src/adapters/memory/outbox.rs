//! The outbox port on the memory database.

use super::*;

#[async_trait]
impl LeasedQueue for MemoryDatabase {
    type Item = OutboxEvent;
    type Claim = LeaseClaim;

    async fn claim(&self, claim: LeaseClaim) -> Result<Vec<OutboxEvent>, StoreError> {
        let now = Utc::now();
        let mut tables = self.statement("outbox.claim");
        let mut claimed = Vec::new();
        for row in tables.events.iter_mut() {
            if claimed.len() as i64 >= claim.limit {
                break;
            }
            let due = row.status == EventStatus::Pending && row.available_at <= now;
            if due && row.event.attempts < claim.max_attempts {
                row.event.attempts += 1;
                row.available_at = now + claim.lease;
                claimed.push(row.event.clone());
            }
        }
        Ok(claimed)
    }

    async fn mark_dispatched(&self, ids: &[i64]) -> Result<(), StoreError> {
        for row in self.statement("outbox.mark_dispatched").events.iter_mut() {
            if ids.contains(&row.event.id) && row.status == EventStatus::Pending {
                row.status = EventStatus::Dispatched;
            }
        }
        Ok(())
    }

    async fn mark_retry(&self, retries: &[Retry], max_attempts: i32) -> Result<u64, StoreError> {
        let mut failed = 0;
        for row in self.statement("outbox.mark_retry").events.iter_mut() {
            let retry = retries.iter().find(|r| r.id == row.event.id);
            let Some(retry) = retry.filter(|_| row.status == EventStatus::Pending) else {
                continue;
            };
            row.available_at = Utc::now() + retry.delay;
            if row.event.attempts >= max_attempts {
                row.status = EventStatus::Failed;
                failed += 1;
            }
        }
        Ok(failed)
    }

    async fn fail_exhausted(&self, max_attempts: i32) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut failed = 0;
        for row in self.statement("outbox.fail_exhausted").events.iter_mut() {
            let spent = row.event.attempts >= max_attempts && row.available_at <= now;
            if row.status == EventStatus::Pending && spent {
                row.status = EventStatus::Failed;
                failed += 1;
            }
        }
        Ok(failed)
    }

    async fn next_due(&self, max_attempts: i32) -> Result<Option<Duration>, StoreError> {
        let tables = self.statement("outbox.next_due");
        let waiting = tables
            .events
            .iter()
            .filter(|row| row.status == EventStatus::Pending && row.event.attempts < max_attempts)
            // A render event held for release is due when released.
            .filter(|row| row.available_at < DateTime::<Utc>::MAX_UTC);
        Ok(next_due(waiting.map(|row| row.available_at)))
    }
}
