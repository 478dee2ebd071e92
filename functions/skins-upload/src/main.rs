//! `POST /v1/skins/upload` on Lambda: skin uploads, direct or presigned.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::skins::upload_routes(), app).await
}
