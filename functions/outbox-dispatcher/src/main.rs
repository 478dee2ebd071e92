//! `outbox-dispatcher` on Lambda, on a schedule: publishes pending outbox events to the
//! render queue and sends API keys' callbacks.

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::run_events(app, lambda::dispatch_outbox).await
}
