//! The second half of a presigned upload: an object that arrived under `incoming/` is checked
//! exactly as a direct upload is and published as `skins/{name}.osk`, or refused. Either way
//! the incoming object is deleted; only a failure of Postgres or S3 leaves it for a retry (the
//! next poll locally, the S3 event's retries on AWS; the bucket's lifecycle rule ends it).
//!
//! One policy, one ingest. The cheap checks come before anything is read: the name must still
//! be free (a registry read), then the upload key's ingest is claimed in Postgres at the
//! object's ETag (`SkinRegistry::claim_ingest`). So a redelivered S3 event, or the same policy
//! POSTed again (S3 lets a policy be used until it expires), costs a registry read and at most
//! a HEAD, a claim and a DELETE: never an inflation or a copy. The only ingest that runs twice
//! is one whose run failed (it releases its claim) or died (its claim goes stale).
//!
//! On AWS an S3-event function calls `ingest` for each created object (with the event's key
//! URL-decoded); the dev server polls the prefix with `ingest_pending`.
//!
//! The object (up to `MAX_SKIN_UPLOAD_BYTES`, 200 MiB on AWS) is never held in memory: the
//! archive check reads it through ranged GETs — the end records and the central directory,
//! then one streamed pass over the entries — pinned to the version (ETag) it first saw, and
//! publishing copies that same version within S3. The peak memory of an ingest does not grow
//! with the upload (docs/PERFORMANCE.md, "Skin ingest memory").

use std::io::{self, Read};
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::StreamExt;
use tokio::runtime::Handle;

use super::upload::{kept_detail, publish, Content, PublishError};
use crate::domain::archive::{self, ArchiveError, ArchiveLimits, ArchiveSource, SourceError};
use crate::domain::render::SkinName;
use crate::ports::replays::StorageError;
use crate::ports::skins::{
    name_of_incoming_key, ByteChunks, IngestClaim, IngestTicket, NameState, ObjectVersion,
    SkinStore, INCOMING_PREFIX,
};
use crate::ports::StoreError;
use crate::usecases::app::App;

/// How long an upload key's ingest claim is kept: far past its policy (15 minutes) and its S3
/// event's retries, after which its object is gone and no delivery can need it.
pub const CLAIMS_KEPT: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, PartialEq, Eq)]
pub enum IngestOutcome {
    /// Now listed and renderable.
    Published(SkinName),
    /// Not a valid skin, too large, a name taken (or reserved) meanwhile, a key no upload was given, or an
    /// upload key ingested before (its policy POSTed again): the object is deleted.
    Refused(String),
    /// The object was gone already (another run ingested it).
    Gone,
    /// Another run is ingesting this very object: left to it.
    InProgress,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Not an object this service ingests: left alone.
    #[error("s3://{bucket}/{key} is not an incoming skin upload")]
    NotIncoming { bucket: String, key: String },
    #[error(transparent)]
    Database(#[from] StoreError),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub async fn ingest(app: &App, bucket: &str, key: &str) -> Result<IngestOutcome, IngestError> {
    if bucket != app.config.aws.skin_bucket || !key.starts_with(INCOMING_PREFIX) {
        return Err(IngestError::NotIncoming {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        });
    }
    let outcome = match decide(app, key).await? {
        Decision::Gone => return Ok(IngestOutcome::Gone),
        Decision::Running => return Ok(IngestOutcome::InProgress),
        Decision::Done(outcome) => outcome,
    };
    app.skins.delete(key).await?;
    match &outcome {
        IngestOutcome::Published(name) => {
            tracing::info!(skin = name.as_str(), key, "skin published")
        }
        IngestOutcome::Refused(reason) => tracing::info!(%reason, key, "skin upload refused"),
        IngestOutcome::Gone | IngestOutcome::InProgress => {}
    }
    Ok(outcome)
}

enum Decision {
    Done(IngestOutcome),
    Gone,
    Running,
}

fn refused(reason: String) -> Result<Decision, IngestError> {
    Ok(Decision::Done(IngestOutcome::Refused(reason)))
}

/// Everything but the deletion: what becomes of the object at `key`. The cheap checks, then
/// the ingest claimed at the object's ETag, then the check and publication under that claim:
/// finished for good when they decide, released when Postgres or S3 failed them.
async fn decide(app: &App, key: &str) -> Result<Decision, IngestError> {
    let Some(name) = name_of_incoming_key(key) else {
        return refused("the key names no skin upload".into());
    };
    let taken = || format!("a skin named `{}` exists already", name.as_str());
    if name.is_default() {
        return refused(taken());
    }
    match app.skin_names.state(&name).await? {
        NameState::Free => {}
        NameState::Stored => return refused(taken()),
        NameState::Removed | NameState::Reserved { .. } => return refused(kept_detail(&name)),
        // Held by an upload whose outcome is not settled: kept, and tried again later.
        NameState::Held => return Err(held(&name)),
    }
    let Some(version) = app.skins.head(key).await? else {
        return Ok(Decision::Gone);
    };
    let ticket = IngestTicket::new(key);
    let claim = match app.skin_names.claim_ingest(&ticket, &version.etag).await {
        Ok(claim) => claim,
        Err(error) => {
            // The claim may have been made: released (if so), so a retry is not kept waiting.
            let _ = app.skin_names.release_ingest(&ticket).await;
            return Err(error.into());
        }
    };
    match claim {
        IngestClaim::Ours => {}
        IngestClaim::Running => return Ok(Decision::Running),
        IngestClaim::Done => {
            return refused("this upload was ingested already; ask for a new upload".into())
        }
        IngestClaim::Replaced => {
            return refused("another file was posted to this upload; ask for a new upload".into())
        }
    };
    let decided = check_and_publish(app, key, name, &version).await;
    let settled = match &decided {
        Ok(_) => app.skin_names.finish_ingest(&ticket).await,
        Err(_) => app.skin_names.release_ingest(&ticket).await,
    };
    if let Err(error) = settled {
        // The claim goes stale; a later delivery finds the name taken or the object gone.
        tracing::warn!(%error, key, "could not settle a skin ingest claim");
    }
    decided
}

fn held(name: &SkinName) -> IngestError {
    StorageError::new(format!(
        "the name `{}` is held by an unfinished upload",
        name.as_str()
    ))
    .into()
}

/// The claimed ingest of `version` of `key`: the size, the archive, then the name for real.
async fn check_and_publish(
    app: &App,
    key: &str,
    name: SkinName,
    version: &ObjectVersion,
) -> Result<Decision, IngestError> {
    let max = app.config.skins.max_presigned_bytes;
    if version.size > max as u64 {
        return refused(format!("larger than {max} bytes"));
    }
    match check_incoming(app, key, version).await {
        Ok(()) => {}
        // S3 failed, not the archive: left for a retry.
        Err(ArchiveError::Unreadable(reason)) => return Err(StorageError::new(reason).into()),
        Err(error) => return refused(format!("not a valid skin: {error}")),
    }
    let incoming = Content::Incoming { key, version };
    match publish(app, &name, incoming, None).await {
        Ok(_) => Ok(Decision::Done(IngestOutcome::Published(name))),
        Err(PublishError::Exists(name)) => {
            refused(format!("a skin named `{}` exists already", name.as_str()))
        }
        Err(PublishError::Kept(name)) => refused(kept_detail(&name)),
        Err(PublishError::Held(name)) => Err(held(&name)),
        Err(PublishError::Database(error)) => Err(error.into()),
        Err(PublishError::Storage(error) | PublishError::Unknown(error)) => Err(error.into()),
    }
}

/// The archive check of `version` of `key`, on a blocking thread (inflating is CPU work; the
/// reads block on the runtime from there).
async fn check_incoming(app: &App, key: &str, version: &ObjectVersion) -> Result<(), ArchiveError> {
    let mut object = IncomingObject {
        store: app.skins.clone(),
        runtime: Handle::current(),
        key: key.to_owned(),
        version: version.clone(),
    };
    let checked = tokio::task::spawn_blocking(move || {
        archive::inspect_source(&mut object, &ArchiveLimits::default())
    })
    .await;
    match checked {
        Ok(verdict) => verdict.map(drop),
        Err(error) => Err(ArchiveError::Unreadable(format!(
            "the archive check did not finish: {error}"
        ))),
    }
}

/// An incoming object as an `ArchiveSource`. Only for blocking threads: each read runs its S3
/// request to completion on the runtime (`Handle::block_on`, which must not be called from
/// the runtime's own threads).
struct IncomingObject {
    store: Arc<dyn SkinStore>,
    runtime: Handle,
    key: String,
    version: ObjectVersion,
}

impl ArchiveSource for IncomingObject {
    fn size(&self) -> u64 {
        self.version.size
    }

    fn read_at(&mut self, range: Range<u64>) -> Result<Vec<u8>, SourceError> {
        let expected = (range.end - range.start) as usize;
        self.runtime.block_on(async {
            let mut chunks = self
                .store
                .read(&self.key, &self.version, range)
                .await
                .map_err(|e| SourceError(e.message().to_owned()))?;
            let mut bytes = Vec::with_capacity(expected);
            while let Some(chunk) = chunks.next().await {
                bytes.extend_from_slice(&chunk.map_err(|e| SourceError(e.message().to_owned()))?);
                if bytes.len() > expected {
                    return Err(SourceError("S3 sent more than the range asked for".into()));
                }
            }
            Ok(bytes)
        })
    }

    fn stream(&mut self, range: Range<u64>) -> Result<Box<dyn Read + '_>, SourceError> {
        let chunks = self
            .runtime
            .block_on(self.store.read(&self.key, &self.version, range))
            .map_err(|e| SourceError(e.message().to_owned()))?;
        Ok(Box::new(ChunkReader {
            runtime: &self.runtime,
            chunks,
            current: Bytes::new(),
        }))
    }
}

/// `Read` over an object's chunks as S3 sends them: one chunk in memory at a time.
struct ChunkReader<'a> {
    runtime: &'a Handle,
    chunks: ByteChunks,
    current: Bytes,
}

impl Read for ChunkReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.runtime.block_on(self.chunks.next()) {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(error)) => {
                    return Err(io::Error::other(SourceError(error.message().to_owned())))
                }
                None => return Ok(0),
            }
        }
        let count = buf.len().min(self.current.len());
        buf[..count].copy_from_slice(&self.current[..count]);
        self.current.advance(count);
        Ok(count)
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
        match ingest(app, &app.config.aws.skin_bucket, key).await {
            Ok(_) => done += 1,
            Err(error) => tracing::warn!(%error, key, "skin ingest failed; will retry"),
        }
    }
    Ok(done)
}
