//! `GET /v1/jobs`, `GET /v1/jobs/{id}` and `GET /health` on Lambda: job status reads, and the
//! API's health check.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::jobs::routes(), app).await
}
