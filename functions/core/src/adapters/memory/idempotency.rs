//! The idempotency port on the memory database: keys claimed, completed and replayed.

use super::*;

#[async_trait]
impl IdempotencyStore for MemoryDatabase {
    async fn claim(
        &self,
        claim: &Claim,
        request_hash: &RequestHash,
    ) -> Result<Result<(), Option<Held>>, StoreError> {
        let mut tables = self.statement("idempotency.claim");
        if try_claim(&mut tables, claim, request_hash) {
            return Ok(Ok(()));
        }
        Ok(Err(held(&tables, claim)))
    }

    async fn held(&self, claim: &Claim) -> Result<Option<Held>, StoreError> {
        Ok(held(&self.statement("idempotency.held"), claim))
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<(), StoreError> {
        if let Some(row) = self
            .statement("idempotency.complete")
            .keys
            .get_mut(&key_of(claim))
        {
            if row.token == claim.token {
                row.response = Some(response.clone());
            }
        }
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        let mut tables = self.statement("idempotency.release");
        let key = key_of(claim);
        let ours = tables
            .keys
            .get(&key)
            .is_some_and(|row| row.token == claim.token && row.response.is_none());
        if ours {
            tables.keys.remove(&key);
        }
        Ok(())
    }

    async fn prune(&self, batch: i64) -> Result<u64, StoreError> {
        let now = Utc::now();
        Ok(prune_oldest(
            &mut self.statement("idempotency.prune").keys,
            batch,
            |row| expired(row, now).then_some(row.claimed_at),
        ))
    }
}

/// The key's holder: not expired, nor a stale claim in progress (which `try_claim` takes over).
pub(super) fn held(tables: &Tables, claim: &Claim) -> Option<Held> {
    tables
        .keys
        .get(&key_of(claim))
        .filter(|row| !free(row, claim))
        .map(|row| match &row.response {
            Some(response) => Held::Completed {
                request_hash: row.request_hash,
                response: response.clone(),
            },
            None => Held::InProgress {
                request_hash: row.request_hash,
            },
        })
}
