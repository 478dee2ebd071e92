//! `POST /skins/upload` on Lambda: the original service's skin upload.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::skins::legacy_upload_routes(), app).await
}
