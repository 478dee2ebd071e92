//! AWS: the bound on every call, the endpoint, and the buckets, tables and queues by name.

use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Aws {
    /// Bound on every AWS call (DynamoDB, S3, SQS), retries included (`AWS_TIMEOUT_MS`).
    pub timeout: Duration,
    /// A stand-in's endpoint (moto, LocalStack) for every AWS client (`AWS_ENDPOINT_URL`);
    /// `None` on AWS. The SDK would read `AWS_ENDPOINT_URL` itself, but carried here one process
    /// can run servers with different endpoints (the round-trip budget test routes one through
    /// a counting proxy).
    pub endpoint_url: Option<String>,
    /// The bucket of replays (`REPLAY_BUCKET`).
    pub replay_bucket: String,
    /// The bucket of uploaded skins (`skins/{name}.osk`, `incoming/…`; `SKIN_BUCKET`); the
    /// replay bucket by default.
    pub skin_bucket: String,
    /// The bucket the render workers put videos and thumbnails in (`ARTIFACT_BUCKET`); the
    /// replay bucket by default.
    pub artifact_bucket: String,
    /// The SQS render queue: its URL (`RENDER_QUEUE_URL`), or its name to look the URL up by
    /// (`RENDER_QUEUE_NAME`).
    pub render_queue_url: Option<String>,
    pub render_queue_name: String,
    /// The dispatcher's wake queue (`CALLBACK_WAKE_QUEUE_URL`): set, a status change with a
    /// callback wakes the dispatcher through it at once, and a sweep asks to be woken when the
    /// next callback falls due; unset, callbacks wait for the scheduled sweep.
    pub callback_wake_queue_url: Option<String>,
    /// The DynamoDB table of the rate limiter (`RATE_LIMIT_TABLE`).
    pub rate_limit_table: String,
    /// The DynamoDB table of live-event connections and subscriptions (`EVENTS_TABLE`).
    pub events_table: String,
    /// Where API Gateway's Management API posts to this deployment's connections
    /// (`EVENTS_MANAGEMENT_URL`); none: no frames are pushed from this process (the dev server
    /// pushes to its own sockets).
    pub events_management_url: Option<String>,
}

impl Aws {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let replay_bucket = env.string("REPLAY_BUCKET", "osurender-replays");
        Ok(Self {
            timeout: env.millis("AWS_TIMEOUT_MS", 5_000)?,
            endpoint_url: env.non_empty("AWS_ENDPOINT_URL"),
            skin_bucket: env.string("SKIN_BUCKET", &replay_bucket),
            artifact_bucket: env.string("ARTIFACT_BUCKET", &replay_bucket),
            replay_bucket,
            render_queue_url: env.non_empty("RENDER_QUEUE_URL"),
            render_queue_name: env.string("RENDER_QUEUE_NAME", "osurender-render-jobs"),
            callback_wake_queue_url: env.non_empty("CALLBACK_WAKE_QUEUE_URL"),
            rate_limit_table: env.string("RATE_LIMIT_TABLE", "osurender-rate-limits"),
            events_table: env.string("EVENTS_TABLE", "osurender-events"),
            events_management_url: env.non_empty("EVENTS_MANAGEMENT_URL"),
        })
    }
}
