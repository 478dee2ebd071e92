//! Stands in for the wake queue's event source on AWS (template.yaml, the dispatcher's `Wake`
//! event): long-polls `CALLBACK_WAKE_QUEUE_URL`, deletes what it received, and runs the
//! callback sweep as the dispatcher does on an SQS event (then asks to be woken for the next
//! callback due).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use osurender_core::ports::callbacks::CallbackSender;
use osurender_core::App;

use crate::sweep_callbacks;

/// Long polling keeps an idle consumer from spinning; a second bounds a wake's wait.
const POLL_WAIT_SECS: i32 = 1;
/// After a failed receive: no tight loop against a stand-in that is down.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

pub fn spawn(app: App, sqs: aws_sdk_sqs::Client, url: String, sender: Arc<dyn CallbackSender>) {
    tokio::spawn(async move {
        loop {
            match receive(&sqs, &url).await {
                Ok(0) => {}
                Ok(_) => sweep_callbacks(&app, &sender, "callback (woken)").await,
                Err(error) => {
                    tracing::warn!(%error, "reading the wake queue failed");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    });
}

/// Receives and deletes up to ten wakes; how many there were.
async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> anyhow::Result<usize> {
    let received = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(POLL_WAIT_SECS)
        .send()
        .await?;
    let entries: Vec<DeleteMessageBatchRequestEntry> = received
        .messages()
        .iter()
        .enumerate()
        .filter_map(|(n, message)| {
            let handle = message.receipt_handle()?;
            DeleteMessageBatchRequestEntry::builder()
                .id(n.to_string())
                .receipt_handle(handle)
                .build()
                .ok()
        })
        .collect();
    if !entries.is_empty() {
        sqs.delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }
    Ok(received.messages().len())
}
