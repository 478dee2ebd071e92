//! The SQS render queue the outbox publishes to (`SendMessageBatch`, ten messages a call), and
//! the dispatcher's wake queue.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures_util::future::join_all;
use tokio::sync::OnceCell;

use crate::domain::deadline;
use crate::ports::health::Dependency;
use crate::ports::outbox::OutboxEvent;
use crate::ports::queue::EventPublisher;
use crate::ports::queue::Published;
use crate::ports::wake::{delay_secs, DispatcherWake};
use crate::ports::StoreError;
/// SQS takes at most ten entries per `SendMessageBatch`.
const SQS_BATCH: usize = 10;

/// The render queue by URL, or by name with the URL looked up once per instance.
pub struct SqsRenderQueue {
    client: aws_sdk_sqs::Client,
    name: String,
    url: OnceCell<String>,
}

impl SqsRenderQueue {
    pub fn new(client: aws_sdk_sqs::Client, url: Option<String>, name: &str) -> Self {
        Self {
            client,
            name: name.to_owned(),
            url: url.map(OnceCell::from).unwrap_or_default(),
        }
    }

    /// A failed lookup is not cached: the next call tries again.
    async fn url(&self) -> Result<&str, String> {
        self.url
            .get_or_try_init(|| async {
                let lookup = self.client.get_queue_url().queue_name(&self.name).send();
                let found = deadline::within(lookup)
                    .await
                    .map_err(|expired| expired.to_string())?
                    .map_err(|e| {
                        format!(
                            "looking up queue `{}`: {}",
                            self.name,
                            DisplayErrorContext(e)
                        )
                    })?;
                found
                    .queue_url
                    .ok_or_else(|| format!("queue `{}` has no URL", self.name))
            })
            .await
            .map(String::as_str)
    }

    async fn send_batch(&self, url: &str, events: &[OutboxEvent]) -> Published {
        let mut entries = Vec::with_capacity(events.len());
        for event in events {
            match entry(event) {
                Ok(entry) => entries.push(entry),
                Err(error) => return all_failed(events, &format!("building the message: {error}")),
            }
        }
        let send = self
            .client
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send();
        let sent = match deadline::within(send).await {
            Ok(sent) => sent,
            Err(expired) => return all_failed(events, &expired.to_string()),
        };
        match sent {
            Ok(output) => Published {
                sent: output
                    .successful
                    .iter()
                    .filter_map(|ok| ok.id.parse().ok())
                    .collect(),
                failed: output
                    .failed
                    .iter()
                    .filter_map(|bad| {
                        let reason =
                            format!("{}: {}", bad.code, bad.message.as_deref().unwrap_or(""));
                        bad.id.parse().ok().map(|id| (id, reason))
                    })
                    .collect(),
            },
            Err(error) => all_failed(events, &DisplayErrorContext(error).to_string()),
        }
    }
}

/// One message per event: the body carries the event id with the payload, and so does an
/// attribute, so consumers can drop a redelivered event without parsing the body.
fn entry(
    event: &OutboxEvent,
) -> Result<SendMessageBatchRequestEntry, aws_sdk_sqs::error::BuildError> {
    let attribute = |data_type: &str, value: String| {
        MessageAttributeValue::builder()
            .data_type(data_type)
            .string_value(value)
            .build()
    };
    SendMessageBatchRequestEntry::builder()
        .id(event.id.to_string())
        .message_body(event.message_body())
        .message_attributes("event_id", attribute("Number", event.id.to_string())?)
        .message_attributes("event_type", attribute("String", event.event_type.clone())?)
        // The job's fair client: a fair queue serves one client's burst no sooner than others'.
        .set_message_group_id(event.group.clone())
        .build()
}

fn all_failed(events: &[OutboxEvent], reason: &str) -> Published {
    Published {
        sent: Vec::new(),
        failed: events.iter().map(|e| (e.id, reason.to_owned())).collect(),
    }
}

#[async_trait]
impl EventPublisher for SqsRenderQueue {
    async fn publish(&self, events: &[OutboxEvent]) -> Published {
        let url = match self.url().await {
            Ok(url) => url,
            Err(error) => return all_failed(events, &error),
        };
        let batches = join_all(
            events
                .chunks(SQS_BATCH)
                .map(|batch| self.send_batch(url, batch)),
        )
        .await;
        batches
            .into_iter()
            .fold(Published::default(), |mut all, batch| {
                all.sent.extend(batch.sent);
                all.failed.extend(batch.failed);
                all
            })
    }
}

#[async_trait]
impl Dependency for SqsRenderQueue {
    fn name(&self) -> &'static str {
        "sqs"
    }

    async fn check(&self) -> Result<(), String> {
        let url = self.url().await?;
        super::probe(self.client.get_queue_attributes().queue_url(url).send()).await
    }
}

/// The dispatcher's wake queue: a wake is one message, held back by SQS for its delay; its
/// body is not read (any message is a reason to sweep).
pub struct SqsWake {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsWake {
    pub fn new(client: aws_sdk_sqs::Client, url: String) -> Self {
        Self { client, url }
    }
}

#[async_trait]
impl DispatcherWake for SqsWake {
    async fn wake(&self, after: Duration) -> Result<(), StoreError> {
        let send = self
            .client
            .send_message()
            .queue_url(&self.url)
            .delay_seconds(delay_secs(after))
            .message_body(r#"{"wake":"callbacks"}"#)
            .send();
        match deadline::within(send).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(StoreError::new(format!(
                "waking the dispatcher: {}",
                DisplayErrorContext(error)
            ))),
            Err(expired) => Err(StoreError::unknown(format!(
                "waking the dispatcher: {expired}"
            ))),
        }
    }
}
