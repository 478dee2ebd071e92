//! `POST /v1/jobs/{id}/webhook` on Lambda: the render workers' signed reports. Refuses to
//! start without `WEBHOOK_SECRET_ARN` (or `WEBHOOK_SECRET`).

use osurender_core::entry::lambda;
use osurender_core::routes;
use osurender_core::usecases::lifecycle::Verifier;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    let verifier = Verifier::from_app(&app).await?;
    lambda::serve(routes::webhook::routes(verifier), app).await
}
