//! `GET /v1/skins` on Lambda: the skins a render may name.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::skins::list_routes(), app).await
}
