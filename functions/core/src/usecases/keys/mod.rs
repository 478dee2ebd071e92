//! API keys: creating, listing, changing and revoking them (the `osurender-admin`
//! commands, `admin`), recognizing the key of a request (`KeyLookup`, with its per-instance
//! cache), and who a request is from (`caller`).

pub mod admin;
pub mod caller;
pub mod lookup;

use crate::domain::key::SigningSecret;
use crate::domain::key::{ApiKey, KeyId, KeyKind, KeyLimits, KeyName, RandomUnavailable};
use crate::ports::keys::{KeyRecord, KeyStore, KeySummary, NewKey};
use crate::ports::StoreError;

pub use lookup::{KeyLookup, KeyRefusal};

/// A key just created: the key itself exists only here, to be shown once.
#[derive(Debug)]
pub struct CreatedKey {
    pub key: ApiKey,
    pub record: KeyRecord,
}

#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    Random(#[from] RandomUnavailable),
    #[error("storing the key failed: {}", .0.message())]
    Store(StoreError),
    /// The insert was sent and no answer came: the key may be stored, but nobody has seen it.
    #[error(
        "storing the key failed and it may have been stored anyway ({}); it was never shown, \
         so revoke any key `{}` of this moment that `keys list` shows, and create another",
        .0.message(), .1
    )]
    Unknown(StoreError, String),
}

/// Makes a key and its signing secret from the CSPRNG and stores the key's hash.
pub async fn create(
    store: &dyn KeyStore,
    name: KeyName,
    kind: KeyKind,
    limits: KeyLimits,
) -> Result<CreatedKey, CreateError> {
    let key = ApiKey::generate(kind)?;
    let new = NewKey {
        id: KeyId::new(),
        name,
        hash: key.hash(),
        kind,
        limits,
        signing_secret: SigningSecret::generate()?,
    };
    let created_at = store.create(&new).await.map_err(|error| {
        if error.outcome_unknown() {
            CreateError::Unknown(error, new.name.as_str().to_owned())
        } else {
            CreateError::Store(error)
        }
    })?;
    Ok(CreatedKey {
        key,
        record: KeyRecord {
            summary: KeySummary {
                id: new.id,
                name: new.name,
                kind,
                limits,
                created_at,
                revoked_at: None,
            },
            signing_secret: new.signing_secret,
        },
    })
}
