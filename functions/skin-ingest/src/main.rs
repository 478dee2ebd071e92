//! `skin-ingest` on Lambda, on S3 `ObjectCreated` under `incoming/`: ingests presigned skin
//! uploads.

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::run_events(app, lambda::ingest_skins).await
}
