//! AWS SDK clients, built once per process. `AWS_ENDPOINT_URL` (`Aws::endpoint_url`)
//! points them at a local stand-in such as moto or LocalStack.

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

/// The shared configuration; `endpoint` overrides the SDK's own endpoint resolution.
pub async fn sdk_config(timeout: Duration, endpoint: Option<&str>) -> SdkConfig {
    let loader = aws_config::defaults(BehaviorVersion::latest()).timeout_config(
        TimeoutConfig::builder()
            .connect_timeout(timeout)
            .operation_timeout(timeout)
            .build(),
    );
    match endpoint {
        Some(url) => loader.endpoint_url(url),
        None => loader,
    }
    .load()
    .await
}

pub fn dynamodb(config: &SdkConfig) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(config)
}

/// Path-style addressing when an endpoint is overridden: stand-ins do not serve
/// `bucket.host` virtual hosts.
pub fn s3(config: &SdkConfig) -> aws_sdk_s3::Client {
    let s3_config = aws_sdk_s3::config::Builder::from(config)
        .force_path_style(config.endpoint_url().is_some())
        .build();
    aws_sdk_s3::Client::from_conf(s3_config)
}
