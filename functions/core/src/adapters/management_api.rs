//! The pusher on AWS: API Gateway's Management API (`PostToConnection`) of the WebSocket API,
//! at `EVENTS_MANAGEMENT_URL`. Its documented answers: `410 Gone` for a connection that is
//! closed, `403 Forbidden` for a caller without `execute-api:ManageConnections`, `413` for a
//! frame over 128 KiB, `429` when the connection's buffer or the account's rate is full.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_apigatewaymanagement::error::DisplayErrorContext;
use aws_sdk_apigatewaymanagement::operation::post_to_connection::PostToConnectionError;
use aws_sdk_apigatewaymanagement::primitives::Blob;

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher, MAX_FRAME_BYTES};

/// One attempt's limit: the caller bounds a push at 3 s, and a frame not sent is not retried
/// (the next change carries the whole state).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(2500);

pub struct ManagementApiPusher {
    client: aws_sdk_apigatewaymanagement::Client,
}

impl ManagementApiPusher {
    /// A pusher to the API whose Management API is at `endpoint`
    /// (`https://{api-id}.execute-api.{region}.amazonaws.com/{stage}`).
    pub fn new(sdk: &aws_config::SdkConfig, endpoint: &str) -> Self {
        let config = aws_sdk_apigatewaymanagement::config::Builder::from(sdk)
            .endpoint_url(endpoint)
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                    .build(),
            )
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build();
        Self {
            client: aws_sdk_apigatewaymanagement::Client::from_conf(config),
        }
    }
}

#[async_trait]
impl Pusher for ManagementApiPusher {
    async fn push(&self, id: &ConnectionId, frame: &str) -> Result<Pushed, PushError> {
        if frame.len() > MAX_FRAME_BYTES {
            return Err(PushError::TooLarge);
        }
        let sent = self
            .client
            .post_to_connection()
            .connection_id(id.as_str())
            .data(Blob::new(frame.as_bytes()))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(Pushed::Delivered),
            Err(error) => match error.as_service_error() {
                Some(PostToConnectionError::GoneException(_)) => Ok(Pushed::Gone),
                Some(PostToConnectionError::ForbiddenException(_)) => Err(PushError::Forbidden),
                Some(PostToConnectionError::PayloadTooLargeException(_)) => {
                    Err(PushError::TooLarge)
                }
                _ => Err(PushError::Unavailable(
                    DisplayErrorContext(&error).to_string(),
                )),
            },
        }
    }
}
