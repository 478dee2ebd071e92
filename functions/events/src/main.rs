//! `events` on Lambda: the live events' WebSocket routes (`$connect`, `$disconnect`,
//! `subscribe`, `unsubscribe`, `$default`).

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    app.read_secrets().await;
    lambda::run_events(app, lambda::websocket_event).await
}
