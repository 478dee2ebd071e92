//! The adapters behind the ports: one module per service. SQL lives only in adapters/postgres.

pub mod callback_sender;
pub mod dynamo;
pub mod dynamo_events;
pub mod local_sockets;
pub mod management_api;
#[cfg(any(test, feature = "memory"))]
pub mod memory;
pub mod postgres;
pub mod presign;
pub mod replay_fetch;
pub mod s3;
pub mod secrets;
pub mod sqs;

use std::future::Future;

use crate::domain::deadline;

/// A `/health` probe's call to an AWS service, within the probe's deadline: `Ok` when the
/// service answered, else what failed, with the SDK error's causes.
async fn probe<T, E: std::error::Error>(
    call: impl Future<Output = Result<T, E>>,
) -> Result<(), String> {
    deadline::within(call)
        .await
        .map_err(|expired| expired.to_string())?
        .map(drop)
        .map_err(|e| aws_sdk_s3::error::DisplayErrorContext(e).to_string())
}
