//! The dev server's pusher (STUB: being written).

use async_trait::async_trait;

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher};

#[derive(Default)]
pub struct LocalSockets {}

#[async_trait]
impl Pusher for LocalSockets {
    async fn push(&self, _id: &ConnectionId, _frame: &str) -> Result<Pushed, PushError> {
        unimplemented!()
    }
}
