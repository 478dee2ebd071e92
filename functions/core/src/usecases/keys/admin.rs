//! The `osurender-admin` commands: their grammar, and their run against a key store with one
//! JSON object as the answer. The same on the command line and as a Lambda event
//! (`{"command": ["keys", "create", "--name", "x"]}`); lambda/admin.rs runs them.

use serde_json::{json, Value};

use crate::domain::key::{KeyId, KeyKind, KeyLimits, KeyName};
use crate::domain::RateLimit;
use crate::ports::keys::{KeyStore, KeySummary, Revocation, MAX_LIST};
use crate::usecases::keys::{create, CreatedKey};

pub const USAGE: &str = "\
usage: osurender-admin keys create --name NAME [--render-limit 60/minute] [--max-active 20] [--sandbox]
       osurender-admin keys list [--limit 100]
       osurender-admin keys revoke ID

Database: DATABASE_URL, or DB_SECRET_ARN with DB_HOST/DB_PORT/DB_NAME (as the functions).
Answers one JSON object on stdout; exit 0 ok, 1 failure, 2 usage error.";

const DEFAULT_LIST: usize = 100;

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

fn usage(message: impl Into<String>) -> AdminError {
    AdminError::Usage(message.into())
}

/// The command `args` (without the program's name) spell.
pub fn parse(args: &[String]) -> Result<Command, AdminError> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => Err(usage("no command")),
        ["help" | "--help" | "-h"] => Ok(Command::Help),
        ["keys", "create", options @ ..] => parse_create(options),
        ["keys", "list", options @ ..] => {
            let options = Options::parse(options, &["--limit"], &[])?;
            let limit = match options.value("--limit") {
                None => DEFAULT_LIST,
                Some(text) => text
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LIST).contains(n))
                    .ok_or_else(|| usage(format!("--limit: 1 to {MAX_LIST}, not `{text}`")))?,
            };
            Ok(Command::List { limit })
        }
        ["keys", "revoke", id] => id
            .parse()
            .map(|id| Command::Revoke { id })
            .map_err(|_| usage(format!("`{id}` is not a key id (a UUID)"))),
        ["keys", "revoke", ..] => Err(usage("keys revoke takes one key id")),
        _ => Err(usage(format!("unknown command `{}`", args.join(" ")))),
    }
}

fn parse_create(args: &[&str]) -> Result<Command, AdminError> {
    let options = Options::parse(
        args,
        &["--name", "--render-limit", "--max-active"],
        &["--sandbox"],
    )?;
    let name = options
        .value("--name")
        .ok_or_else(|| usage("keys create needs --name"))?;
    let name = KeyName::parse(name).map_err(|e| usage(format!("--name: {e}")))?;
    let defaults = KeyLimits::default();
    let render = match options.value("--render-limit") {
        None => defaults.render,
        Some(text) => text
            .parse::<RateLimit>()
            .map_err(|e| usage(format!("--render-limit: {e}")))?,
    };
    let max_active = match options.value("--max-active") {
        None => defaults.max_active,
        Some(text) => text
            .parse()
            .map_err(|_| usage(format!("--max-active: `{text}` is not a number")))?,
    };
    let limits = KeyLimits::new(render, max_active).map_err(|e| usage(e.to_string()))?;
    let kind = match options.flag("--sandbox") {
        true => KeyKind::Sandbox,
        false => KeyKind::Live,
    };
    Ok(Command::Create { name, kind, limits })
}

/// `--option value`, `--option=value` and `--flag`, each at most once.
struct Options<'a> {
    values: Vec<(&'a str, &'a str)>,
    flags: Vec<&'a str>,
}

impl<'a> Options<'a> {
    fn parse(args: &[&'a str], with_value: &[&str], flags: &[&str]) -> Result<Self, AdminError> {
        let mut parsed = Self {
            values: Vec::new(),
            flags: Vec::new(),
        };
        let mut rest = args.iter();
        while let Some(&arg) = rest.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (arg, None),
            };
            if parsed.flags.contains(&name) || parsed.value(name).is_some() {
                return Err(usage(format!("{name} given twice")));
            }
            if with_value.contains(&name) {
                let value = match inline {
                    Some(value) => value,
                    None => rest
                        .next()
                        .copied()
                        .ok_or_else(|| usage(format!("{name} needs a value")))?,
                };
                parsed.values.push((name, value));
            } else if flags.contains(&name) && inline.is_none() {
                parsed.flags.push(name);
            } else {
                return Err(usage(format!("unexpected `{arg}`")));
            }
        }
        Ok(parsed)
    }

    fn value(&self, name: &str) -> Option<&'a str> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    fn flag(&self, name: &str) -> bool {
        self.flags.contains(&name)
    }
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
