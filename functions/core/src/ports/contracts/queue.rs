//! The render queue's guarantee (`EventPublisher`): every event handed over is accounted for,
//! by its id, however many at once.

use crate::domain::job::JobId;
use crate::ports::outbox::{OutboxEvent, RENDER_JOB_CREATED};
use crate::ports::queue::{EventPublisher, Published};

pub async fn suite(queue: &dyn EventPublisher) {
    assert_eq!(
        queue.publish(&[]).await,
        Published::default(),
        "nothing to send, nothing sent"
    );
    // More than one SQS batch (10).
    let events: Vec<OutboxEvent> = (1..=23)
        .map(|id| OutboxEvent {
            id,
            job_id: JobId::new(),
            event_type: RENDER_JOB_CREATED.into(),
            payload: serde_json::json!({ "contract": id }),
            attempts: 1,
            // SQS takes a message group on a standard (fair) queue: a client's network or key.
            group: match id % 3 {
                0 => None,
                1 => Some("2001:db8:7::/48".into()),
                _ => Some(format!("key:{}", JobId::new())),
            },
        })
        .collect();
    let published = queue.publish(&events).await;
    let mut sent = published.sent.clone();
    sent.sort_unstable();
    assert_eq!(
        (sent, published.failed),
        ((1..=23).collect::<Vec<i64>>(), Vec::new()),
        "every event is sent, each once, by its id"
    );
}
