//! Shared secrets in Secrets Manager: a secret's `AWSCURRENT` and `AWSPREVIOUS` versions (the
//! staging labels a rotation moves), each a plain `SecretString`; and the database secret's
//! versions, as credentials to try when the database refuses the instance's.

use async_trait::async_trait;
use aws_sdk_secretsmanager::error::DisplayErrorContext;

use crate::adapters::postgres::credentials::{CredentialSource, Credentials};
use crate::ports::secrets::{SecretStore, SecretVersions};
use crate::ports::StoreError;

pub struct SecretsManagerStore {
    client: aws_sdk_secretsmanager::Client,
}

impl SecretsManagerStore {
    pub fn new(client: aws_sdk_secretsmanager::Client) -> Self {
        Self { client }
    }

    /// The `SecretString` of the version labelled `stage`; `None` when no version has it (a
    /// secret never rotated has no `AWSPREVIOUS`).
    async fn stage(&self, id: &str, stage: &str) -> Result<Option<String>, StoreError> {
        let read = self
            .client
            .get_secret_value()
            .secret_id(id)
            .version_stage(stage)
            .send()
            .await;
        match read {
            Ok(value) => value
                .secret_string
                .map(Some)
                .ok_or_else(|| StoreError::new(format!("{stage} of `{id}` has no SecretString"))),
            Err(error)
                if stage != CURRENT
                    && error
                        .as_service_error()
                        .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            // A read changes nothing: whatever went wrong, nothing was applied.
            Err(error) => Err(StoreError::new(format!(
                "reading {stage} of `{id}`: {}",
                DisplayErrorContext(error)
            ))),
        }
    }
}

const CURRENT: &str = "AWSCURRENT";
const PREVIOUS: &str = "AWSPREVIOUS";
/// The version a rotation is installing (before it becomes `AWSCURRENT`).
const PENDING: &str = "AWSPENDING";

#[async_trait]
impl SecretStore for SecretsManagerStore {
    /// Both versions at once; each call is bounded by `AWS_TIMEOUT_MS` like every SDK call.
    async fn versions(&self, id: &str) -> Result<SecretVersions, StoreError> {
        let (current, previous) = tokio::join!(self.stage(id, CURRENT), self.stage(id, PREVIOUS));
        Ok(SecretVersions {
            current: current?.ok_or_else(|| StoreError::new(format!("`{id}` has no {CURRENT}")))?,
            previous: previous?,
        })
    }
}

/// The database secret (`DB_SECRET_ARN`: JSON with `username` and `password`), read again when
/// the database refuses the instance's credentials (adapters/postgres/credentials.rs).
pub struct DatabaseSecret {
    store: SecretsManagerStore,
    id: String,
}

impl DatabaseSecret {
    pub fn new(client: aws_sdk_secretsmanager::Client, id: impl Into<String>) -> Self {
        Self {
            store: SecretsManagerStore::new(client),
            id: id.into(),
        }
    }
}

#[derive(serde::Deserialize)]
struct UserAndPassword {
    username: String,
    password: String,
}

#[async_trait]
impl CredentialSource for DatabaseSecret {
    /// Its `AWSCURRENT` version; then, while a rotation is under way, `AWSPENDING` (the new
    /// password, set in the database before it becomes current); then `AWSPREVIOUS` (what a
    /// proxy may still hold). Only `AWSCURRENT` must be readable; a version that is no
    /// `{username, password}` JSON is skipped, never quoted.
    async fn candidates(&self) -> Result<Vec<Credentials>, StoreError> {
        let id = self.id.as_str();
        let (current, pending, previous) = tokio::join!(
            self.store.stage(id, CURRENT),
            self.store.stage(id, PENDING),
            self.store.stage(id, PREVIOUS)
        );
        let current =
            current?.ok_or_else(|| StoreError::new(format!("`{id}` has no {CURRENT}")))?;
        let mut found = Vec::new();
        for (stage, text) in [
            (CURRENT, Ok(Some(current))),
            (PENDING, pending),
            (PREVIOUS, previous),
        ] {
            match text {
                Ok(Some(text)) => match serde_json::from_str::<UserAndPassword>(&text) {
                    Ok(secret) => found.push(Credentials {
                        user: secret.username,
                        password: secret.password.into_bytes(),
                    }),
                    Err(_) => tracing::warn!(
                        stage,
                        "a version of the database secret is not JSON with string `username` \
                         and `password`"
                    ),
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, stage, "could not read a database secret version")
                }
            }
        }
        Ok(found)
    }
}
