//! Shared secrets in Secrets Manager: a secret's `AWSCURRENT` and `AWSPREVIOUS` versions (the
//! staging labels a rotation moves), each a plain `SecretString`.

use async_trait::async_trait;
use aws_sdk_secretsmanager::error::DisplayErrorContext;

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
