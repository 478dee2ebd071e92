//! API Gateway's Management API pusher (STUB: being written).

use async_trait::async_trait;

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher};

pub struct ManagementApiPusher {
    endpoint: String,
}

impl ManagementApiPusher {
    pub fn new(_sdk: &aws_config::SdkConfig, endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
        }
    }
}

#[async_trait]
impl Pusher for ManagementApiPusher {
    async fn push(&self, _id: &ConnectionId, _frame: &str) -> Result<Pushed, PushError> {
        unimplemented!()
    }
}
