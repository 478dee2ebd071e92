//! The skin-name registry on the memory database.

use super::*;

#[async_trait]
impl SkinRegistry for MemoryDatabase {
    async fn claim(&self, name: &SkinName) -> Result<NameClaim, StoreError> {
        let mut tables = self.statement("skin_names.claim");
        let folded_name = folded(name.as_str());
        let reserved = tables.skin_reservations.contains(&folded_name);
        match tables.skins.get(&folded_name) {
            Some(skin) if skin.removed_at.is_some() => Ok(NameClaim::Kept),
            _ if reserved => Ok(NameClaim::Kept),
            Some(skin) if skin.stored => Ok(NameClaim::Stored),
            Some(_) => Ok(NameClaim::Held),
            None => {
                let token = uuid::Uuid::new_v4();
                let skin = MemorySkin {
                    name: name.as_str().to_owned(),
                    token,
                    stored: false,
                    removed_at: None,
                };
                tables.skins.insert(folded_name, skin);
                Ok(NameClaim::Claimed(skins::Claim {
                    name: name.clone(),
                    token,
                }))
            }
        }
    }

    async fn confirm(
        &self,
        claim: &skins::Claim,
        completes: Option<(&Claim, &StoredResponse)>,
    ) -> Result<(), StoreError> {
        let mut tables = self.statement("skin_names.confirm");
        match tables.skins.get_mut(&folded(claim.name.as_str())) {
            Some(skin) if skin.token == claim.token => skin.stored = true,
            _ => return Err(StoreError::new("the claim was lost")),
        }
        if let Some((key, response)) = completes {
            if let Some(row) = tables.keys.get_mut(&key_of(key)) {
                if row.token == key.token {
                    row.response = Some(response.clone());
                }
            }
        }
        Ok(())
    }

    async fn release(&self, claim: &skins::Claim) -> Result<(), StoreError> {
        let mut tables = self.statement("skin_names.release");
        let key = folded(claim.name.as_str());
        if tables
            .skins
            .get(&key)
            .is_some_and(|skin| skin.token == claim.token && !skin.stored)
        {
            tables.skins.remove(&key);
        }
        Ok(())
    }

    async fn state(&self, name: &SkinName) -> Result<NameState, StoreError> {
        let tables = self.statement("skin_names.state");
        let folded_name = folded(name.as_str());
        let skin = tables.skins.get(&folded_name);
        let stored = skin.is_some_and(|skin| skin.stored);
        Ok(match skin {
            Some(skin) if skin.removed_at.is_some() => NameState::Removed,
            _ if tables.skin_reservations.contains(&folded_name) => NameState::Reserved { stored },
            Some(skin) if skin.stored => NameState::Stored,
            Some(_) => NameState::Held,
            None => NameState::Free,
        })
    }

    async fn list(&self, after: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let tables = self.statement("skin_names.list");
        let mut names: Vec<String> = tables
            .skins
            .values()
            .filter(|skin| skin.stored && skin.removed_at.is_none() && skin.name.as_str() > after)
            .map(|skin| skin.name.clone())
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        Ok(names)
    }

    async fn claim_ingest(
        &self,
        ticket: &IngestTicket,
        etag: &str,
    ) -> Result<IngestClaim, StoreError> {
        let mut tables = self.statement("skin_names.claim_ingest");
        match tables.ingests.get_mut(&ticket.key) {
            None => {
                let ingest = MemoryIngest {
                    etag: etag.to_owned(),
                    claim: Some(ticket.token),
                    claimed_at: Utc::now(),
                    finished: false,
                };
                tables.ingests.insert(ticket.key.clone(), ingest);
                Ok(IngestClaim::Ours)
            }
            Some(ingest) if ingest.etag != etag => Ok(IngestClaim::Replaced),
            Some(ingest) if ingest.finished => Ok(IngestClaim::Done),
            Some(ingest) if ingest.claim.is_some() => Ok(IngestClaim::Running),
            Some(ingest) => {
                ingest.claim = Some(ticket.token);
                ingest.claimed_at = Utc::now();
                Ok(IngestClaim::Ours)
            }
        }
    }

    async fn finish_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        match self
            .statement("skin_names.finish_ingest")
            .ingests
            .get_mut(&ticket.key)
        {
            Some(ingest) if ingest.claim == Some(ticket.token) && !ingest.finished => {
                ingest.finished = true;
                Ok(())
            }
            _ => Err(StoreError::new("the ingest claim was lost")),
        }
    }

    async fn release_ingest(&self, ticket: &IngestTicket) -> Result<(), StoreError> {
        if let Some(ingest) = self
            .statement("skin_names.release_ingest")
            .ingests
            .get_mut(&ticket.key)
        {
            if ingest.claim == Some(ticket.token) && !ingest.finished {
                ingest.claim = None;
            }
        }
        Ok(())
    }

    async fn prune_ingests(&self, older_than: Duration, limit: u64) -> Result<u64, StoreError> {
        let cutoff = Utc::now() - older_than;
        let ingests = &mut self.statement("skin_names.prune_ingests").ingests;
        let mut old: Vec<(DateTime<Utc>, String)> = ingests
            .iter()
            .filter(|(_, ingest)| ingest.claimed_at < cutoff)
            .map(|(key, ingest)| (ingest.claimed_at, key.clone()))
            .collect();
        old.sort_unstable();
        old.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        for (_, key) in &old {
            ingests.remove(key);
        }
        Ok(old.len() as u64)
    }

    async fn reserve(&self, name: &SkinName) -> Result<bool, StoreError> {
        let reservations = &mut self.statement("skin_names.reserve").skin_reservations;
        Ok(reservations.insert(folded(name.as_str())))
    }

    async fn unreserve(&self, name: &SkinName) -> Result<bool, StoreError> {
        let reservations = &mut self.statement("skin_names.unreserve").skin_reservations;
        Ok(reservations.remove(&folded(name.as_str())))
    }

    async fn remove(&self, name: &SkinName) -> Result<Removal, StoreError> {
        match self
            .statement("skin_names.remove")
            .skins
            .get_mut(&folded(name.as_str()))
        {
            Some(skin) if skin.removed_at.is_some() => Ok(Removal::AlreadyRemoved),
            Some(skin) if skin.stored => {
                skin.removed_at = Some(Utc::now());
                Ok(Removal::Removed(vec![skin.name.clone()]))
            }
            _ => Ok(Removal::NotStored),
        }
    }

    async fn freeable(&self, name: &SkinName, settle: Duration) -> Result<Freeing, StoreError> {
        let tables = self.statement("skin_names.freeable");
        let folded_name = folded(name.as_str());
        let Some((skin, removed_at)) = tables
            .skins
            .get(&folded_name)
            .and_then(|skin| skin.removed_at.map(|at| (skin, at)))
        else {
            return Ok(Freeing::NotRemoved);
        };
        let jobs = tables
            .jobs
            .iter()
            .filter(|job| ACTIVE.contains(&job.status))
            .filter(|job| {
                job.config["skin"]
                    .as_str()
                    .is_some_and(|skin| folded(skin.trim_matches(' ')) == folded_name)
            })
            .count() as i64;
        let settling = (removed_at + settle - Utc::now()).to_std().ok();
        Ok(Freeing::of(vec![skin.name.clone()], settling, jobs))
    }

    async fn forget_removed(&self, name: &SkinName) -> Result<u64, StoreError> {
        let skins = &mut self.statement("skin_names.forget_removed").skins;
        let folded_name = folded(name.as_str());
        match skins.get(&folded_name) {
            Some(skin) if skin.removed_at.is_some() => {
                skins.remove(&folded_name);
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}

/// The name skins compare by: names are ASCII and trimmed (`SkinName`), so ASCII lowercase.
fn folded(name: &str) -> String {
    name.to_ascii_lowercase()
}
