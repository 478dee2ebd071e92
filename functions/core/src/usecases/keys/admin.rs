//! The `osurender-admin` commands: their grammar (clap's derive), and their run against a key store with one
//! JSON object as the answer. The same on the command line and as a Lambda event
//! (`{"command": ["keys", "create", "--name", "x"]}`); lambda/admin.rs runs them.

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use crate::domain::entitlement::{DeniedOptions, Entitlements};
use crate::domain::key::{InvalidKeyLimits, InvalidKeyName, KeyId, KeyKind, KeyLimits, KeyName};
use crate::domain::{RateLimit, Resolution};
use crate::ports::keys::{KeyStore, KeySummary, Revocation, MAX_LIST};
use crate::usecases::keys::{create, CreatedKey};

pub const USAGE: &str = "\
usage: osurender-admin keys create --name NAME [--render-limit 60/minute] [--max-active 20] [--sandbox]
                                    [--max-resolution 720p|1080p|1440p|4k]
                                    [--deny motion_blur,storyboard,video,skin]
                                    [--max-replay-length SECONDS]
       osurender-admin keys list [--limit 100]
       osurender-admin keys revoke ID

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
    let max_active = text
        .parse::<u32>()
        .map_err(|_| format!("`{text}` is not a number"))?;
    KeyLimits::new(KeyLimits::default().render, max_active)
        .map(|limits| limits.max_active)
        .map_err(|e| e.to_string())
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
    let Group::Keys(keys) = cli.command;
    Ok(match keys {
        Keys::Create {
            name,
            render_limit,
            max_active,
            sandbox,
            max_resolution,
            deny,
            max_replay_length,
        } => {
            let defaults = KeyLimits::default();
            let usage = |e: InvalidKeyLimits| AdminError::Usage(e.to_string());
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
            .map_err(usage)?;
            let kind = match sandbox {
                true => KeyKind::Sandbox,
                false => KeyKind::Live,
            };
            Command::Create { name, kind, limits }
        }
        Keys::List { limit } => Command::List { limit },
        Keys::Revoke { id } => Command::Revoke { id },
    })
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

/// Runs `command`; its answer as one JSON object.
pub async fn run(store: &dyn KeyStore, command: &Command) -> Result<Value, AdminError> {
    let failed = |e: &dyn std::fmt::Display| AdminError::Failed(e.to_string());
    match command {
        Command::Help => Ok(help()),
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
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryKeys;

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
            "keys create --name x --color",
            "keys list --limit 0",
            "keys list --limit 1001",
            "keys list extra",
            "keys revoke",
            "keys revoke not-a-uuid",
            "keys revoke 5f0c9a4e-1b2d-4c3e-8f70-0123456789ab more",
            "users list",
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
                "`bg_dim` is not an option that can be denied (one of motion_blur, storyboard, video, skin)",
            ),
            (
                "keys create --name x --max-resolution 8k",
                "one of 720p, 1080p, 1440p, 4k",
            ),
            ("keys revoke x", "`x` is not a key id (a UUID)"),
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

    #[tokio::test]
    async fn the_answers_show_the_key_once() {
        let store = MemoryKeys::default();
        let create = parse(&args("keys create --name ci --sandbox")).unwrap();
        let created = run(&store, &create).await.unwrap();
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

        let listed = run(&store, &Command::List { limit: 10 }).await.unwrap();
        let text = listed.to_string();
        assert!(!text.contains(&key[9..]), "{text}");
        assert!(!text.contains("whsec_"), "{text}");
        assert_eq!(listed["keys"][0]["id"], created["id"]);
        assert_eq!(listed["keys"][0]["revoked_at"], Value::Null);

        let id: KeyId = created["id"].as_str().unwrap().parse().unwrap();
        let revoked = run(&store, &Command::Revoke { id }).await.unwrap();
        assert_eq!(revoked["already_revoked"], false);
        let again = run(&store, &Command::Revoke { id }).await.unwrap();
        assert_eq!(again["already_revoked"], true);
        assert_eq!(again["revoked_at"], revoked["revoked_at"]);

        let unknown = run(&store, &Command::Revoke { id: KeyId::new() }).await;
        assert_eq!(unknown.unwrap_err().exit_code(), 1);
    }
}
