//! `migrate` on Lambda: applies the database migrations, as a CloudFormation custom resource
//! on every deploy or by hand. Straight into the runtime loop: nothing that can fail comes
//! before it, so every CloudFormation event gets its answer.

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    lambda::serve_migrations().await
}
