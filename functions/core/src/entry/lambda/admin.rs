//! `osurender-admin`: the key, policy and skin commands (keys/admin.rs) against the database the functions use
//! (`DATABASE_URL`, or the secret and `DB_*` variables). On a shell it reads its arguments and
//! answers on stdout; on Lambda (`AWS_LAMBDA_RUNTIME_API` set, docs/DEPLOY.md "API keys") each
//! event `{"command": ["keys", "list"]}` is one command, answered with the same JSON.
//!
//! The answer of `keys create` holds the key: it is printed (or returned) and never logged.

use std::process::ExitCode;

use serde::Deserialize;
use serde_json::Value;

use super::database::own_connection;
use super::{event_loop, Error};
use crate::adapters::postgres::keys::PgKeyStore;
use crate::adapters::postgres::policy::PgPolicyStore;
use crate::adapters::postgres::skins::PgSkinRegistry;
use crate::adapters::postgres::{self as db};
use crate::adapters::s3::S3SkinStore;
use crate::ports::skins::CLAIM_STALE_AFTER;
use crate::support::aws;
use crate::support::config::Config;
use crate::support::telemetry;
use crate::usecases::keys::admin::{self, AdminError, AdminStores, Command, USAGE};

/// The binary's whole `main`: a Lambda function where the runtime API is, else one command
/// from the arguments.
pub async fn admin_main() -> ExitCode {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        return match serve_admin().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("osurender-admin: {error}");
                ExitCode::FAILURE
            }
        };
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run_command(&args).await {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("osurender-admin: {error}");
            if matches!(error, AdminError::Usage(_)) {
                eprintln!("{USAGE}");
            }
            ExitCode::from(error.exit_code())
        }
    }
}

async fn serve_admin() -> Result<(), Error> {
    telemetry::init();
    event_loop(|event: Value, _| admin_event(event)).await
}

#[derive(Deserialize)]
struct AdminEvent {
    command: Vec<String>,
}

/// One Lambda event: `{"command": [...]}`; a failure is the invocation's error, with the
/// message the command line would print.
pub async fn admin_event(event: Value) -> Result<Value, Error> {
    let event: AdminEvent = serde_json::from_value(event).map_err(|_| {
        AdminError::Usage(
            r#"the event must be {"command": ["keys", ...]} (or "pause", "resume", "bans", "skins")"#
                .to_owned(),
        )
    })?;
    Ok(run_command(&event.command).await?)
}

/// Parses `args`, connects (only for a command that needs the database) and runs it.
pub async fn run_command(args: &[String]) -> Result<Value, AdminError> {
    let command = admin::parse(args)?;
    if command == Command::Help {
        return Ok(admin::help());
    }
    let stores = connect().await.map_err(AdminError::Failed)?;
    let admin_stores = AdminStores {
        keys: &stores.keys,
        policy: &stores.policy,
        skins: &stores.skins,
        skin_objects: &stores.skin_objects,
    };
    admin::run(admin_stores, &command).await
}

/// What the commands run against.
struct Stores {
    keys: PgKeyStore,
    policy: PgPolicyStore,
    skins: PgSkinRegistry,
    /// The skin bucket (`SKIN_BUCKET`): only `skins free` calls it.
    skin_objects: S3SkinStore,
}

/// The stores on a pool of one connection to the functions' database, and the skin bucket.
async fn connect() -> Result<Stores, String> {
    // Boxed: inlined, this future nests too deep for the compiler's layout of `main`.
    let config = Config::from_env().map_err(|e| format!("configuration: {e}"))?;
    let own = Box::pin(own_connection(&config)).await?;
    let pool =
        db::pool(own.postgres, &own.tls, 1, own.timeout).map_err(|e| e.message().to_owned())?;
    Ok(Stores {
        keys: PgKeyStore::new(pool.clone()),
        policy: PgPolicyStore::new(pool.clone()),
        skins: PgSkinRegistry::new(pool, CLAIM_STALE_AFTER),
        skin_objects: S3SkinStore::new(aws::s3(&own.sdk), own.sdk, &config.aws.skin_bucket),
    })
}
