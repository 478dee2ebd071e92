//! The wiring: the SDK clients and the Postgres pool, and the adapters (store/) built on them
//! behind the App's ports. Only the entry points (the dev server, the Lambda functions) use it.

use std::sync::Arc;

use crate::app::App;
use crate::aws;
use crate::config::Config;
use crate::health::HealthCheck;
use crate::keys::KeyLookup;
use crate::ports::callbacks::CallbackSender;
use crate::ports::skins::CLAIM_STALE_AFTER;
use crate::ports::StoreError;
use crate::secrets::RotatingSecret;
use crate::store::callbacks::{CheckedAddresses, HttpCallbacks};
use crate::store::dynamo::DynamoRateLimiter;
use crate::store::postgres::callbacks::PgCallbackStore;
use crate::store::postgres::idempotency::PgIdempotencyStore;
use crate::store::postgres::jobs::PgJobStore;
use crate::store::postgres::keys::PgKeyStore;
use crate::store::postgres::outbox::PgOutboxStore;
use crate::store::postgres::skins::PgSkinRegistry;
use crate::store::postgres::{self as db, PostgresCheck};
use crate::store::s3::{S3ArtifactLinks, S3ReplayStore, S3SkinStore};
use crate::store::secrets::SecretsManagerStore;
use crate::store::sqs::SqsRenderQueue;

/// The clients behind `App` (each a cheap handle to a shared pool), for the adapters and for
/// callers that provision or inspect resources.
#[derive(Clone)]
pub struct Clients {
    pub pool: deadpool_postgres::Pool,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub secretsmanager: aws_sdk_secretsmanager::Client,
    /// The shared AWS configuration: what presigning needs (credentials, region, endpoint).
    pub sdk: aws_config::SdkConfig,
}

impl Clients {
    /// Builds the clients, Postgres from `DATABASE_URL`; nothing connects until first use.
    pub async fn new(config: &Config) -> Result<Self, StoreError> {
        let sdk = aws::sdk_config(config.aws_timeout, config.aws_endpoint_url.as_deref()).await;
        Self::from_parts(config, sdk, db::parse_url(&config.database_url)?)
    }

    /// Builds the clients on a loaded SDK configuration and Postgres settings from elsewhere
    /// (on Lambda: the database secret).
    pub fn from_parts(
        config: &Config,
        sdk: aws_config::SdkConfig,
        postgres: tokio_postgres::Config,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            pool: db::pool(
                postgres,
                &db::Tls::from_config(config)?,
                config.db_pool_size,
                config.db_timeout,
            )?,
            dynamodb: aws::dynamodb(&sdk),
            s3: aws::s3(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            secretsmanager: aws_sdk_secretsmanager::Client::new(&sdk),
            sdk,
        })
    }
}

impl App {
    pub fn new(config: Config, clients: &Clients) -> Self {
        let limiter = Arc::new(DynamoRateLimiter::new(
            clients.dynamodb.clone(),
            &config.rate_limit_table,
        ));
        let replays = Arc::new(S3ReplayStore::new(
            clients.s3.clone(),
            &config.replay_bucket,
        ));
        let queue = Arc::new(SqsRenderQueue::new(
            clients.sqs.clone(),
            config.render_queue_url.clone(),
            &config.render_queue_name,
        ));
        let postgres = Arc::new(PostgresCheck::new(clients.pool.clone()));
        let secrets = Arc::new(SecretsManagerStore::new(clients.secretsmanager.clone()));
        let origin_secret = config.origin_secret.as_ref().map(|source| {
            RotatingSecret::new(source, secrets.clone(), config.secret_refresh_interval)
        });
        Self {
            health: Arc::new(HealthCheck::new(
                vec![postgres, limiter.clone(), replays.clone(), queue.clone()],
                config.health_check_interval,
            )),
            artifacts: Arc::new(S3ArtifactLinks::new(
                clients.s3.clone(),
                &config.artifact_bucket,
            )),
            limiter,
            jobs: Arc::new(PgJobStore::new(
                clients.pool.clone(),
                config.db_timeout,
                config.event_lease(),
            )),
            replays,
            outbox: Arc::new(PgOutboxStore::new(clients.pool.clone())),
            queue,
            callbacks: Arc::new(PgCallbackStore::new(clients.pool.clone())),
            callback_addresses: Arc::new(CheckedAddresses {
                allow_private: config.allow_private_callbacks,
            }),
            skins: Arc::new(S3SkinStore::new(
                clients.s3.clone(),
                clients.sdk.clone(),
                &config.skin_bucket,
            )),
            skin_names: Arc::new(PgSkinRegistry::new(clients.pool.clone(), CLAIM_STALE_AFTER)),
            idempotency: Arc::new(PgIdempotencyStore::new(clients.pool.clone())),
            keys: Arc::new(KeyLookup::new(
                Arc::new(PgKeyStore::new(clients.pool.clone())),
                config.key_cache_ttl,
            )),
            secrets,
            origin_secret,
            config: Arc::new(config),
        }
    }

    /// What sends callbacks, for the dispatcher (`callbacks::sweep`): built only where it is
    /// used, so the other functions link no HTTP client.
    pub fn callback_sender(&self) -> Arc<dyn CallbackSender> {
        Arc::new(HttpCallbacks::new(
            self.config.callback_timeout,
            self.config.allow_private_callbacks,
        ))
    }

    /// Reads the origin secret when it is kept in Secrets Manager: once per instance, before
    /// the first request. A failure is logged, never fatal: requests answer 503 until a read
    /// succeeds (secrets.rs).
    pub async fn read_secrets(&self) {
        if let Some(secret) = &self.origin_secret {
            secret.read().await;
        }
    }
}
