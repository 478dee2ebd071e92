//! `migrate` on Lambda: applies the database migrations, as a CloudFormation custom resource
//! on every deploy or by hand.

use osurender_core::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let app = lambda::app().await?;
    lambda::run_events(app, lambda::migrate).await
}
