//! `janitor` on Lambda, on a schedule: ends jobs that will not finish.

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::run_events(app, lambda::run_janitor).await
}
