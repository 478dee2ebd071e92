//! `outbox-dispatcher` on Lambda, on a schedule: publishes pending outbox events to the
//! render queue and sends API keys' callbacks, with one sender per instance.

use osurender_core::entry::{lambda, wiring};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    let sender = wiring::callback_sender(&app.config);
    let dispatch = |app, event| lambda::dispatch_outbox(app, sender.clone(), event);
    lambda::run_events(app, dispatch).await
}
