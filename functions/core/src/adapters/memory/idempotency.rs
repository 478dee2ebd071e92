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

pub(super) fn key_of(claim: &Claim) -> (String, &'static str, String) {
    (
        claim.client.as_str().to_owned(),
        claim.endpoint,
        claim.key.as_str().to_owned(),
    )
}

/// A key answers for `KEY_TTL` after its claim, as `expires_at` says in Postgres.
pub(super) fn expired(row: &KeyRow, now: DateTime<Utc>) -> bool {
    row.claimed_at + KEY_TTL <= now
}

/// Whether a claim may take `row` over: expired, or in progress past the claim's staleness.
pub(super) fn free(row: &KeyRow, claim: &Claim) -> bool {
    let now = Utc::now();
    expired(row, now) || (row.response.is_none() && row.claimed_at < now - claim.stale_after)
}

pub(super) fn try_claim(tables: &mut Tables, claim: &Claim, request_hash: &RequestHash) -> bool {
    let key = key_of(claim);
    let free = tables.keys.get(&key).is_none_or(|row| free(row, claim));
    if free {
        tables.keys.insert(
            key,
            KeyRow {
                request_hash: *request_hash,
                token: claim.token,
                response: None,
                claimed_at: Utc::now(),
            },
        );
    }
    free
}
