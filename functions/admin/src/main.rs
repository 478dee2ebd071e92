//! `osurender-admin`: creates, lists, changes and revokes API keys (docs/API.md, "API keys"), runs the
//! operator's controls and removes and reserves skin names (docs/API.md, "Removing and reserving skin
//! names"). On Lambda (`AWS_LAMBDA_RUNTIME_API` set) the same commands arrive as events
//! (docs/DEPLOY.md).

use std::process::ExitCode;

use osurender_core::entry::lambda;

#[tokio::main]
async fn main() -> ExitCode {
    lambda::admin_main().await
}
