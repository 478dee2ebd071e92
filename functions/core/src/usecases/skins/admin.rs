//! The `osurender-admin` commands on skin names: `skins remove|reserve|unreserve NAME`. Their
//! grammar is the admin grammar's (keys/admin.rs); here they run against the skin registry,
//! each answering one JSON object. They never touch S3: a removed skin's object stays for the
//! jobs that name it, which is why its name is not free again (an upload never writes over an
//! object).

use serde_json::{json, Value};

use crate::domain::render::SkinName;
use crate::ports::skins::{NameState, Removal, SkinRegistry};
use crate::ports::StoreError;

/// A skin command, its name checked (a `SkinName`, not the built-in skin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkinCommand {
    /// No longer listed nor renderable, and kept from uploads.
    Remove(SkinName),
    /// Kept from uploads; a skin stored under it stays.
    Reserve(SkinName),
    Unreserve(SkinName),
}

/// Why a skin command failed: the store's error, or a name no stored skin has.
pub type Failure = String;

/// Runs `command`; its answer as one JSON object.
pub async fn run(registry: &dyn SkinRegistry, command: &SkinCommand) -> Result<Value, Failure> {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::Memory;
    use crate::ports::skins::NameClaim;

    fn name(text: &str) -> SkinName {
        SkinName::parse(text).unwrap()
    }

    #[tokio::test]
    async fn the_skin_commands_answer_what_they_did() {
        let registry = Memory::new().database;
        let NameClaim::Claimed(claim) = registry.claim(&name("Squat")).await.unwrap() else {
            panic!("a free name is claimed")
        };
        registry.confirm(&claim, None).await.unwrap();
        let run = async |command| run(&*registry, &command).await;

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
}
