//! The render queue.

use super::*;

/// The render queue: what was sent, in order.
pub struct MemoryQueue {
    calls: Calls,
    sent: Mutex<Vec<OutboxEvent>>,
    down: Outage,
}

impl MemoryQueue {
    pub(super) fn new(calls: Calls) -> Self {
        Self {
            calls,
            sent: Mutex::default(),
            down: Outage::default(),
        }
    }

    pub fn sent_jobs(&self) -> Vec<JobId> {
        lock(&self.sent).iter().map(|event| event.job_id).collect()
    }

    /// Publishing fails until told otherwise.
    pub fn set_down(&self, down: bool) {
        self.down.set(down);
    }
}

#[async_trait]
impl EventPublisher for MemoryQueue {
    async fn publish(&self, events: &[OutboxEvent]) -> Published {
        self.calls.record("queue.publish");
        if self.down.is_down() {
            return Published {
                sent: Vec::new(),
                failed: events
                    .iter()
                    .map(|e| (e.id, "the queue is down".to_owned()))
                    .collect(),
            };
        }
        lock(&self.sent).extend(events.iter().cloned());
        Published {
            sent: events.iter().map(|e| e.id).collect(),
            failed: Vec::new(),
        }
    }
}
