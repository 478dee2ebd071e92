//! The dev server's pusher (STUB: being written).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher};

#[derive(Default)]
pub struct LocalSockets {
    open: Mutex<HashMap<ConnectionId, mpsc::UnboundedSender<String>>>,
}

impl LocalSockets {
    pub fn new_connection_id(&self) -> ConnectionId {
        ConnectionId::parse(&uuid::Uuid::new_v4().simple().to_string()[..16]).expect("valid")
    }
    pub fn register(&self, id: &ConnectionId) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.open.lock().unwrap().insert(id.clone(), tx);
        rx
    }
    pub fn unregister(&self, id: &ConnectionId) {
        self.open.lock().unwrap().remove(id);
    }
}

#[async_trait]
impl Pusher for LocalSockets {
    async fn push(&self, id: &ConnectionId, frame: &str) -> Result<Pushed, PushError> {
        let open = self.open.lock().unwrap();
        match open.get(id) {
            Some(tx) if tx.send(frame.to_owned()).is_ok() => Ok(Pushed::Delivered),
            _ => Ok(Pushed::Gone),
        }
    }
}
