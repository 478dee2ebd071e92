//! `POST /skins/upload` on Lambda: the original service's skin upload.

use osurender_core::{lambda, skins};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(skins::legacy_upload_routes(), app).await
}
