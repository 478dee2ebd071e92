//! Skins: which ones can be rendered with (`GET /v1/skins`), uploads (`POST /v1/skins/upload`,
//! and the legacy `POST /skins/upload`, which counts its rate limit separately), presigned
//! uploads of large skins and their ingest.
//!
//! Read `upload` for the admission steps, `archive` for what a valid skin is, `store` for where
//! skins live and how a name is claimed race-free, `ingest` for presigned uploads' arrival.

pub mod archive;
pub mod ingest;
pub mod upload;

use crate::app::App;
use crate::domain::client::ClientKey;
use crate::domain::render::SkinName;
use crate::problem::Rejection;
use crate::request::{check_rate_limit, Submission};

pub use ingest::{ingest, ingest_pending, IngestError, IngestOutcome};
pub use upload::{UploadRoute, DEFAULT_SKIN};

/// The limiter's endpoint name of `GET /v1/skins`.
pub const LIST_ENDPOINT: &str = "skins";

/// Most skins a listing reads (ten S3 pages): a bound on the work of one request.
const MAX_LISTED: usize = 10_000;

/// The skins a render may name: `Default` and every uploaded one, sorted.
pub async fn list_skins(app: &App, client: &ClientKey) -> Submission<Vec<SkinName>> {
    let rate = match check_rate_limit(app, LIST_ENDPOINT, app.config.rate_limits.read, client).await
    {
        Ok(rate) => rate,
        Err(rejection) => return Submission::refused(rejection),
    };
    let outcome = app
        .skins
        .list(MAX_LISTED)
        .await
        .map(|uploaded| {
            let mut names = uploaded;
            names.push(SkinName::default());
            names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
            names.dedup();
            names
        })
        .map_err(|error| {
            tracing::error!(%error, "listing skins failed");
            Rejection::SkinStorageUnavailable
        });
    Submission { outcome, rate }
}
