//! The adapters behind the ports: one module per service. SQL lives only in adapters/postgres.

pub mod callback_sender;
pub mod dynamo;
#[cfg(any(test, feature = "memory"))]
pub mod memory;
pub mod postgres;
pub mod presign;
pub mod s3;
pub mod secrets;
pub mod sqs;
