//! `POST /v1/skins/upload` and `POST /skins/upload`: a skin's admission, in the spirit of
//! render's (admission.rs). The first failing step decides; the cheap, stateless ones come
//! first, so a refused request spends no quota and touches nothing.
//!
//! | Step | What | Rejection |
//! |---|---|---|
//! | file | a `skin` file named `*.osk`, 1..=`MAX_SKIN_BYTES` | 400 / 413 |
//! | archive | a valid skin archive (archive.rs) | 415 |
//! | name | the `name` field, else the file's stem, trimmed, `^[A-Za-z0-9_ -]{1,128}$` | 422 |
//! | idempotency read | `Idempotency-Key`, as on render (idempotency.rs): a retry of a success gets its 201 (the key is only read) | 400 / 409 / 422 |
//! | rate limit | the route's rate limit (v1 and legacy count separately), then an anonymous client's network's and wide network's (both routes together); then the key is claimed | 429 |
//! | name claim | the name is free, ignoring case: claimed in the registry, race-free; not kept by the operator (reserved, or its skin removed) | 409 |
//! | storage | stored as `skins/{name}.osk`, never over an existing object | 409 / 503 |
//!
//! Skins too large for a request ask for a presigned upload instead (`request_upload`): the
//! same steps as far as they apply, then S3 takes the file and `ingest` checks the archive,
//! claims the name and stores it.

use std::time::{Duration, SystemTime};

use axum::http::HeaderValue;
use bytes::Bytes;
use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::domain::archive::{self, ArchiveError, ArchiveLimits};
use crate::domain::caller::Caller;
use crate::domain::deadline;
use crate::domain::form::{last_field, BodyStream, FormSpec, TextValue, UploadedFile};
use crate::domain::hash::RequestHash;
use crate::domain::rate::RateLimit;
use crate::domain::render::{FieldError, SkinName};
use crate::ports::idempotency::{Claim as KeyClaim, IdempotencyKey, Reply, StoredResponse};
use crate::ports::replays::StorageError;
use crate::ports::skins::PresignedPost;
use crate::ports::skins::{
    content_id, incoming_content_id, incoming_key, Claim, Copied, NameClaim, NameState,
    ObjectVersion,
};
use crate::ports::StoreError;
use crate::support::config::Config;
use crate::support::metrics;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::idempotency::{self, Begin};
use crate::usecases::request::{
    check_file, check_rate_windows, read_form, Counted, FormUpload, Submission, Window,
};
use crate::usecases::skins::lookup_failed;
/// The two upload routes: one behaviour, separate rate-limit counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadRoute {
    /// `POST /v1/skins/upload`.
    V1,
    /// `POST /skins/upload`, the original service's path.
    Legacy,
}

impl UploadRoute {
    /// The limiter's endpoint name.
    pub fn endpoint(self) -> &'static str {
        match self {
            Self::V1 => "skins-upload",
            Self::Legacy => "legacy-skins-upload",
        }
    }

    fn limit(self, config: &Config) -> RateLimit {
        match self {
            Self::V1 => config.rate_limits.skins_upload,
            Self::Legacy => config.rate_limits.legacy_skins_upload,
        }
    }

    /// The rate limit's windows: the route's own for the client, then an anonymous client's
    /// network's and wide network's, which both routes count together (a name squatted by either
    /// path is squatted).
    fn windows(self, config: &Config) -> [Window; 3] {
        let limits = &config.rate_limits;
        [
            Window {
                endpoint: self.endpoint(),
                limit: self.limit(config),
                counted: Counted::Client,
            },
            Window {
                endpoint: SKINS_UPLOAD_NETWORK_ENDPOINT,
                limit: limits.skins_upload_network,
                counted: Counted::Network,
            },
            Window {
                endpoint: SKINS_UPLOAD_WIDE_NETWORK_ENDPOINT,
                limit: limits.skins_upload_wide_network,
                counted: Counted::WideNetwork,
            },
        ]
    }
}

/// The uploads of one anonymous network, by either route, counted together.
pub const SKINS_UPLOAD_NETWORK_ENDPOINT: &str = "skins-upload-network";
/// The uploads of one anonymous wide network, by either route, counted together.
pub const SKINS_UPLOAD_WIDE_NETWORK_ENDPOINT: &str = "skins-upload-wide-network";

/// The skin every renderer has; no upload may take its name.
pub use crate::domain::render::DEFAULT_SKIN;

/// How long a presigned upload may start: long enough for a slow start on a large file, short
/// enough that a leaked form is soon useless.
pub const PRESIGNED_UPLOAD_TTL: Duration = Duration::from_secs(15 * 60);

/// The smallest zip there is (an empty end record); a declared size below it cannot be a skin.
pub const MIN_ARCHIVE_BYTES: u64 = 22;

/// The file's form field.
const SKIN_FIELD: &str = "skin";
/// The optional name field.
const NAME_FIELD: &str = "name";

/// `idempotency_key`: the request's `Idempotency-Key` header, if any.
pub async fn upload_skin<S: BodyStream>(
    app: &App,
    caller: &Caller,
    route: UploadRoute,
    idempotency_key: Option<&HeaderValue>,
    upload: FormUpload<S>,
) -> Submission<Reply<SkinName>> {
    let validated = async {
        let (skin, name) = validate_upload(app, upload).await?;
        let key = idempotency_key.map(IdempotencyKey::parse).transpose()?;
        Ok::<_, Rejection>((skin, name, key))
    };
    let (skin, name, key) = match validated.await {
        Ok(valid) => valid,
        Err(rejection) => return Submission::refused(rejection),
    };
    let request_hash = RequestHash::of(&[&skin.bytes, name.as_str().as_bytes()]);
    let claim = key.map(|key| {
        KeyClaim::new(
            caller.client(),
            route.endpoint(),
            key,
            app.config.http.request_deadline,
        )
    });
    match idempotency::look_up(app, claim.as_ref(), &request_hash).await {
        Ok(Some(response)) => return Submission::replayed(response),
        Ok(None) => {}
        Err(rejection) => return Submission::refused(rejection),
    }
    let rate = match check_rate_windows(app, caller, &route.windows(&app.config)).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = match idempotency::claim(app, claim, &request_hash).await {
        Ok(Begin::Run(claim)) => store_keyed(app, skin, name, claim).await.map(Reply::Fresh),
        Ok(Begin::Replay(response)) => Ok(Reply::Replayed(response)),
        Err(rejection) => Err(rejection),
    };
    Submission { outcome, rate }
}

/// The name claim and the storage of a request holding its key's claim, if it has a key, and
/// then the key completed or released as their outcome says.
async fn store_keyed(
    app: &App,
    skin: UploadedFile,
    name: SkinName,
    claim: Option<KeyClaim>,
) -> Result<SkinName, Rejection> {
    let (outcome, settled) = store_upload(app, skin, name, &claim).await;
    if let Some(claim) = &claim {
        match (&outcome, settled) {
            (_, Settled::KeyCompleted) => {}
            (Ok(name), Settled::KeyOpen) => {
                idempotency::complete(app, claim, &uploaded_response(name)).await
            }
            // A refusal, or a stored skin whose name (and key) could not be confirmed, frees
            // the key: a retry runs afresh (and finds its own content stored: 201).
            (_, Settled::KeyOpen | Settled::Unconfirmed) => idempotency::release(app, claim).await,
            // A skin that may be stored keeps the key: a retry waits for it to go stale, then
            // runs again and finds its own content stored (201).
            (_, Settled::Unknown) => {}
        }
    }
    outcome
}

/// What became of an upload's idempotency key in the name claim and the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    /// Completed with the name's confirmation.
    KeyCompleted,
    /// Still the request's to complete (a success) or release (a refusal).
    KeyOpen,
    /// The skin is stored but its name (and key) could not be confirmed. Releasing the key is
    /// safe even if the confirmation is still on its way: it confirms only while the key is
    /// the request's claim.
    Unconfirmed,
    /// The skin may be stored: the key is kept.
    Unknown,
}

/// The name claim and the storage, with the key's claim (if any).
async fn store_upload(
    app: &App,
    skin: UploadedFile,
    name: SkinName,
    key: &Option<KeyClaim>,
) -> (Result<SkinName, Rejection>, Settled) {
    let response = uploaded_response(&name);
    let completes = key.as_ref().map(|key| (key, &response));
    let content = Content::Bytes(skin.bytes);
    let (outcome, settled) = match publish(app, &name, content, completes).await {
        Ok(Published::Confirmed) if key.is_some() => (Ok(name), Settled::KeyCompleted),
        Ok(Published::Confirmed | Published::AlreadyStored) => (Ok(name), Settled::KeyOpen),
        Ok(Published::Unconfirmed) => (Ok(name), Settled::Unconfirmed),
        Err(error @ PublishError::Unknown(_)) => (Err(error.into_rejection()), Settled::Unknown),
        Err(error) => (Err(error.into_rejection()), Settled::KeyOpen),
    };
    (outcome, settled)
}

/// The response to a stored upload, and to every retry with its idempotency key.
pub fn uploaded_response(name: &SkinName) -> StoredResponse {
    StoredResponse {
        status: 201,
        location: None,
        body: json!({ "skin": name }),
    }
}

/// The stateless checks: the file, the archive, the name.
async fn validate_upload<S: BodyStream>(
    app: &App,
    upload: FormUpload<S>,
) -> Result<(UploadedFile, SkinName), Rejection> {
    let spec = FormSpec {
        file_field: SKIN_FIELD,
        max_file_bytes: app.config.skins.max_direct_bytes,
    };
    let form = read_form(spec, upload).await?;
    let file = check_file(form.file, &spec, ".osk")?;
    check_archive(file.bytes.clone())
        .await
        .map_err(|e| Rejection::InvalidSkin(format!("not a valid skin: {e}")))?;
    let name = check_name(&form.fields, &file.file_name)?;
    Ok((file, name))
}

/// The archive check, off the async threads: inflating can take up to a second of CPU.
async fn check_archive(bytes: Bytes) -> Result<(), ArchiveError> {
    let checked =
        tokio::task::spawn_blocking(move || archive::inspect(&bytes, &ArchiveLimits::default()))
            .await;
    match checked {
        Ok(verdict) => verdict.map(drop),
        Err(error) => {
            tracing::error!(%error, "skin archive check did not finish");
            Err(ArchiveError::Corrupt(
                "the archive could not be checked".into(),
            ))
        }
    }
}

/// The name: the last `name` field, or else the file name without its `.osk` (and any path a
/// client sent with it).
fn check_name(fields: &[(String, TextValue)], file_name: &str) -> Result<SkinName, Rejection> {
    let invalid =
        |reason: String| Rejection::InvalidField(FieldError::new(NAME_FIELD, reason).to_string());
    match last_field(fields, NAME_FIELD) {
        Some(TextValue::Text(name)) => parse_name(name),
        Some(_) => Err(invalid("must be a short UTF-8 text".into())),
        None => {
            let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
            // `check_file` saw the `.osk` (ASCII, so a char boundary) at the end.
            let stem = base
                .get(..base.len().saturating_sub(".osk".len()))
                .unwrap_or_default();
            SkinName::parse(stem).map_err(|e| {
                invalid(format!(
                    "the file name does not make a skin name ({}); send a `name` field",
                    e.reason
                ))
            })
        }
    }
}

fn parse_name(name: &str) -> Result<SkinName, Rejection> {
    SkinName::parse(name)
        .map_err(|e| Rejection::InvalidField(FieldError::new(NAME_FIELD, e.reason).to_string()))
}

/// What `publish` stores as `skins/{name}.osk`.
pub(super) enum Content<'a> {
    /// A direct upload, in memory.
    Bytes(Bytes),
    /// A presigned upload, copied within S3: the version that was checked.
    Incoming {
        key: &'a str,
        version: &'a ObjectVersion,
    },
}

impl Content<'_> {
    /// What the stored object's metadata names this content by.
    fn id(&self) -> String {
        match self {
            Self::Bytes(bytes) => content_id(bytes),
            Self::Incoming { version, .. } => incoming_content_id(version),
        }
    }
}

/// How a skin came to be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Published {
    /// Stored, and its name confirmed (with the key, if one was given).
    Confirmed,
    /// Stored, but the confirmation failed (or its answer was lost): the name's claim goes
    /// stale and whoever takes it over finds the object.
    Unconfirmed,
    /// This very content was stored under the name by an earlier attempt.
    AlreadyStored,
}

/// Why a skin was not published.
#[derive(Debug)]
pub(super) enum PublishError {
    Exists(SkinName),
    /// The operator keeps the name (`NameState::kept_by_operator`).
    Kept(SkinName),
    /// Another upload holds the name, unconfirmed, with other content (or none stored yet):
    /// taken for now; it is free again if that upload never stores.
    Held(SkinName),
    Database(StoreError),
    /// The skin is not stored.
    Storage(StorageError),
    /// The write's answer never came and the object could not be looked at: it may be stored.
    /// The name's claim is kept (it goes stale; whoever takes it over finds the object).
    Unknown(StorageError),
}

impl PublishError {
    pub(super) fn into_rejection(self) -> Rejection {
        match self {
            Self::Exists(name) | Self::Held(name) => Rejection::SkinExists(exists_detail(&name)),
            Self::Kept(name) => Rejection::SkinNameReserved(kept_detail(&name)),
            Self::Database(_) => Rejection::DatabaseUnavailable,
            Self::Storage(_) | Self::Unknown(_) => Rejection::SkinStorageUnavailable,
        }
    }
}

fn exists_detail(name: &SkinName) -> String {
    format!(
        "a skin named `{}` exists already (names compare ignoring case); choose another name",
        name.as_str()
    )
}

/// Also the ingest's refusal of a kept name.
pub(super) fn kept_detail(name: &SkinName) -> String {
    format!(
        "the skin name `{}` is reserved (names compare ignoring case); choose another name",
        name.as_str()
    )
}

/// The name claim and the storage: claim the name, write the object unless one is there,
/// confirm. An object found already there (one the registry does not know, or another fleet's)
/// keeps the name taken for good. A failed write is settled by looking at the object: this very
/// content there is a success (the answer was lost), none releases the claim, and if it cannot
/// be looked at the claim is kept, since the object may be there.
pub(super) async fn publish(
    app: &App,
    name: &SkinName,
    content: Content<'_>,
    completes: Option<(&KeyClaim, &StoredResponse)>,
) -> Result<Published, PublishError> {
    if name.is_default() {
        return Err(PublishError::Exists(name.clone()));
    }
    let claim = app.skin_names.claim(name).await.map_err(|error| {
        tracing::error!(%error, "skin name claim failed");
        PublishError::Database(error)
    })?;
    let content_id = content.id();
    let claim = match claim {
        NameClaim::Claimed(claim) => claim,
        NameClaim::Stored => return Err(PublishError::Exists(name.clone())),
        NameClaim::Kept => return Err(PublishError::Kept(name.clone())),
        NameClaim::Held => return held_name(app, name, &content_id).await,
    };
    let reserve = app.config.http.settle_reserve(app.config.aws.timeout);
    let write = async {
        match content {
            Content::Bytes(bytes) => app.skins.put_new(name, bytes).await,
            Content::Incoming { key, version } => app
                .skins
                .copy_new(key, version, name)
                .await
                .map(|copied| copied == Copied::Stored),
        }
    };
    let written = match deadline::reserving(reserve, write).await {
        Ok(written) => written,
        Err(error) => {
            tracing::error!(%error, skin = name.as_str(), "skin upload failed; looking for it");
            match app.skins.holds(name, &content_id).await {
                Ok(true) => true,
                Ok(false) => {
                    release(app, &claim).await;
                    return Err(PublishError::Storage(error));
                }
                Err(lookup) => {
                    tracing::error!(error = %lookup, skin = name.as_str(), "skin upload unsettled");
                    return Err(PublishError::Unknown(error));
                }
            }
        }
    };
    if !written {
        // Best effort: an unconfirmed claim goes stale and is confirmed by whoever takes it over.
        let _ = confirm(app, &claim, None).await;
        return Err(PublishError::Exists(name.clone()));
    }
    Ok(match confirm(app, &claim, completes).await {
        Ok(()) => Published::Confirmed,
        Err(_) => Published::Unconfirmed,
    })
}

/// The name is held by an upload not confirmed. If that upload is of this very content and
/// stored (an earlier attempt of this request whose answer was lost, and which kept its claim),
/// this upload has succeeded; otherwise the name is taken.
async fn held_name(app: &App, name: &SkinName, content: &str) -> Result<Published, PublishError> {
    match app.skins.holds(name, content).await {
        Ok(true) => Ok(Published::AlreadyStored),
        Ok(false) => Err(PublishError::Held(name.clone())),
        Err(error) => {
            tracing::error!(%error, skin = name.as_str(), "could not look at a held skin name");
            Err(PublishError::Storage(error))
        }
    }
}

/// The claim goes stale and is taken over later if this fails; the name is held till then.
async fn release(app: &App, claim: &Claim) {
    if let Err(error) = app.skin_names.release(claim).await {
        tracing::warn!(%error, skin = claim.name.as_str(), "could not release a skin name");
    }
}

/// Confirms the name (and completes the key in `completes`). The object is in S3 whatever
/// happens here: an unconfirmed claim goes stale, and whoever takes it over finds the object
/// and confirms it then.
async fn confirm(
    app: &App,
    claim: &Claim,
    completes: Option<(&KeyClaim, &StoredResponse)>,
) -> Result<(), StoreError> {
    let confirmed = app.skin_names.confirm(claim, completes).await;
    if let Err(error) = &confirmed {
        tracing::warn!(%error, skin = claim.name.as_str(), "could not confirm a skin name");
    }
    confirmed
}

/// `POST /v1/skins/upload` with a JSON body: a presigned upload for a large skin.
#[derive(Debug, Deserialize)]
struct UploadRequest {
    name: String,
    size: u64,
}

/// What a client needs to upload a large skin to S3 directly.
#[derive(Debug, Serialize)]
pub struct PresignedUpload {
    pub skin: SkinName,
    pub upload: PresignedPost,
    pub expires_at: DateTime<Utc>,
    pub max_bytes: u64,
}

impl metrics::Accepted for PresignedUpload {}

/// The presigned path's admission: the request (400), the size (413, 422), the name (422), the
/// v1 rate limits (429), the name free now (409; `ingest` claims it for real), then a POST
/// policy for `incoming/{upload id}/{name}.osk` of exactly `size` bytes.
pub async fn request_upload(
    app: &App,
    caller: &Caller,
    body: &[u8],
) -> Submission<PresignedUpload> {
    let (name, size) = match validate_request(app, body) {
        Ok(valid) => valid,
        Err(rejection) => return Submission::refused(rejection),
    };
    let rate = match check_rate_windows(app, caller, &UploadRoute::V1.windows(&app.config)).await {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = presign(app, name, size).await;
    Submission { outcome, rate }
}

fn validate_request(app: &App, body: &[u8]) -> Result<(SkinName, u64), Rejection> {
    let request: UploadRequest = serde_json::from_slice(body).map_err(|e| {
        Rejection::InvalidBody(format!(
            "expected a JSON object {{\"name\": string, \"size\": bytes}}: {e}"
        ))
    })?;
    let max = app.config.skins.max_presigned_bytes as u64;
    if request.size > max {
        return Err(Rejection::FileTooLarge(format!(
            "skins may be at most {max} bytes"
        )));
    }
    if request.size < MIN_ARCHIVE_BYTES {
        return Err(Rejection::InvalidField(
            FieldError::new(
                "size",
                format!("must be at least {MIN_ARCHIVE_BYTES} bytes"),
            )
            .to_string(),
        ));
    }
    Ok((parse_name(&request.name)?, request.size))
}

async fn presign(app: &App, name: SkinName, size: u64) -> Result<PresignedUpload, Rejection> {
    check_name_free(app, &name).await?;
    let key = incoming_key(&name);
    // Whole seconds: the policy and the answer then state the very same instant.
    let expires_at =
        DateTime::<Utc>::from(SystemTime::now() + PRESIGNED_UPLOAD_TTL).trunc_subsecs(0);
    let upload = app
        .skins
        .presign_post(&key, size, expires_at.into())
        .await
        .map_err(|error| {
            tracing::error!(%error, "could not presign a skin upload");
            Rejection::SkinStorageUnavailable
        })?;
    Ok(PresignedUpload {
        skin: name,
        upload,
        expires_at,
        max_bytes: size,
    })
}

/// A courtesy check, so a client does not upload a large file only to have it refused: the
/// name can still be taken (or reserved) before the upload arrives, which `ingest` settles.
async fn check_name_free(app: &App, name: &SkinName) -> Result<(), Rejection> {
    let exists = || Rejection::SkinExists(exists_detail(name));
    if name.is_default() {
        return Err(exists());
    }
    let state = app.skin_names.state(name).await.map_err(lookup_failed)?;
    if state.kept_by_operator() {
        return Err(Rejection::SkinNameReserved(kept_detail(name)));
    }
    let stored = state != NameState::Free
        || app.skins.exists(name).await.map_err(|error| {
            tracing::error!(%error, "skin lookup failed");
            Rejection::SkinStorageUnavailable
        })?;
    if stored {
        Err(exists())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &str, value: &str) -> (String, TextValue) {
        (name.into(), TextValue::Text(value.into()))
    }

    #[test]
    fn names_come_from_the_field_or_the_file() {
        let name = |fields: &[(String, TextValue)], file: &str| {
            check_name(fields, file).map(|n| n.as_str().to_owned())
        };
        assert_eq!(name(&[], "Cool Skin.osk").unwrap(), "Cool Skin");
        assert_eq!(name(&[], "C:\\skins\\Cool.OSK").unwrap(), "Cool");
        assert_eq!(name(&[text("name", "Other")], "x.y.osk").unwrap(), "Other");
        assert_eq!(
            name(&[text("name", "A"), text("name", "B")], "x.osk").unwrap(),
            "B"
        );
        for (fields, file) in [
            (vec![], "skin.v2.osk"),
            (vec![text("name", "../etc")], "ok.osk"),
            (vec![text("name", "")], "ok.osk"),
            (vec![("name".into(), TextValue::TooLong)], "ok.osk"),
        ] {
            let rejection = check_name(&fields, file).unwrap_err();
            assert_eq!(rejection.code(), "invalid_field", "{fields:?} {file}");
            assert!(
                rejection.detail().starts_with("name:"),
                "{}",
                rejection.detail()
            );
        }
    }

    #[test]
    fn the_default_skin_is_reserved() {
        for name in ["Default", "default", "DEFAULT"] {
            assert!(SkinName::parse(name).unwrap().is_default());
        }
        assert!(!SkinName::parse("Default 2").unwrap().is_default());
    }

    #[test]
    fn routes_count_separately() {
        assert_ne!(UploadRoute::V1.endpoint(), UploadRoute::Legacy.endpoint());
    }
}
