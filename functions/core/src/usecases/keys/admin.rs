//! The `osurender-admin` commands: their grammar (clap's derive), and their run against the key
//! and policy stores (the policy's commands in usecases/policy/admin.rs) with one JSON object as
//! the answer. The same on the command line and as a Lambda event
//! (`{"command": ["keys", "create", "--name", "x"]}`); lambda/admin.rs runs them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Value};

use crate::domain::entitlement::{DeniedOptions, Entitlements};
use crate::domain::key::{
    InvalidKeyLimits, InvalidKeyName, KeyId, KeyKind, KeyLimits, KeyName, LimitsChange,
};
use crate::domain::policy::{AddressRange, BanTarget, PlayerName, Reason};
use crate::domain::render::SkinName;
use crate::domain::{RateLimit, Resolution};
use crate::ports::keys::{KeyStore, KeySummary, LimitsUpdate, Revocation, MAX_LIST};
use crate::ports::policy::{NewBan, PolicyStore};
use crate::ports::skins::{SkinRegistry, SkinStore};
use crate::support::config::Seconds;
use crate::usecases::keys::{create, CreatedKey};
use crate::usecases::policy::admin::{self as policy, PolicyCommand};
use crate::usecases::skins::admin::{self as skins, SkinCommand};

pub const USAGE: &str = "\
usage: osurender-admin keys create --name NAME [--render-limit 60/minute] [--max-active 20] [--sandbox]
                                    [--max-resolution 720p|1080p|1440p|4k]
                                    [--deny motion_blur_960fps,load_storyboard,load_video,skin,...]
                                    [--max-replay-length SECONDS] [--weight 1]
       osurender-admin keys list [--limit 100]
       osurender-admin keys revoke ID
       osurender-admin keys set ID [--weight W] [--max-active N]     (at least one)
       osurender-admin pause [--anonymous-only] [--reason TEXT]
       osurender-admin resume
       osurender-admin bans add (--ip ADDRESS|CIDR | --key KEY_ID | --player NAME)
                                [--for 7d | --until RFC3339] [--reason TEXT]
       osurender-admin bans list
       osurender-admin bans remove ID
       osurender-admin skins remove NAME
       osurender-admin skins reserve NAME
       osurender-admin skins unreserve NAME
       osurender-admin skins free NAME

--weight: the key's share of the render farm's time relative to other clients (1 to 1000);
anonymous networks each have ANONYMOUS_WEIGHT (default 1).
skins free deletes a removed skin's object and lets the name be uploaded again: refused while a
job that has not ended names it, or within 15 minutes of its removal.
keys set changes a key that is not revoked in place; requests see the change within
API_KEY_CACHE_TTL (each instance's key cache, 30 s by default).

Database: DATABASE_URL, or DB_SECRET_ARN with DB_HOST/DB_PORT/DB_NAME (as the functions).
Answers one JSON object on stdout; exit 0 ok, 1 failure, 2 usage error.";

const DEFAULT_LIST: usize = 100;

/// A command as it runs: its arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Create {
        name: KeyName,
        kind: KeyKind,
        limits: KeyLimits,
    },
    List {
        limit: usize,
    },
    Revoke {
        id: KeyId,
    },
    SetLimits {
        id: KeyId,
        change: LimitsChange,
    },
    /// The operator's policy: pause, resume, bans.
    Policy(PolicyCommand),
    /// Skin names: remove, reserve, unreserve, free.
    Skins(SkinCommand),
    Help,
}

/// Why a command did not run.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The arguments are not a command: nothing was done.
    #[error("{0}")]
    Usage(String),
    /// The command ran and failed (the database, an unknown id).
    #[error("{0}")]
    Failed(String),
}

impl AdminError {
    /// The process's exit code: 2 for a usage error, 1 for a failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Failed(_) => 1,
        }
    }
}

/// The grammar, `USAGE`'s (clap's `help` subcommand and `--help`/`-h` ask for `USAGE`).
/// Options take `--option value` or `--option=value`, each at most once, in any order.
#[derive(Debug, Parser)]
#[command(name = "osurender-admin", arg_required_else_help = false)]
struct Cli {
    #[command(subcommand)]
    command: Group,
}

#[derive(Debug, Subcommand)]
enum Group {
    /// API keys.
    #[command(subcommand, arg_required_else_help = false)]
    Keys(Keys),
    /// Refuses new render jobs (503 `render_jobs_paused`) until `resume`.
    Pause {
        /// Only clients without a key; keyed ones are still admitted.
        #[arg(long)]
        anonymous_only: bool,
        #[arg(long, value_name = "TEXT", value_parser = Reason::parse)]
        reason: Option<Reason>,
    },
    /// Admits new render jobs again.
    Resume,
    /// Bans of addresses, keys and players (403 `banned`).
    #[command(subcommand, arg_required_else_help = false)]
    Bans(Bans),
    /// Skin names (usecases/skins/admin.rs).
    #[command(subcommand, arg_required_else_help = false)]
    Skins(Skins),
}

#[derive(Debug, Subcommand)]
enum Skins {
    /// Unlists a skin: no longer renderable, its name kept from uploads, its object kept.
    Remove {
        #[arg(value_name = "NAME", value_parser = skin_name)]
        name: SkinName,
    },
    /// Keeps a name from uploads (409 `skin_name_reserved`).
    Reserve {
        #[arg(value_name = "NAME", value_parser = skin_name)]
        name: SkinName,
    },
    /// Lets uploads claim a reserved name again.
    Unreserve {
        #[arg(value_name = "NAME", value_parser = skin_name)]
        name: SkinName,
    },
    /// Deletes a removed skin's object once no job can read it, and frees its name.
    Free {
        #[arg(value_name = "NAME", value_parser = skin_name)]
        name: SkinName,
    },
}

/// A skin name as uploads take it; not the built-in skin, which no upload can take.
fn skin_name(text: &str) -> Result<SkinName, String> {
    let name = SkinName::parse(text).map_err(|e| e.reason)?;
    match name.is_default() {
        true => Err(format!("`{text}` is the built-in skin, always reserved")),
        false => Ok(name),
    }
}

#[derive(Debug, Subcommand)]
enum Bans {
    /// A new ban, until removed or for a while.
    Add {
        #[command(flatten)]
        target: BanTargetArgs,
        /// How long: a number with s, m, h or d (`7d`).
        #[arg(long = "for", value_name = "DURATION", value_parser = ban_duration, conflicts_with = "until")]
        lasting: Option<chrono::Duration>,
        /// When it ends (RFC 3339, in the future).
        #[arg(long, value_name = "RFC3339", value_parser = ban_end)]
        until: Option<DateTime<Utc>>,
        #[arg(long, value_name = "TEXT", value_parser = Reason::parse)]
        reason: Option<Reason>,
    },
    /// The bans in force.
    List,
    /// Removes a ban.
    Remove {
        #[arg(value_name = "ID")]
        id: i64,
    },
}

/// Exactly one of a ban's targets.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct BanTargetArgs {
    #[arg(long, value_name = "ADDRESS|CIDR")]
    ip: Option<AddressRange>,
    #[arg(long, value_name = "KEY_ID", value_parser = key_id)]
    key: Option<KeyId>,
    #[arg(long, value_name = "NAME", value_parser = PlayerName::parse)]
    player: Option<PlayerName>,
}

impl BanTargetArgs {
    fn target(self) -> Option<BanTarget> {
        let Self { ip, key, player } = self;
        ip.map(BanTarget::Address)
            .or(key.map(BanTarget::Key))
            .or(player.map(BanTarget::Player))
    }
}

/// A ban's length: whole seconds, or a number with s, m, h or d (config's syntax); at least a
/// second, at most ten years.
fn ban_duration(text: &str) -> Result<chrono::Duration, String> {
    const TEN_YEARS: Duration = Duration::from_secs(10 * 365 * 86_400);
    let length: Duration = text.parse::<Seconds>()?.into();
    match !length.is_zero() && length <= TEN_YEARS {
        true => chrono::Duration::from_std(length).map_err(|e| e.to_string()),
        false => Err("1 s to 10 years, as a number with s, m, h or d (`7d`)".into()),
    }
}

/// A ban's end: an RFC 3339 time in the future.
fn ban_end(text: &str) -> Result<DateTime<Utc>, String> {
    let until = DateTime::parse_from_rfc3339(text)
        .map_err(|_| format!("`{text}` is not an RFC 3339 time (2026-01-31T12:00:00Z)"))?
        .with_timezone(&Utc);
    match until > Utc::now() {
        true => Ok(until),
        false => Err(format!("`{text}` has passed")),
    }
}

#[derive(Debug, Subcommand)]
enum Keys {
    /// A new key: answers the key and its signing secret, once.
    Create {
        #[arg(long, value_name = "NAME", value_parser = key_name)]
        name: KeyName,
        #[arg(long, value_name = "LIMIT", value_parser = render_limit)]
        render_limit: Option<RateLimit>,
        #[arg(long, value_name = "N", value_parser = max_active, allow_negative_numbers = true)]
        max_active: Option<u32>,
        /// An `osr_test_` key.
        #[arg(long)]
        sandbox: bool,
        /// The highest resolution its renders may ask for (default: any).
        #[arg(long, value_name = "RESOLUTION", value_parser = max_resolution)]
        max_resolution: Option<Resolution>,
        /// The render options its renders may not turn on, comma-separated.
        #[arg(long, value_name = "OPTIONS", value_parser = deny_list)]
        deny: Option<DeniedOptions>,
        /// Seconds of play at most (default: the service's MAX_REPLAY_LENGTH).
        #[arg(long, value_name = "SECONDS", value_parser = max_replay_length, allow_negative_numbers = true)]
        max_replay_length: Option<u32>,
        /// Its share of the render farm's time relative to other clients (default 1).
        #[arg(long, value_name = "W", value_parser = weight, allow_negative_numbers = true)]
        weight: Option<u32>,
    },
    /// The newest keys, without their secrets.
    List {
        #[arg(long, value_name = "N", value_parser = list_limit, default_value_t = DEFAULT_LIST)]
        limit: usize,
    },
    /// Revokes a key (again: answers when it was).
    Revoke {
        #[arg(value_name = "ID", value_parser = key_id)]
        id: KeyId,
    },
    /// Changes a key's limits in place (not a revoked key's); requests see the change within
    /// API_KEY_CACHE_TTL.
    Set {
        #[arg(value_name = "ID", value_parser = key_id)]
        id: KeyId,
        #[command(flatten)]
        change: LimitsChangeArgs,
    },
}

/// At least one of the limits `keys set` changes.
#[derive(Debug, Args)]
#[group(required = true, multiple = true)]
struct LimitsChangeArgs {
    #[arg(long, value_name = "W", value_parser = weight, allow_negative_numbers = true)]
    weight: Option<u32>,
    #[arg(long, value_name = "N", value_parser = max_active, allow_negative_numbers = true)]
    max_active: Option<u32>,
}

fn key_name(text: &str) -> Result<KeyName, InvalidKeyName> {
    KeyName::parse(text)
}

/// A rate limit within a key's bounds (`KeyLimits::new`).
fn render_limit(text: &str) -> Result<RateLimit, String> {
    let render = text.parse::<RateLimit>().map_err(|e| e.to_string())?;
    KeyLimits::new(render, KeyLimits::default().max_active)
        .map(|limits| limits.render)
        .map_err(|e| e.to_string())
}

/// A number of active jobs within a key's bounds (`KeyLimits::new`).
fn max_active(text: &str) -> Result<u32, String> {
    KeyLimits::new(KeyLimits::default().render, number(text)?)
        .map(|limits| limits.max_active)
        .map_err(|e| e.to_string())
}

/// A weight within a key's bounds (`KeyLimits::with_weight`).
fn weight(text: &str) -> Result<u32, String> {
    KeyLimits::default()
        .with_weight(number(text)?)
        .map(|limits| limits.weight.get())
        .map_err(|e| e.to_string())
}

fn number(text: &str) -> Result<u32, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a number"))
}

fn max_resolution(text: &str) -> Result<Resolution, String> {
    Resolution::parse(text).map_err(|_| format!("one of {}", Resolution::NAMES))
}

fn deny_list(text: &str) -> Result<DeniedOptions, String> {
    DeniedOptions::parse(text).map_err(|e| e.to_string())
}

/// A replay length within a key's bounds (`KeyLimits::with_max_replay_length`).
fn max_replay_length(text: &str) -> Result<u32, String> {
    let secs = text
        .parse::<u32>()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    KeyLimits::default()
        .with_max_replay_length(Some(secs))
        .map(|_| secs)
        .map_err(|e| e.to_string())
}

fn list_limit(text: &str) -> Result<usize, String> {
    text.parse()
        .ok()
        .filter(|n| (1..=MAX_LIST).contains(n))
        .ok_or_else(|| format!("1 to {MAX_LIST}"))
}

fn key_id(text: &str) -> Result<KeyId, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a key id (a UUID)"))
}

/// The command `args` (without the program's name) spell. A usage error holds clap's message
/// (and its tip, if any), without clap's usage line: the caller shows `USAGE`.
pub fn parse(args: &[String]) -> Result<Command, AdminError> {
    let args = std::iter::once("osurender-admin").chain(args.iter().map(String::as_str));
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) if error.kind() == ErrorKind::DisplayHelp => return Ok(Command::Help),
        Err(error) => return Err(AdminError::Usage(clap_message(&error))),
    };
    let keys = match cli.command {
        Group::Keys(keys) => keys,
        Group::Pause {
            anonymous_only,
            reason,
        } => {
            return Ok(Command::Policy(PolicyCommand::Pause {
                anonymous_only,
                reason,
            }))
        }
        Group::Resume => return Ok(Command::Policy(PolicyCommand::Resume)),
        Group::Bans(bans) => return Ok(Command::Policy(bans_command(bans))),
        Group::Skins(command) => return Ok(Command::Skins(skins_command(command))),
    };
    let usage = |e: InvalidKeyLimits| AdminError::Usage(e.to_string());
    Ok(match keys {
        Keys::Create {
            name,
            render_limit,
            max_active,
            sandbox,
            max_resolution,
            deny,
            max_replay_length,
            weight,
        } => {
            let defaults = KeyLimits::default();
            let limits = KeyLimits::new(
                render_limit.unwrap_or(defaults.render),
                max_active.unwrap_or(defaults.max_active),
            )
            .map_err(usage)?
            .with_entitlements(Entitlements {
                max_resolution,
                denied: deny.unwrap_or_default(),
            })
            .with_max_replay_length(max_replay_length)
            .map_err(usage)?
            .with_weight(weight.unwrap_or(defaults.weight.get()))
            .map_err(usage)?;
            let kind = match sandbox {
                true => KeyKind::Sandbox,
                false => KeyKind::Live,
            };
            Command::Create { name, kind, limits }
        }
        Keys::List { limit } => Command::List { limit },
        Keys::Revoke { id } => Command::Revoke { id },
        Keys::Set {
            id,
            change: LimitsChangeArgs { weight, max_active },
        } => Command::SetLimits {
            id,
            change: LimitsChange::new(weight, max_active).map_err(usage)?,
        },
    })
}

fn bans_command(bans: Bans) -> PolicyCommand {
    match bans {
        Bans::Add {
            target,
            lasting,
            until,
            reason,
        } => PolicyCommand::AddBan(NewBan {
            target: target.target().expect("clap requires one target"),
            reason,
            until: until.or(lasting.map(|lasting| Utc::now() + lasting)),
        }),
        Bans::List => PolicyCommand::ListBans,
        Bans::Remove { id } => PolicyCommand::RemoveBan(id),
    }
}

fn skins_command(command: Skins) -> SkinCommand {
    match command {
        Skins::Remove { name } => SkinCommand::Remove(name),
        Skins::Reserve { name } => SkinCommand::Reserve(name),
        Skins::Unreserve { name } => SkinCommand::Unreserve(name),
        Skins::Free { name } => SkinCommand::Free(name),
    }
}

/// clap's error as text, up to its usage line or its pointer to `--help`.
fn clap_message(error: &clap::Error) -> String {
    let text = error.to_string();
    let lines = text.lines().take_while(|line| {
        !line.starts_with("Usage:") && !line.starts_with("For more information")
    });
    let message = lines.collect::<Vec<_>>().join("\n");
    let message = message.trim();
    message
        .strip_prefix("error: ")
        .unwrap_or(message)
        .to_owned()
}

/// The answer to `help`: the usage, which needs no database.
pub fn help() -> Value {
    json!({ "usage": USAGE })
}

/// The stores the commands run against.
#[derive(Clone, Copy)]
pub struct AdminStores<'a> {
    pub keys: &'a dyn KeyStore,
    pub policy: &'a dyn PolicyStore,
    pub skins: &'a dyn SkinRegistry,
    /// The skin objects (`skins free` deletes a removed skin's).
    pub skin_objects: &'a dyn SkinStore,
}

/// Runs `command`; its answer as one JSON object.
pub async fn run(stores: AdminStores<'_>, command: &Command) -> Result<Value, AdminError> {
    let failed = |e: &dyn std::fmt::Display| AdminError::Failed(e.to_string());
    let store = stores.keys;
    match command {
        Command::Help => Ok(help()),
        Command::Policy(command) => policy::run(stores.policy, command)
            .await
            .map_err(AdminError::Failed),
        Command::Skins(command) => skins::run(stores.skins, stores.skin_objects, command)
            .await
            .map_err(AdminError::Failed),
        Command::Create { name, kind, limits } => {
            let created = create(store, name.clone(), *kind, *limits)
                .await
                .map_err(|e| failed(&e))?;
            tracing::info!(key_id = %created.record.summary.id, kind = kind.as_str(), "key created");
            Ok(created_json(&created))
        }
        Command::List { limit } => {
            let keys = store.list(*limit).await.map_err(|e| failed(&e.message()))?;
            Ok(json!({ "keys": keys.iter().map(summary_json).collect::<Vec<_>>() }))
        }
        Command::Revoke { id } => {
            match store.revoke(*id).await.map_err(|e| failed(&e.message()))? {
                Revocation::Revoked(at) => {
                    tracing::info!(key_id = %id, "key revoked");
                    Ok(json!({ "id": id, "revoked_at": at, "already_revoked": false }))
                }
                Revocation::AlreadyRevoked(at) => {
                    Ok(json!({ "id": id, "revoked_at": at, "already_revoked": true }))
                }
                Revocation::NoSuchKey => Err(AdminError::Failed(format!("no API key has id {id}"))),
            }
        }
        Command::SetLimits { id, change } => {
            let update = store.change_limits(*id, *change).await;
            match update.map_err(|e| failed(&e.message()))? {
                LimitsUpdate::Changed(key) => {
                    tracing::info!(
                        key_id = %id,
                        weight = %key.limits.weight,
                        max_active = key.limits.max_active,
                        "key limits changed"
                    );
                    Ok(summary_json(&key))
                }
                LimitsUpdate::Revoked(at) => Err(AdminError::Failed(format!(
                    "the API key {id} was revoked at {}: its limits stay as they were",
                    at.to_rfc3339()
                ))),
                LimitsUpdate::NoSuchKey => {
                    Err(AdminError::Failed(format!("no API key has id {id}")))
                }
            }
        }
    }
}

/// The only answer that holds the key and the signing secret: shown once.
fn created_json(created: &CreatedKey) -> Value {
    let mut answer = summary_json(&created.record.summary);
    answer["key"] = created.key.expose().into();
    answer["signing_secret"] = created.record.signing_secret.expose().into();
    answer
}

/// A key as `list` shows it: never the key, its hash or its signing secret.
fn summary_json(key: &KeySummary) -> Value {
    json!({
        "id": key.id,
        "name": key.name.as_str(),
        "kind": key.kind,
        "render_limit": key.limits.render.to_string(),
        "max_active": key.limits.max_active,
        "max_resolution": key.limits.entitlements.max_resolution.map(Resolution::as_str),
        "deny": key.limits.entitlements.denied.names(),
        "max_replay_length": key.limits.max_replay_length,
        "weight": key.limits.weight,
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::{Memory, MemoryKeys, MemoryPolicy};

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn create_takes_its_options_in_any_order_and_form() {
        let command = parse(&args(
            "keys create --sandbox --max-active=3 --render-limit 10/hour --name ci",
        ))
        .unwrap();
        let Command::Create { name, kind, limits } = command else {
            panic!("not a create")
        };
        assert_eq!(name.as_str(), "ci");
        assert_eq!(kind, KeyKind::Sandbox);
        assert_eq!(limits.render.to_string(), "10/hour");
        assert_eq!(limits.max_active, 3);
        let Command::Create { kind, limits, .. } = parse(&args("keys create --name x")).unwrap()
        else {
            panic!()
        };
        assert_eq!((kind, limits), (KeyKind::Live, KeyLimits::default()));
    }

    #[test]
    fn create_takes_entitlements_and_a_replay_length() {
        let command = parse(&args(
            "keys create --name bot --max-resolution 720p --deny=video,skin --max-replay-length 300",
        ))
        .unwrap();
        let Command::Create { limits, .. } = command else {
            panic!("not a create")
        };
        assert_eq!(
            limits.entitlements,
            Entitlements {
                max_resolution: Some(Resolution::Hd720),
                denied: DeniedOptions::parse("video,skin").unwrap(),
            }
        );
        assert_eq!(limits.max_replay_length, Some(300));
        assert_eq!(limits.render, KeyLimits::default().render);
    }

    #[test]
    fn create_takes_a_weight() {
        let Command::Create { limits, .. } =
            parse(&args("keys create --weight=250 --name community-bot")).unwrap()
        else {
            panic!("not a create")
        };
        assert_eq!(limits.weight.get(), 250);
        assert_eq!(limits.max_active, KeyLimits::default().max_active);
    }

    #[test]
    fn set_takes_an_id_and_at_least_one_limit() {
        let id: KeyId = "5f0c9a4e-1b2d-4c3e-8f70-0123456789ab".parse().unwrap();
        for (options, weight, max_active) in [
            ("--weight 40", Some(40), None),
            ("--max-active=5", None, Some(5)),
            ("--max-active 5 --weight 1000", Some(1000), Some(5)),
        ] {
            let line = format!("keys set {id} {options}");
            assert_eq!(
                parse(&args(&line)).unwrap(),
                Command::SetLimits {
                    id,
                    change: LimitsChange::new(weight, max_active).unwrap(),
                },
                "{line}"
            );
        }
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for line in [
            "",
            "keys",
            "keys create",
            "keys create --name",
            "keys create --name x --name y",
            "keys create --name x --render-limit often",
            "keys create --name x --max-active 0",
            "keys create --name x --max-active -1",
            "keys create --name x --sandbox=yes",
            "keys create --name x --max-resolution 8k",
            "keys create --name x --deny video,snaking_in",
            "keys create --name x --max-replay-length 0",
            "keys create --name x --max-replay-length -5",
            "keys create --name x --max-replay-length 86401",
            "keys create --name x --weight 0",
            "keys create --name x --weight 1001",
            "keys create --name x --weight -1",
            "keys create --name x --weight heavy",
            "keys create --name x --color",
            "keys list --limit 0",
            "keys list --limit 1001",
            "keys list extra",
            "keys revoke",
            "keys revoke not-a-uuid",
            "keys revoke 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab more",
            "keys set",
            "keys set --weight 2",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab",
            "keys set not-a-uuid --weight 2",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --weight 0",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --weight 1001",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --max-active 0",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --weight 2 --weight 3",
            "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --render-limit 1/day",
            "users list",
            "pause --reason",
            "pause --anonymous-only=yes",
            "resume now",
            "bans add",
            "bans add --ip 203.0.113.0/33",
            "bans add --ip 203.0.113.1 --key 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab",
            "bans add --player x --for 0d",
            "bans add --player x --for 7w",
            "bans add --player x --for 1d --until 2999-01-01T00:00:00Z",
            "bans add --player x --until 2001-01-01T00:00:00Z",
            "bans add --player x --until tomorrow",
            "bans remove",
            "bans remove one",
            "skins",
            "skins remove",
            "skins remove Default",
            "skins reserve ../etc",
            "skins reserve a b",
            "skins unreserve",
            "skins free",
            "skins free Default",
        ] {
            let error = parse(&args(line)).expect_err(line);
            assert_eq!(error.exit_code(), 2, "{line}: {error}");
        }
        assert_eq!(parse(&args("--help")).unwrap(), Command::Help);
    }

    #[test]
    fn usage_errors_are_clap_messages_without_clap_usage_and_help_is_ours() {
        for (line, said) in [
            ("keys create", "--name <NAME>"),
            (
                "keys create --name x --max-active 0",
                "max_active must be 1 to 10000",
            ),
            ("keys list --limit 0", "1 to 1000"),
            (
                "keys create --name x --deny bg_dim",
                "`bg_dim` is not an option that can be denied (one of motion_blur_960fps, load_storyboard, load_video, skin, show_scoreboard, show_avatars_on_scoreboard)",
            ),
            (
                "keys create --name x --max-resolution 8k",
                "one of 720p, 1080p, 1440p, 4k",
            ),
            ("keys revoke x", "`x` is not a key id (a UUID)"),
            ("keys create --name x --weight 0", "weight must be 1 to 1000"),
            (
                "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab",
                "--weight <W>|--max-active <N>",
            ),
            (
                "keys set 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --max-active 10001",
                "max_active must be 1 to 10000",
            ),
            ("keys lst", "a similar subcommand exists: 'list'"),
        ] {
            let message = parse(&args(line)).expect_err(line).to_string();
            assert!(message.contains(said), "{line}: {message}");
            assert!(!message.starts_with("error:"), "{line}: {message}");
            assert!(!message.contains("Usage:"), "{line}: {message}");
            assert!(!message.contains("--help"), "{line}: {message}");
        }
        for line in ["help", "-h", "--help", "keys --help", "help keys create"] {
            assert_eq!(parse(&args(line)).unwrap(), Command::Help, "{line}");
        }
    }

    #[test]
    fn policy_commands_parse_to_what_they_say() {
        let Command::Policy(PolicyCommand::Pause {
            anonymous_only,
            reason,
        }) = parse(&args("pause --anonymous-only --reason maintenance")).unwrap()
        else {
            panic!("not a pause")
        };
        assert!(anonymous_only);
        assert_eq!(reason.unwrap().as_str(), "maintenance");
        assert_eq!(
            parse(&args("resume")).unwrap(),
            Command::Policy(PolicyCommand::Resume)
        );
        let ban = |line| match parse(&args(line)).unwrap() {
            Command::Policy(PolicyCommand::AddBan(ban)) => ban,
            other => panic!("{line}: {other:?}"),
        };
        let by_range = ban("bans add --ip 2001:db8:1::/48");
        assert_eq!(by_range.target.value(), "2001:db8:1::/48");
        assert_eq!(by_range.until, None);
        let week = ban("bans add --player Cookiezi --for 7d --reason cheating");
        assert_eq!(week.target.value(), "Cookiezi", "as typed");
        let left = week.until.unwrap() - Utc::now();
        assert!((left - chrono::Duration::days(7)).num_seconds().abs() < 5);
        let until = ban(
            "bans add --key 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab --until 2999-01-01T00:00:00+02:00",
        );
        assert_eq!(
            until.until.unwrap().to_rfc3339(),
            "2998-12-31T22:00:00+00:00"
        );
        assert_eq!(
            parse(&args("bans remove 7")).unwrap(),
            Command::Policy(PolicyCommand::RemoveBan(7))
        );
    }

    #[test]
    fn skin_commands_take_one_name() {
        let name = SkinName::parse("Official").unwrap();
        for (line, command) in [
            ("skins remove Official", SkinCommand::Remove(name.clone())),
            ("skins reserve Official", SkinCommand::Reserve(name.clone())),
            (
                "skins unreserve Official",
                SkinCommand::Unreserve(name.clone()),
            ),
            ("skins free Official", SkinCommand::Free(name)),
        ] {
            assert_eq!(
                parse(&args(line)).unwrap(),
                Command::Skins(command),
                "{line}"
            );
        }
        let spaced = ["skins", "remove", "My Skin"].map(str::to_owned);
        let Command::Skins(SkinCommand::Remove(spaced)) = parse(&spaced).unwrap() else {
            panic!("not a removal")
        };
        assert_eq!(spaced.as_str(), "My Skin");
        let built_in = parse(&args("skins reserve default")).unwrap_err();
        assert!(built_in.to_string().contains("built-in skin"), "{built_in}");
    }

    /// The admin's stores, in memory.
    #[derive(Default)]
    struct InMemory {
        keys: MemoryKeys,
        policy: MemoryPolicy,
        memory: Memory,
    }

    impl InMemory {
        fn stores(&self) -> AdminStores<'_> {
            AdminStores {
                keys: &self.keys,
                policy: &self.policy,
                skins: &*self.memory.database,
                skin_objects: &*self.memory.objects,
            }
        }
    }

    #[tokio::test]
    async fn the_policy_commands_answer_what_they_did() {
        let in_memory = InMemory::default();
        let stores = in_memory.stores();
        let run_line = async |line: &str| run(stores, &parse(&args(line)).unwrap()).await;
        let paused = run_line("pause --reason upgrade").await.unwrap();
        assert_eq!(paused["paused"], true);
        assert_eq!(paused["anonymous_only"], false);
        assert_eq!(paused["reason"], "upgrade");
        let resumed = run_line("resume").await.unwrap();
        assert_eq!(resumed["paused"], false);
        assert_eq!(resumed["lifted"]["reason"], "upgrade");
        assert_eq!(run_line("resume").await.unwrap()["lifted"], Value::Null);

        let added = run_line("bans add --ip 203.0.113.9/24 --for 1h")
            .await
            .unwrap();
        assert_eq!(added["kind"], "ip");
        assert_eq!(added["target"], "203.0.113.0/24");
        assert!(added["until"].is_string(), "{added}");
        let listed = run_line("bans list").await.unwrap();
        assert_eq!(listed["bans"][0]["id"], added["id"]);
        let id = added["id"].as_i64().unwrap();
        let removed = run_line(&format!("bans remove {id}")).await.unwrap();
        assert_eq!(removed["removed"]["id"], id);
        let again = run_line(&format!("bans remove {id}")).await.unwrap_err();
        assert_eq!(again.exit_code(), 1);
        assert_eq!(again.to_string(), format!("no ban has id {id}"));
    }

    #[tokio::test]
    async fn the_answers_show_the_key_once() {
        let in_memory = InMemory::default();
        let stores = in_memory.stores();
        let create = parse(&args("keys create --name ci --sandbox")).unwrap();
        let created = run(stores, &create).await.unwrap();
        let key = created["key"].as_str().unwrap();
        assert!(key.starts_with("osr_test_"), "{created}");
        assert!(created["signing_secret"]
            .as_str()
            .unwrap()
            .starts_with("whsec_"));
        assert_eq!(created["render_limit"], "60/minute");
        assert_eq!(created["max_active"], 20);
        assert_eq!(created["kind"], "sandbox");
        assert_eq!(created["max_resolution"], Value::Null);
        assert_eq!(created["deny"], json!([]));
        assert_eq!(created["max_replay_length"], Value::Null);
        assert_eq!(created["weight"], 1);

        let listed = run(stores, &Command::List { limit: 10 }).await.unwrap();
        let text = listed.to_string();
        assert!(!text.contains(&key[9..]), "{text}");
        assert!(!text.contains("whsec_"), "{text}");
        assert_eq!(listed["keys"][0]["id"], created["id"]);
        assert_eq!(listed["keys"][0]["revoked_at"], Value::Null);

        let id: KeyId = created["id"].as_str().unwrap().parse().unwrap();
        let set = run(
            stores,
            &parse(&args(&format!("keys set {id} --weight 9"))).unwrap(),
        )
        .await
        .unwrap();
        let mut expected = listed["keys"][0].clone();
        expected["weight"] = 9.into();
        assert_eq!(
            set, expected,
            "the key as `list` shows it, its weight changed"
        );
        let listed = run(stores, &Command::List { limit: 10 }).await.unwrap();
        assert_eq!(listed["keys"][0], set);

        let revoked = run(stores, &Command::Revoke { id }).await.unwrap();
        assert_eq!(revoked["already_revoked"], false);
        let again = run(stores, &Command::Revoke { id }).await.unwrap();
        assert_eq!(again["already_revoked"], true);
        assert_eq!(again["revoked_at"], revoked["revoked_at"]);

        let unknown = run(stores, &Command::Revoke { id: KeyId::new() }).await;
        assert_eq!(unknown.unwrap_err().exit_code(), 1);

        let change = LimitsChange::new(Some(2), None).unwrap();
        let on_revoked = run(stores, &Command::SetLimits { id, change }).await;
        let error = on_revoked.unwrap_err();
        assert_eq!(error.exit_code(), 1);
        assert!(error.to_string().contains("was revoked"), "{error}");
        let other = KeyId::new();
        let unknown = run(stores, &Command::SetLimits { id: other, change }).await;
        let error = unknown.unwrap_err();
        assert_eq!(error.exit_code(), 1);
        assert_eq!(error.to_string(), format!("no API key has id {other}"));
    }
}
