//! The dev server's pusher: each open WebSocket of the dev server registers a channel here, and
//! a frame pushed to it goes down that channel to the socket's writer (functions/local). A
//! connection with no channel (closed, or never opened here) is `Gone`, as API Gateway's 410.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::domain::events::ConnectionId;
use crate::ports::events::{PushError, Pushed, Pusher, MAX_FRAME_BYTES};

#[derive(Default)]
pub struct LocalSockets {
    open: Mutex<HashMap<ConnectionId, mpsc::UnboundedSender<String>>>,
}

impl LocalSockets {
    /// A new connection's id: random, as API Gateway's are.
    pub fn new_connection_id(&self) -> ConnectionId {
        let id = uuid::Uuid::new_v4().simple().to_string();
        ConnectionId::parse(&id).expect("32 hex digits are a connection id")
    }

    /// Opens `id`: the frames pushed to it, until `unregister`.
    pub fn register(&self, id: &ConnectionId) -> mpsc::UnboundedReceiver<String> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.open().insert(id.clone(), sender);
        receiver
    }

    /// Closes `id`: a push to it is `Gone` from now on.
    pub fn unregister(&self, id: &ConnectionId) {
        self.open().remove(id);
    }

    fn open(&self) -> MutexGuard<'_, HashMap<ConnectionId, mpsc::UnboundedSender<String>>> {
        // A map of senders has no invariant a panic elsewhere could break.
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl Pusher for LocalSockets {
    async fn push(&self, id: &ConnectionId, frame: &str) -> Result<Pushed, PushError> {
        if frame.len() > MAX_FRAME_BYTES {
            return Err(PushError::TooLarge);
        }
        match self.open().get(id) {
            Some(sender) if sender.send(frame.to_owned()).is_ok() => Ok(Pushed::Delivered),
            _ => Ok(Pushed::Gone),
        }
    }
}
