//! The rate limit: the per-endpoint fixed window, one DynamoDB `UpdateItem` per check.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
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

#[async_trait]
impl RateLimiter for DynamoRateLimiter {
    async fn hit(&self, hit: Hit<'_>) -> Result<RateDecision, LimiterUnavailable> {
        let (counter, end) = hit.counter();
        let number = |n: u64| AttributeValue::N(n.to_string());
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(counter))
            .update_expression("ADD hits :one SET expires_at = if_not_exists(expires_at, :expires)")
            .condition_expression("attribute_not_exists(hits) OR hits < :limit")
            .expression_attribute_values(":one", number(1))
            .expression_attribute_values(":expires", number(end + TTL_SLACK_SECS))
            .expression_attribute_values(":limit", number(hit.limit.requests.into()))
            .return_values(ReturnValue::UpdatedNew)
            .send();
        let outcome = deadline::within(update)
            .await
            .map_err(|expired| LimiterUnavailable(expired.to_string()))?;
        match outcome {
            Ok(output) => {
                let hits = output
                    .attributes()
                    .and_then(|attrs| attrs.get("hits"))
                    .and_then(|hits| hits.as_n().ok())
                    .and_then(|hits| hits.parse::<u64>().ok())
                    .ok_or_else(|| LimiterUnavailable("UpdateItem returned no hits".into()))?;
                Ok(hit.decision(Some(hits)))
            }
            Err(SdkError::ServiceError(failure))
                if matches!(
                    failure.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(hit.decision(None))
            }
            Err(other) => Err(LimiterUnavailable(
                aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
            )),
        }
    }

    async fn give_back(&self, hit: Hit<'_>) -> Result<(), LimiterUnavailable> {
        let (counter, _) = hit.counter();
        // Only an item that exists and counts a hit: never below zero, never an item made
        // (without its TTL) for a window that has been pruned.
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(counter))
            .update_expression("ADD hits :minus_one")
            .condition_expression("hits > :zero")
            .expression_attribute_values(":minus_one", AttributeValue::N("-1".into()))
            .expression_attribute_values(":zero", AttributeValue::N("0".into()))
            .send();
        let outcome = deadline::within(update)
            .await
            .map_err(|expired| LimiterUnavailable(expired.to_string()))?;
        match outcome {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(failure))
                if matches!(
                    failure.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(())
            }
            Err(other) => Err(LimiterUnavailable(
                aws_sdk_dynamodb::error::DisplayErrorContext(other).to_string(),
            )),
        }
    }
}
