//! The `osurender-admin` commands on skin names: `skins remove|reserve|unreserve|free NAME`.
//! Their grammar is the admin grammar's (keys/admin.rs); here they run against the skin
//! registry, each answering one JSON object. A removed skin's object stays for the jobs that
//! name it, which is why its name is not free again (an upload never writes over an object),
//! until `free` deletes the object once no job can read it, and then forgets the name.

use std::time::Duration;

use serde_json::{json, Value};

use crate::domain::render::SkinName;
use crate::ports::skins::{
    registered_skin_key, Freeing, NameState, Removal, SkinRegistry, SkinStore, CLAIM_STALE_AFTER,
};
use crate::ports::StoreError;

/// How long after its removal a name may be freed: a render that read the skin as renderable
/// just before the removal is admitted (or refused) within any function's run, and only a job
/// admitted by then can name it (every later render is refused `unknown_skin`).
pub const REMOVAL_SETTLES: Duration = CLAIM_STALE_AFTER;

/// A skin command, its name checked (a `SkinName`, not the built-in skin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkinCommand {
    /// No longer listed nor renderable, and kept from uploads.
    Remove(SkinName),
    /// Kept from uploads; a skin stored under it stays.
    Reserve(SkinName),
    Unreserve(SkinName),
    /// A removed name that no job can still read: its objects deleted and the name forgotten,
    /// so it may be uploaded again.
    Free(SkinName),
}

/// Why a skin command failed: the store's error, or a name no stored skin has.
pub type Failure = String;

/// Runs `command` on the registry (and, to free a name, on the skin objects); its answer as
/// one JSON object.
pub async fn run(
    registry: &dyn SkinRegistry,
    objects: &dyn SkinStore,
    command: &SkinCommand,
) -> Result<Value, Failure> {
    let failed = |e: StoreError| e.message().to_owned();
    match command {
        SkinCommand::Remove(name) => match registry.remove(name).await.map_err(failed)? {
            Removal::Removed(names) => {
                tracing::info!(skin = name.as_str(), "skin removed");
                Ok(json!({ "skin": name, "removed": names, "already_removed": false }))
            }
            Removal::AlreadyRemoved => {
                Ok(json!({ "skin": name, "removed": [], "already_removed": true }))
            }
            Removal::NotStored => Err(format!("no skin is named `{}`", name.as_str())),
        },
        SkinCommand::Reserve(name) => {
            let newly = registry.reserve(name).await.map_err(failed)?;
            tracing::info!(skin = name.as_str(), "skin name reserved");
            let state = registry.state(name).await.map_err(failed)?;
            Ok(json!({
                "skin": name,
                "reserved": true,
                "already_reserved": !newly,
                "listed": state.renderable(),
            }))
        }
        SkinCommand::Unreserve(name) => {
            let was_reserved = registry.unreserve(name).await.map_err(failed)?;
            tracing::info!(skin = name.as_str(), "skin name unreserved");
            let state = registry.state(name).await.map_err(failed)?;
            Ok(json!({
                "skin": name,
                "reserved": false,
                "was_reserved": was_reserved,
                "removed": state == NameState::Removed,
            }))
        }
        SkinCommand::Free(name) => free(registry, objects, name).await,
    }
}

/// `skins free`: refused while the name is not removed, while a job that is not ended names it
/// (its worker may still read the object) or before `REMOVAL_SETTLES`. Otherwise each removed
/// skin's object is deleted, and only then are the removed skins forgotten: until that last
/// step the name stays kept, so no upload can meet the old object, and a run that failed half
/// way is run again (a deleted object is deleted again as nothing).
async fn free(
    registry: &dyn SkinRegistry,
    objects: &dyn SkinStore,
    name: &SkinName,
) -> Result<Value, Failure> {
    let failed = |e: StoreError| e.message().to_owned();
    let shown = name.as_str();
    let removed = match registry
        .freeable(name, REMOVAL_SETTLES)
        .await
        .map_err(failed)?
    {
        Freeing::Ready(removed) => removed,
        Freeing::NotRemoved => {
            return Err(format!(
                "no removed skin is named `{shown}` (only a name `skins remove` kept is freed)"
            ))
        }
        Freeing::InUse(jobs) => {
            return Err(format!(
                "{jobs} job(s) not ended (queued or rendering) name `{shown}`: its object is kept \
                 for them; free it once they have ended"
            ))
        }
        Freeing::RemovedRecently(left) => {
            return Err(format!(
                "`{shown}` was removed less than {} minutes ago: a render admitted just before \
                 may still name it; free it in {} s",
                REMOVAL_SETTLES.as_secs() / 60,
                left.as_secs().max(1)
            ))
        }
    };
    let mut deleted = Vec::with_capacity(removed.len());
    for registered in &removed {
        let key = registered_skin_key(registered);
        objects.delete(&key).await.map_err(|error| {
            format!("could not delete {key} ({error}); the name stays kept: run `skins free` again")
        })?;
        deleted.push(key);
    }
    registry.forget_removed(name).await.map_err(failed)?;
    tracing::info!(skin = shown, "removed skin name freed");
    let state = registry.state(name).await.map_err(failed)?;
    Ok(json!({
        "skin": name,
        "freed": removed,
        "deleted": deleted,
        "reserved": state.kept_by_operator(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::Memory;
    use crate::ports::contracts::fresh_caller;
    use crate::ports::contracts::jobs::{new_job, ROOMY};
    use crate::ports::jobs::{Admission, JobAdmission, JobHousekeeping};
    use crate::ports::skins::NameClaim;

    fn name(text: &str) -> SkinName {
        SkinName::parse(text).unwrap()
    }

    #[tokio::test]
    async fn the_skin_commands_answer_what_they_did() {
        let memory = Memory::new();
        let registry = &*memory.database;
        let NameClaim::Claimed(claim) = registry.claim(&name("Squat")).await.unwrap() else {
            panic!("a free name is claimed")
        };
        registry.confirm(&claim, None).await.unwrap();
        let run = async |command| run(registry, &*memory.objects, &command).await;

        let reserved = run(SkinCommand::Reserve(name("squat"))).await.unwrap();
        assert_eq!(
            reserved,
            json!({ "skin": "squat", "reserved": true, "already_reserved": false, "listed": true })
        );
        let again = run(SkinCommand::Reserve(name("SQUAT"))).await.unwrap();
        assert_eq!(again["already_reserved"], true);

        let removed = run(SkinCommand::Remove(name("squat"))).await.unwrap();
        assert_eq!(
            removed,
            json!({ "skin": "squat", "removed": ["Squat"], "already_removed": false })
        );
        let again = run(SkinCommand::Remove(name("Squat"))).await.unwrap();
        assert_eq!(again["already_removed"], true);
        assert_eq!(again["removed"], json!([]));

        let unreserved = run(SkinCommand::Unreserve(name("Squat"))).await.unwrap();
        assert_eq!(
            unreserved,
            json!({ "skin": "Squat", "reserved": false, "was_reserved": true, "removed": true })
        );
        let unknown = run(SkinCommand::Remove(name("Nobody"))).await.unwrap_err();
        assert_eq!(unknown, "no skin is named `Nobody`");
    }

    #[tokio::test]
    async fn a_removed_name_is_freed_once_no_job_can_read_its_object() {
        let memory = Memory::new();
        let (registry, objects) = (&*memory.database, &*memory.objects);
        let NameClaim::Claimed(claim) = registry.claim(&name("Squat")).await.unwrap() else {
            panic!("a free name is claimed")
        };
        registry.confirm(&claim, None).await.unwrap();
        let old = bytes::Bytes::from_static(b"the squatter's skin");
        assert!(objects.put_new(&name("Squat"), old).await.unwrap());
        let run = async |command| run(registry, objects, &command).await;
        let free = async || run(SkinCommand::Free(name("SQUAT"))).await;

        let stored = free().await.unwrap_err();
        assert!(
            stored.starts_with("no removed skin is named `SQUAT`"),
            "{stored}"
        );
        // A render admitted before the removal names it, in another spelling.
        let mut job = new_job(&fresh_caller(), "a render of the squatted skin");
        job.options.skin = name("squat");
        let admitted = registry.admit(&job, &ROOMY).await.unwrap();
        assert!(matches!(admitted, Admission::Admitted(_)), "{admitted:?}");
        run(SkinCommand::Remove(name("Squat"))).await.unwrap();

        let in_use = free().await.unwrap_err();
        assert!(in_use.starts_with("1 job(s) not ended"), "{in_use}");
        registry.expire_queued(Duration::ZERO).await.unwrap();
        let recent = free().await.unwrap_err();
        assert!(
            recent.contains("removed less than 15 minutes ago"),
            "{recent}"
        );
        assert!(
            objects.exists(&name("Squat")).await.unwrap(),
            "kept meanwhile"
        );

        memory.database.age_skin_removals(REMOVAL_SETTLES);
        let freed = free().await.unwrap();
        assert_eq!(
            freed,
            json!({ "skin": "SQUAT", "freed": ["Squat"], "deleted": ["skins/Squat.osk"],
                    "reserved": false })
        );
        assert!(!objects.exists(&name("Squat")).await.unwrap());
        assert_eq!(
            registry.state(&name("squat")).await.unwrap(),
            NameState::Free
        );
        assert!(matches!(
            registry.claim(&name("squat")).await.unwrap(),
            NameClaim::Claimed(_)
        ));
        let again = free().await.unwrap_err();
        assert!(again.starts_with("no removed skin"), "{again}");
    }
}
