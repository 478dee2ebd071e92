//! The `osurender-admin` commands of the operator's policy: `pause`, `resume`, `bans add|list|
//! remove`. Their grammar is the admin grammar's (keys/admin.rs); here they run against the
//! policy store, each answering one JSON object. Every instance sees a change within
//! `POLICY_CACHE_TTL` (mod.rs).

use serde_json::{json, Value};

use crate::domain::policy::{Ban, Pause, Reason};
use crate::ports::policy::{NewBan, PolicyStore, MAX_BANS};

/// A policy command, its arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyCommand {
    Pause {
        anonymous_only: bool,
        reason: Option<Reason>,
    },
    Resume,
    AddBan(NewBan),
    ListBans,
    RemoveBan(i64),
}

/// Why a policy command failed: the store's error, or an id no ban has.
pub type Failure = String;

/// Runs `command`; its answer as one JSON object.
pub async fn run(store: &dyn PolicyStore, command: &PolicyCommand) -> Result<Value, Failure> {
    let failed = |e: crate::ports::StoreError| e.message().to_owned();
    match command {
        PolicyCommand::Pause {
            anonymous_only,
            reason,
        } => {
            let pause = store
                .pause(*anonymous_only, reason.as_ref())
                .await
                .map_err(failed)?;
            tracing::info!(anonymous_only, "render intake paused");
            Ok(pause_json(&pause))
        }
        PolicyCommand::Resume => {
            let lifted = store.resume().await.map_err(failed)?;
            tracing::info!(was_paused = lifted.is_some(), "render intake resumed");
            Ok(json!({ "paused": false, "lifted": lifted.as_ref().map(pause_json) }))
        }
        PolicyCommand::AddBan(ban) => {
            let ban = store.add_ban(ban).await.map_err(failed)?;
            tracing::info!(ban_id = ban.id, kind = ban.target.kind(), "ban added");
            Ok(ban_json(&ban))
        }
        PolicyCommand::ListBans => {
            let policy = store.read(MAX_BANS).await.map_err(failed)?;
            Ok(json!({ "bans": policy.bans.iter().map(ban_json).collect::<Vec<_>>() }))
        }
        PolicyCommand::RemoveBan(id) => match store.remove_ban(*id).await.map_err(failed)? {
            Some(ban) => {
                tracing::info!(ban_id = id, "ban removed");
                Ok(json!({ "removed": ban_json(&ban) }))
            }
            None => Err(format!("no ban has id {id}")),
        },
    }
}

fn pause_json(pause: &Pause) -> Value {
    json!({
        "paused": true,
        "anonymous_only": pause.anonymous_only,
        "reason": pause.reason.as_ref().map(Reason::as_str),
        "since": pause.since,
    })
}

/// A ban as the commands show it; `until` null for one until removed.
fn ban_json(ban: &Ban) -> Value {
    json!({
        "id": ban.id,
        "kind": ban.target.kind(),
        "target": ban.target.value(),
        "reason": ban.reason.as_ref().map(Reason::as_str),
        "until": ban.until,
        "created_at": ban.created_at,
    })
}
