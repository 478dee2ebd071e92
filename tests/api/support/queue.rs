//! The render queue and the outbox that feeds it: what was delivered, how often, and the
//! queue's own life (deleted and created again for outages).

use std::collections::HashMap;

use serde_json::Value;

use crate::support::app::TestApp;

/// A message taken off the render queue.
pub struct Delivered {
    event_id: i64,
    attribute_event_id: i64,
    pub body: Value,
}

/// How often each event id was delivered; every delivery's attribute matches its body.
pub fn counts(delivered: &[Delivered]) -> HashMap<i64, usize> {
    let mut counts = HashMap::new();
    for message in delivered {
        assert_eq!(message.event_id, message.attribute_event_id);
        assert_eq!(message.body["event_type"], "render_job_created");
        *counts.entry(message.event_id).or_default() += 1;
    }
    counts
}

pub fn exactly_once(ids: &[i64]) -> HashMap<i64, usize> {
    ids.iter().map(|id| (*id, 1)).collect()
}

impl TestApp {
    pub async fn queue_url(&self) -> String {
        self.sqs
            .get_queue_url()
            .queue_name(&self.queue)
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap()
    }

    pub async fn delete_queue(&self) {
        let url = self.queue_url().await;
        self.sqs.delete_queue().queue_url(url).send().await.unwrap();
    }

    pub async fn create_queue(&self) {
        self.sqs
            .create_queue()
            .queue_name(&self.queue)
            .send()
            .await
            .unwrap();
    }

    /// Everything on the queue, received and deleted until two polls come back empty.
    pub async fn drain_queue(&self) -> Vec<Delivered> {
        let url = self.queue_url().await;
        let mut delivered = Vec::new();
        let mut empty_polls = 0;
        while empty_polls < 2 {
            let received = self
                .sqs
                .receive_message()
                .queue_url(&url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .unwrap();
            if received.messages().is_empty() {
                empty_polls += 1;
            }
            for message in received.messages() {
                let body: Value = serde_json::from_str(message.body().unwrap()).unwrap();
                if let Some(job) = body["job_id"].as_str() {
                    self.delivered_jobs.lock().unwrap().insert(job.to_owned());
                }
                let attribute = message.message_attributes().unwrap()["event_id"]
                    .string_value()
                    .unwrap()
                    .parse()
                    .unwrap();
                delivered.push(Delivered {
                    event_id: body["event_id"].as_i64().unwrap(),
                    attribute_event_id: attribute,
                    body,
                });
                self.sqs
                    .delete_message()
                    .queue_url(&url)
                    .receipt_handle(message.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
        delivered
    }

    /// Makes every pending event due now, as if its lease or backoff had run out.
    pub async fn age_outbox(&self) {
        self.db
            .batch_execute("UPDATE outbox_events SET available_at = now() WHERE status = 'pending'")
            .await
            .unwrap();
    }

    pub async fn event_ids(&self) -> Vec<i64> {
        self.column_with("SELECT id FROM outbox_events ORDER BY id", &[])
            .await
    }
}
