//! Creates the AWS resources the dev server uses when they are missing. On AWS, `template.yaml`
//! owns them instead.

use anyhow::Context;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    TimeToLiveSpecification,
};
use osurender_core::domain::sandbox;

/// The limiter table of DESIGN.md §4: string key `pk`, on demand, TTL on `expires_at`.
pub async fn rate_limit_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> anyhow::Result<()> {
    table_with_ttl(client, table, &["pk"], "the rate-limit table").await
}

/// The live events' table (DESIGN.md §11): string keys `pk` and `sk`, on demand, TTL on
/// `expires_at`.
pub async fn events_table(client: &aws_sdk_dynamodb::Client, table: &str) -> anyhow::Result<()> {
    table_with_ttl(client, table, &["pk", "sk"], "the events table").await
}

/// An on-demand table keyed by the string attributes `keys` (hash, then range), with TTL on
/// `expires_at`, unless it exists.
async fn table_with_ttl(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    keys: &[&str],
    what: &str,
) -> anyhow::Result<()> {
    let exists = client.describe_table().table_name(table).send().await;
    match exists {
        Ok(_) => return Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_not_found_exception()) => {}
        Err(e) => return Err(e).context(format!("describing {what}")),
    }
    let mut create = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    for (n, key) in keys.iter().enumerate() {
        create = create
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*key)
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*key)
                    .key_type(if n == 0 {
                        KeyType::Hash
                    } else {
                        KeyType::Range
                    })
                    .build()?,
            );
    }
    match create.send().await {
        Ok(_) => {}
        // Another process created it first.
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            return Ok(())
        }
        Err(e) => return Err(e).context(format!("creating {what}")),
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name("expires_at")
                .enabled(true)
                .build()?,
        )
        .send()
        .await
        .context(format!("enabling TTL on {what}"))?;
    Ok(())
}

pub async fn bucket(client: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<()> {
    if client.head_bucket().bucket(bucket).send().await.is_ok() {
        return Ok(());
    }
    match client.create_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error().is_some_and(|e| {
                e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists()
            }) =>
        {
            Ok(())
        }
        Err(e) => Err(e).context("creating the replay bucket"),
    }
}

/// The sandbox jobs' sample artifacts (domain/sandbox.rs), when missing: placeholders here,
/// so a sandbox job's links resolve; a deployment uploads real ones (docs/DEPLOY.md).
pub async fn sandbox_samples(client: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<()> {
    for (key, content_type) in [
        (sandbox::SAMPLE_VIDEO_KEY, "video/mp4"),
        (sandbox::SAMPLE_THUMB_KEY, "image/jpeg"),
    ] {
        if client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .is_ok()
        {
            continue;
        }
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .content_type(content_type)
            .body(b"osurender sandbox sample".to_vec().into())
            .send()
            .await
            .with_context(|| format!("uploading the sandbox sample {key}"))?;
    }
    Ok(())
}

/// The render queue, by name; answers its URL. `CreateQueue` returns the existing queue's URL
/// when one of that name exists.
pub async fn queue(client: &aws_sdk_sqs::Client, name: &str) -> anyhow::Result<String> {
    client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .context("creating the render queue")?
        .queue_url
        .context("CreateQueue answered no URL")
}
