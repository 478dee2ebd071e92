//! `GET /v1/jobs`, `GET /v1/jobs/{id}` (and its `/video` and `/thumbnail` redirects),
//! `GET /v1/status` and `GET /health` on Lambda: job status reads, the service's load, and the
//! API's health check.

use osurender_core::{entry::lambda, routes};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::serve(routes::jobs::routes(), app).await
}
