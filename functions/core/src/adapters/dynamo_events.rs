//! The live events' connection store in DynamoDB (DESIGN.md §11): one on-demand table, keys
//! `pk` and `sk`, TTL on `expires_at`. A connection is `conn#<id>`/`conn` with its count of
//! subscriptions; each subscription is written twice, `topic#<topic>`/`<id>` (a topic's
//! subscribers are one Query) and `conn#<id>`/`sub#<topic>` (a connection's, for its close).
//! No Scan anywhere: every read is a key or one partition.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, DeleteRequest, Put, TransactWriteItem, Update, WriteRequest,
};
use chrono::{DateTime, Utc};

use crate::domain::events::{ConnectionId, Topic};
use crate::ports::events::{ConnectionStore, Subscribed};
use crate::ports::StoreError;

pub struct DynamoConnections {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// A BatchWriteItem's most requests.
const BATCH: usize = 25;
/// Rounds of a batch's unprocessed items sent again before the close is reported failed.
const BATCH_ROUNDS: usize = 3;
/// Pages of one partition read at most: a connection holds at most a few hundred items, and a
/// topic's subscribers are bounded by the caller's limit (expired ones wait for TTL).
const MAX_PAGES: usize = 20;

type Item = HashMap<String, AttributeValue>;

fn s(text: impl Into<String>) -> AttributeValue {
    AttributeValue::S(text.into())
}

fn n(number: i64) -> AttributeValue {
    AttributeValue::N(number.to_string())
}

fn connection_pk(id: &ConnectionId) -> String {
    format!("conn#{}", id.as_str())
}

fn topic_pk(topic: &Topic) -> String {
    format!("topic#{}", topic.name())
}

fn subscription_sk(topic: &Topic) -> String {
    format!("sub#{}", topic.name())
}

fn key(pk: String, sk: String) -> Item {
    HashMap::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))])
}

/// A failed call: unknown when it was sent and no answer came.
fn failed<E, R>(what: &str, error: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let message = format!("{what}: {}", DisplayErrorContext(&error));
    match error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::unknown(message)
        }
        _ => StoreError::new(message),
    }
}

impl DynamoConnections {
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self {
            client,
            table: table.to_owned(),
        }
    }

    /// At most `limit` items of one partition (read in at most `MAX_PAGES` pages); with
    /// `unexpired_at`, only those whose `expires_at` is after it (TTL deletes lazily).
    async fn partition(
        &self,
        pk: String,
        unexpired_at: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        for _ in 0..MAX_PAGES {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(pk.clone()))
                .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
                .set_exclusive_start_key(start.take());
            if let Some(now) = unexpired_at {
                query = query
                    .filter_expression("expires_at > :now")
                    .expression_attribute_values(":now", n(now));
            }
            let page = query
                .send()
                .await
                .map_err(|e| failed("reading a partition", e))?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(next) if !next.is_empty() && items.len() < limit => start = Some(next),
                _ => break,
            }
        }
        items.truncate(limit);
        Ok(items)
    }

    /// Deletes `keys` in batches, sending unprocessed ones again a few times.
    async fn delete_all(&self, keys: Vec<Item>) -> Result<(), StoreError> {
        for chunk in keys.chunks(BATCH) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|key| {
                    DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map(|delete| WriteRequest::builder().delete_request(delete).build())
                        .map_err(|e| StoreError::new(format!("a delete request: {e}")))
                })
                .collect::<Result<_, _>>()?;
            for _ in 0..BATCH_ROUNDS {
                let written = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(|e| failed("deleting a connection's items", e))?;
                requests = written
                    .unprocessed_items
                    .and_then(|mut left| left.remove(&self.table))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
            }
            if !requests.is_empty() {
                return Err(StoreError::new(
                    "a connection's items were left unprocessed",
                ));
            }
        }
        Ok(())
    }

    async fn holds(&self, id: &ConnectionId, topic: &Topic) -> Result<bool, StoreError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(connection_pk(id), subscription_sk(topic))))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| failed("reading a subscription", e))?;
        Ok(item.item.is_some())
    }
}

fn build<T, E: std::fmt::Display>(built: Result<T, E>) -> Result<T, StoreError> {
    built.map_err(|e| StoreError::new(format!("a transaction's item: {e}")))
}

#[async_trait]
impl ConnectionStore for DynamoConnections {
    async fn open(&self, id: &ConnectionId, until: DateTime<Utc>) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key(connection_pk(id), "conn".to_owned())))
            .update_expression("SET expires_at = :until, subs = if_not_exists(subs, :zero)")
            .expression_attribute_values(":until", n(until.timestamp()))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await
            .map_err(|e| failed("recording a connection", e))?;
        Ok(())
    }

    async fn close(&self, id: &ConnectionId) -> Result<(), StoreError> {
        let items = self.partition(connection_pk(id), None, usize::MAX).await?;
        let mut keys = Vec::with_capacity(items.len() * 2);
        for item in items {
            let (Some(AttributeValue::S(pk)), Some(AttributeValue::S(sk))) =
                (item.get("pk"), item.get("sk"))
            else {
                continue;
            };
            if let Some(topic) = sk.strip_prefix("sub#") {
                keys.push(key(format!("topic#{topic}"), id.as_str().to_owned()));
            }
            keys.push(key(pk.clone(), sk.clone()));
        }
        self.delete_all(keys).await
    }

    async fn subscribe(
        &self,
        id: &ConnectionId,
        topic: &Topic,
        max: usize,
        until: DateTime<Utc>,
    ) -> Result<Subscribed, StoreError> {
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let count = build(
            Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(connection_pk(id), "conn".to_owned())))
                .update_expression(
                    "SET subs = if_not_exists(subs, :zero) + :one, \
                     expires_at = if_not_exists(expires_at, :until)",
                )
                .condition_expression("attribute_not_exists(subs) OR subs < :max")
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":max", n(max))
                .expression_attribute_values(":until", n(until.timestamp()))
                .build(),
        )?;
        let put = |pk: String, sk: String| {
            let mut item = key(pk, sk);
            item.insert("expires_at".to_owned(), n(until.timestamp()));
            build(
                Put::builder()
                    .table_name(&self.table)
                    .set_item(Some(item))
                    .condition_expression("attribute_not_exists(pk)")
                    .build(),
            )
        };
        let written = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(count).build())
            .transact_items(
                TransactWriteItem::builder()
                    .put(put(connection_pk(id), subscription_sk(topic))?)
                    .build(),
            )
            .transact_items(
                TransactWriteItem::builder()
                    .put(put(topic_pk(topic), id.as_str().to_owned())?)
                    .build(),
            )
            .send()
            .await;
        match written {
            Ok(_) => Ok(Subscribed::Added),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_transaction_canceled_exception()) =>
            {
                // A reason other than a condition (a conflicting transaction, a throttle) is
                // a failure to report, not an answer.
                let conflict = match error.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
                        cancelled.cancellation_reasons().iter().any(|reason| {
                            !matches!(
                                reason.code(),
                                None | Some("None" | "ConditionalCheckFailed")
                            )
                        })
                    }
                    _ => false,
                };
                if conflict {
                    return Err(StoreError::new(format!(
                        "a subscription's transaction was cancelled: {}",
                        error.message().unwrap_or_default()
                    )));
                }
                // A condition failed: the subscription is held already, or the count is full.
                match self.holds(id, topic).await? {
                    true => Ok(Subscribed::Already),
                    false => Ok(Subscribed::Full),
                }
            }
            Err(error) => Err(failed("writing a subscription", error)),
        }
    }

    async fn unsubscribe(&self, id: &ConnectionId, topic: &Topic) -> Result<bool, StoreError> {
        let own = build(
            Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key(connection_pk(id), subscription_sk(topic))))
                .condition_expression("attribute_exists(pk)")
                .build(),
        )?;
        let listed = build(
            Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key(topic_pk(topic), id.as_str().to_owned())))
                .build(),
        )?;
        let count = build(
            Update::builder()
                .table_name(&self.table)
                .set_key(Some(key(connection_pk(id), "conn".to_owned())))
                .update_expression("SET subs = subs - :one")
                .condition_expression("subs > :zero")
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":zero", n(0))
                .build(),
        )?;
        let written = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().delete(own).build())
            .transact_items(TransactWriteItem::builder().delete(listed).build())
            .transact_items(TransactWriteItem::builder().update(count).build())
            .send()
            .await;
        match written {
            Ok(_) => Ok(true),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_transaction_canceled_exception()) =>
            {
                // Not held; or held by a connection whose record is gone (it expired):
                // then its two items go without the count.
                if !self.holds(id, topic).await? {
                    return Ok(false);
                }
                self.delete_all(vec![
                    key(connection_pk(id), subscription_sk(topic)),
                    key(topic_pk(topic), id.as_str().to_owned()),
                ])
                .await?;
                Ok(true)
            }
            Err(error) => Err(failed("removing a subscription", error)),
        }
    }

    async fn subscribers(
        &self,
        topic: &Topic,
        limit: usize,
    ) -> Result<Vec<ConnectionId>, StoreError> {
        let items = self
            .partition(topic_pk(topic), Some(Utc::now().timestamp()), limit)
            .await?;
        Ok(items
            .iter()
            .filter_map(|item| item.get("sk")?.as_s().ok())
            .filter_map(|sk| ConnectionId::parse(sk).ok())
            .collect())
    }
}
