//! `POST /v1/render` on Lambda: admits a replay into the render queue.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::render::routes(), app).await
}
