//! The secret store port: shared secrets kept in a store that rotates them (Secrets Manager,
//! adapters/secrets.rs), read with the version they replaced.

use async_trait::async_trait;

use super::StoreError;

/// A secret's value and the one it replaced, both still accepted while a rotation is under way.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretVersions {
    pub current: String,
    /// `None` when the secret was never rotated.
    pub previous: Option<String>,
}

#[async_trait]
pub trait SecretStore: Send + Sync {
    /// The versions of the secret `id` (an ARN or a name) as they are now.
    async fn versions(&self, id: &str) -> Result<SecretVersions, StoreError>;
}
