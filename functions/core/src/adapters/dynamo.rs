//! The rate limit: the per-endpoint fixed window, one DynamoDB `UpdateItem` per check.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};

use crate::domain::deadline;
use crate::domain::rate::RateDecision;
use crate::ports::health::Dependency;
use crate::ports::limiter::LimiterUnavailable;
use crate::ports::limiter::{Hit, RateLimiter};
/// DESIGN.md §4: the window start is in the key, so an item's TTL only cleans up and can never
/// stretch a window; the condition makes the count exact under any concurrency.
pub struct DynamoRateLimiter {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// How long after its window an item lingers before TTL may remove it.
const TTL_SLACK_SECS: u64 = 60;

impl DynamoRateLimiter {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// An `UpdateItem` of `counter`'s item.
    fn update_counter(&self, counter: String) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(counter))
    }
}

/// `/health`: the limiter's table answers.
#[async_trait]
impl Dependency for DynamoRateLimiter {
    fn name(&self) -> &'static str {
        "dynamodb"
    }

    async fn check(&self) -> Result<(), String> {
        super::probe(self.client.describe_table().table_name(&self.table).send()).await
    }
}

/// Sends `update` within the request's deadline: its output, or `None` when its condition
/// refused it.
async fn send_conditional(
    update: UpdateItemFluentBuilder,
) -> Result<Option<UpdateItemOutput>, LimiterUnavailable> {
    let outcome = deadline::within(update.send())
        .await
        .map_err(|expired| LimiterUnavailable(expired.to_string()))?;
    match outcome {
        Ok(output) => Ok(Some(output)),
        Err(SdkError::ServiceError(failure))
            if matches!(
                failure.err(),
                UpdateItemError::ConditionalCheckFailedException(_)
            ) =>
        {
            Ok(None)
        }
        Err(other) => Err(LimiterUnavailable(
            aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
        )),
    }
}

#[async_trait]
impl RateLimiter for DynamoRateLimiter {
    async fn hit(&self, hit: Hit<'_>) -> Result<RateDecision, LimiterUnavailable> {
        let (counter, end) = hit.counter();
        let number = |n: u64| AttributeValue::N(n.to_string());
        let update = self
            .update_counter(counter)
            .update_expression("ADD hits :one SET expires_at = if_not_exists(expires_at, :expires)")
            .condition_expression("attribute_not_exists(hits) OR hits < :limit")
            .expression_attribute_values(":one", number(1))
            .expression_attribute_values(":expires", number(end + TTL_SLACK_SECS))
            .expression_attribute_values(":limit", number(hit.limit.requests.into()))
            .return_values(ReturnValue::UpdatedNew);
        let Some(output) = send_conditional(update).await? else {
            return Ok(hit.decision(None));
        };
        let hits = output
            .attributes()
            .and_then(|attrs| attrs.get("hits"))
            .and_then(|hits| hits.as_n().ok())
            .and_then(|hits| hits.parse::<u64>().ok())
            .ok_or_else(|| LimiterUnavailable("UpdateItem returned no hits".into()))?;
        Ok(hit.decision(Some(hits)))
    }

    async fn give_back(&self, hit: Hit<'_>) -> Result<(), LimiterUnavailable> {
        let (counter, _) = hit.counter();
        // Only an item that exists and counts a hit: never below zero, never an item made
        // (without its TTL) for a window that has been pruned.
        let update = self
            .update_counter(counter)
            .update_expression("ADD hits :minus_one")
            .condition_expression("hits > :zero")
            .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()));
        send_conditional(update).await.map(drop)
    }
}
