//! Postgres settings on Lambda (docs/DEPLOY.md, "The database secret"): `DATABASE_URL` when
//! set, else the `{username, password}` secret `DB_SECRET_ARN` names, at `DB_HOST`:`DB_PORT`,
//! database `DB_NAME`. The fields are set one by one, so a generated password needs no escaping.

use std::sync::Arc;

use aws_config::SdkConfig;
use serde::Deserialize;
use serde_json::Value;

use crate::adapters::postgres::credentials::CredentialSource;
use crate::adapters::postgres::migrations::AppRole;
use crate::adapters::postgres::{self as db, Tls};
use crate::entry::wiring;
use crate::ports::StoreError;
use crate::support::aws;
use crate::support::config::Config;

const DEFAULT_PORT: u16 = 5432;
const DEFAULT_DATABASE: &str = "osurender";

/// Where the database is, from `DB_HOST`, `DB_PORT` and `DB_NAME`; each falls back on the
/// secret's `host`, `port`, `dbname` (an RDS-managed secret has them) and then the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbEndpoint {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub name: Option<String>,
}

impl DbEndpoint {
    fn from_env() -> Result<Self, StoreError> {
        let port = match env("DB_PORT") {
            Some(port) => Some(
                port.parse()
                    .map_err(|_| StoreError::new(format!("DB_PORT: `{port}` is not a port")))?,
            ),
            None => None,
        };
        Ok(Self {
            host: env("DB_HOST"),
            port,
            name: env("DB_NAME"),
        })
    }
}

/// What a function that connects on its own (migrate, admin) connects with, and the AWS
/// settings it read the secret with.
pub struct OwnConnection {
    pub postgres: tokio_postgres::Config,
    pub tls: Tls,
    pub timeout: std::time::Duration,
    pub sdk: SdkConfig,
}

/// The database settings of `config` (the secret when there is no `DATABASE_URL`); an error
/// says which part failed.
pub async fn own_connection(config: &Config) -> Result<OwnConnection, String> {
    let sdk = aws::sdk_config(config.aws.timeout, config.aws.endpoint_url.as_deref()).await;
    let postgres = postgres_config(config, &sdk)
        .await
        .map_err(|e| e.message().to_owned())?;
    let tls = Tls::from_config(config).map_err(|e| e.message().to_owned())?;
    Ok(OwnConnection {
        postgres,
        tls,
        timeout: config.database.timeout,
        sdk,
    })
}

/// The Postgres settings of this instance; reads the secret (bounded by `AWS_TIMEOUT_MS`, as
/// every SDK call) when there is no `DATABASE_URL`.
pub async fn postgres_config(
    config: &Config,
    sdk: &SdkConfig,
) -> Result<tokio_postgres::Config, StoreError> {
    match (env("DATABASE_URL"), env("DB_SECRET_ARN")) {
        (None, Some(arn)) => {
            let text = secret_text(sdk, &arn, "the database secret").await?;
            secret_postgres_config(&text, &DbEndpoint::from_env()?)
        }
        _ => db::parse_url(&config.database.url),
    }
}

/// The application role migrate makes (`DB_APP_SECRET_ARN`, the `{username, password}` the
/// functions log in with); `None` when unset (the dev server, a stack without one).
pub async fn app_role(config: &Config) -> Result<Option<AppRole>, String> {
    let Some(arn) = env("DB_APP_SECRET_ARN") else {
        return Ok(None);
    };
    let sdk = aws::sdk_config(config.aws.timeout, config.aws.endpoint_url.as_deref()).await;
    let what = "the application role's secret";
    let text = secret_text(&sdk, &arn, what)
        .await
        .map_err(|e| e.message().to_owned())?;
    // Never echo serde's error: it may quote the secret's text.
    let secret: Secret = serde_json::from_str(&text)
        .map_err(|_| format!("{what} is not JSON with string `username` and `password`"))?;
    Ok(Some(AppRole {
        username: secret.username,
        password: secret.password,
    }))
}

/// A secret's `SecretString` (bounded by `AWS_TIMEOUT_MS`, as every SDK call).
async fn secret_text(sdk: &SdkConfig, arn: &str, what: &str) -> Result<String, StoreError> {
    let secret = aws_sdk_secretsmanager::Client::new(sdk)
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            let e = aws_sdk_secretsmanager::error::DisplayErrorContext(e);
            StoreError::new(format!("reading {what}: {e}"))
        })?;
    secret
        .secret_string()
        .map(str::to_owned)
        .ok_or_else(|| StoreError::new(format!("{what} has no SecretString")))
}

#[derive(Deserialize)]
struct Secret {
    username: String,
    password: String,
    host: Option<String>,
    /// A number in RDS-managed secrets, sometimes a string in hand-made ones.
    port: Option<Value>,
    dbname: Option<String>,
}

/// The settings from the secret's JSON and the endpoint variables (which win).
pub fn secret_postgres_config(
    secret: &str,
    endpoint: &DbEndpoint,
) -> Result<tokio_postgres::Config, StoreError> {
    // Never echo serde's error: it may quote the secret's text.
    let secret: Secret = serde_json::from_str(secret).map_err(|_| {
        StoreError::new("the database secret is not JSON with string `username` and `password`")
    })?;
    let host = endpoint
        .host
        .clone()
        .or(secret.host)
        .ok_or_else(|| StoreError::new("DB_HOST is not set and the secret names no host"))?;
    let secret_port = match &secret.port {
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let mut pg = tokio_postgres::Config::new();
    pg.host(&host)
        .port(endpoint.port.or(secret_port).unwrap_or(DEFAULT_PORT))
        .dbname(
            endpoint
                .name
                .as_deref()
                .or(secret.dbname.as_deref())
                .unwrap_or(DEFAULT_DATABASE),
        )
        .user(&secret.username)
        .password(secret.password);
    Ok(pg)
}

/// The secret `postgres_config` read the credentials from, if it did (no `DATABASE_URL`, a
/// `DB_SECRET_ARN`): what the pool re-reads when the database refuses them.
pub fn rotating_secret(sdk: &SdkConfig) -> Option<Arc<dyn CredentialSource>> {
    match (env("DATABASE_URL"), env("DB_SECRET_ARN")) {
        (None, Some(arn)) => Some(wiring::database_secret(sdk, &arn)),
        _ => None,
    }
}

/// A variable that is set and not empty (`sam local` passes declared ones empty).
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::config::Host;

    fn host(pg: &tokio_postgres::Config) -> String {
        match &pg.get_hosts()[0] {
            Host::Tcp(host) => host.clone(),
            other => panic!("unexpected host {other:?}"),
        }
    }

    #[test]
    fn endpoint_variables_win_over_the_secret() {
        let secret = r#"{"username":"app","password":"p@ss:w/rd %?#","host":"db.internal",
                         "port":6543,"dbname":"other","engine":"postgres"}"#;
        let endpoint = DbEndpoint {
            host: Some("proxy.example".into()),
            port: Some(5433),
            name: Some("osurender".into()),
        };
        let pg = secret_postgres_config(secret, &endpoint).unwrap();
        assert_eq!(host(&pg), "proxy.example");
        assert_eq!(pg.get_ports(), [5433]);
        assert_eq!(pg.get_dbname(), Some("osurender"));
        assert_eq!(pg.get_user(), Some("app"));
        // Taken verbatim: no URL, so nothing to escape.
        assert_eq!(pg.get_password(), Some(&b"p@ss:w/rd %?#"[..]));
    }

    #[test]
    fn the_secret_fills_what_the_variables_leave_out() {
        let secret = r#"{"username":"app","password":"pw","host":"db.internal","port":"6543"}"#;
        let pg = secret_postgres_config(secret, &DbEndpoint::default()).unwrap();
        assert_eq!(host(&pg), "db.internal");
        assert_eq!(pg.get_ports(), [6543]);
        assert_eq!(pg.get_dbname(), Some(DEFAULT_DATABASE));

        let pg = secret_postgres_config(
            r#"{"username":"app","password":"pw"}"#,
            &DbEndpoint {
                host: Some("proxy".into()),
                ..DbEndpoint::default()
            },
        )
        .unwrap();
        assert_eq!(pg.get_ports(), [DEFAULT_PORT]);
    }

    #[test]
    fn bad_secrets_fail_without_quoting_them() {
        let endpoint = DbEndpoint::default();
        let error = secret_postgres_config(r#"{"username":"app","password":"hunter2"}"#, &endpoint)
            .unwrap_err();
        assert!(error.to_string().contains("DB_HOST"), "{error}");
        let error = secret_postgres_config(r#"{"user":"app","password":"hunter2"}"#, &endpoint)
            .unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
        assert!(secret_postgres_config("hunter2", &endpoint).is_err());
    }
}
