//! The second half of a presigned upload: an object that arrived under `incoming/` is checked
//! exactly as a direct upload is and published as `skins/{name}.osk`, or refused. Either way
//! the incoming object is deleted; only a failure of Postgres or S3 leaves it for a retry (the
//! next poll locally, the S3 event's retries on AWS; the bucket's lifecycle rule ends it).
//!
//! On AWS an S3-event function calls `ingest` for each created object (with the event's key
//! URL-decoded); the dev server polls the prefix with `ingest_pending`.

use super::store::{name_of_incoming_key, Fetched, INCOMING_PREFIX};
use super::upload::{check_archive, publish, PublishError};
use crate::app::App;
use crate::db::DbError;
use crate::domain::SkinName;
use crate::replays::StorageError;

#[derive(Debug, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Now listed and renderable.
    Published(SkinName),
    /// Not a valid skin, too large, a name taken meanwhile, or a key no upload was given: the
    /// object is deleted.
    Refused(String),
    /// The object was gone already (another run ingested it).
    Gone,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Not an object this service ingests: left alone.
    #[error("s3://{bucket}/{key} is not an incoming skin upload")]
    NotIncoming { bucket: String, key: String },
    #[error(transparent)]
    Database(#[from] DbError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub async fn ingest(app: &App, bucket: &str, key: &str) -> Result<IngestOutcome, IngestError> {
    if bucket != app.config.skin_bucket || !key.starts_with(INCOMING_PREFIX) {
        return Err(IngestError::NotIncoming {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        });
    }
    let outcome = match decide(app, key).await? {
        Decision::Gone => return Ok(IngestOutcome::Gone),
        Decision::Done(outcome) => outcome,
    };
    app.skins.delete(key).await?;
    match &outcome {
        IngestOutcome::Published(name) => {
            tracing::info!(skin = name.as_str(), key, "skin published")
        }
        IngestOutcome::Refused(reason) => tracing::info!(%reason, key, "skin upload refused"),
        IngestOutcome::Gone => {}
    }
    Ok(outcome)
}

enum Decision {
    Done(IngestOutcome),
    Gone,
}

/// Everything but the deletion: what becomes of the object at `key`.
async fn decide(app: &App, key: &str) -> Result<Decision, IngestError> {
    let refused = |reason: String| Ok(Decision::Done(IngestOutcome::Refused(reason)));
    let Some(name) = name_of_incoming_key(key) else {
        return refused("the key names no skin upload".into());
    };
    let max = app.config.max_skin_upload_bytes;
    let bytes = match app.skins.fetch(key, max).await? {
        Fetched::Bytes(bytes) => bytes,
        Fetched::TooLarge => return refused(format!("larger than {max} bytes")),
        Fetched::Gone => return Ok(Decision::Gone),
    };
    if let Err(error) = check_archive(bytes.clone()).await {
        return refused(format!("not a valid skin: {error}"));
    }
    match publish(app, &name, bytes, None).await {
        Ok(_) => Ok(Decision::Done(IngestOutcome::Published(name))),
        Err(PublishError::Exists(name)) => {
            refused(format!("a skin named `{}` exists already", name.as_str()))
        }
        Err(PublishError::Database(error)) => Err(error.into()),
        Err(PublishError::Storage(error) | PublishError::Unknown(error)) => Err(error.into()),
    }
}

/// How many incoming objects one poll looks at; the rest wait for the next.
const PENDING_BATCH: usize = 100;

/// Ingests what waits under `incoming/` (the dev server's stand-in for S3 events). Returns how
/// many objects were dealt with; failures are logged and retried on the next call.
pub async fn ingest_pending(app: &App) -> Result<usize, StorageError> {
    let keys = app.skins.list_incoming(PENDING_BATCH).await?;
    let mut done = 0;
    for key in &keys {
        match ingest(app, &app.config.skin_bucket, key).await {
            Ok(_) => done += 1,
            Err(error) => tracing::warn!(%error, key, "skin ingest failed; will retry"),
        }
    }
    Ok(done)
}
