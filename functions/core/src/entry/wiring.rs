//! The wiring: the SDK clients and the Postgres pool, and the adapters (adapters/) built on them
//! behind the App's ports. Only the entry points (the dev server, the Lambda functions) use it.

use std::sync::Arc;

use crate::adapters::callback_sender::{CheckedAddresses, HttpCallbacks};
use crate::adapters::dynamo::DynamoRateLimiter;
use crate::adapters::dynamo_events::DynamoConnections;
use crate::adapters::management_api::ManagementApiPusher;
use crate::adapters::postgres::callbacks::PgCallbackStore;
use crate::adapters::postgres::credentials::{
    CredentialSource, Credentials, RotatingCredentials, REREAD_INTERVAL,
};
use crate::adapters::postgres::idempotency::PgIdempotencyStore;
use crate::adapters::postgres::jobs::PgJobStore;
use crate::adapters::postgres::keys::PgKeyStore;
use crate::adapters::postgres::outbox::PgOutboxStore;
use crate::adapters::postgres::policy::PgPolicyStore;
use crate::adapters::postgres::pushes::PgPushQueue;
use crate::adapters::postgres::skins::PgSkinRegistry;
use crate::adapters::postgres::{self as db, PostgresCheck};
use crate::adapters::replay_fetch::HttpReplays;
use crate::adapters::s3::{S3Bucket, S3SkinStore};
use crate::adapters::secrets::{DatabaseSecret, SecretsManagerStore};
use crate::adapters::sqs::{SqsRenderQueue, SqsWake};
use crate::ports::callbacks::CallbackSender;
use crate::ports::events::Pusher;
use crate::ports::skins::CLAIM_STALE_AFTER;
use crate::ports::wake::DispatcherWake;
use crate::ports::{Ports, StoreError};
use crate::support::aws;
use crate::support::config::Config;
use crate::usecases::app::App;

/// How long a `replay_url` fetch may take, connection included; the request's deadline bounds it
/// too (DESIGN.md §2, "Replays by URL").
const REPLAY_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
        let sdk = aws::sdk_config(config.aws.timeout, config.aws.endpoint_url.as_deref()).await;
        Self::from_parts(config, sdk, db::parse_url(&config.database.url)?, None)
    }

    /// Builds the clients on a loaded SDK configuration and Postgres settings from elsewhere
    /// (on Lambda: the database secret). With `secret` (the secret `postgres`' user and
    /// password were read from), a connection the database refuses for its credentials
    /// re-reads it (adapters/postgres/credentials.rs): a rotation does not take a warm
    /// instance down.
    pub fn from_parts(
        config: &Config,
        sdk: aws_config::SdkConfig,
        postgres: tokio_postgres::Config,
        secret: Option<Arc<dyn CredentialSource>>,
    ) -> Result<Self, StoreError> {
        let credentials = secret.map(|source| {
            let initial = Credentials {
                user: postgres.get_user().unwrap_or_default().to_owned(),
                password: postgres.get_password().unwrap_or_default().to_vec(),
            };
            RotatingCredentials::new(initial, source, REREAD_INTERVAL)
        });
        Ok(Self {
            pool: db::rotating_pool(
                postgres,
                &db::Tls::from_config(config)?,
                config.database.pool_size,
                config.database.timeout,
                credentials,
            )?,
            dynamodb: aws::dynamodb(&sdk),
            s3: aws::s3(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            secretsmanager: aws_sdk_secretsmanager::Client::new(&sdk),
            sdk,
        })
    }
}

impl Clients {
    /// The App of a process: the adapters on these clients behind its ports.
    pub fn app(&self, config: Config) -> App {
        let ports = self.ports(&config);
        App::from_ports(config, ports)
    }

    fn ports(&self, config: &Config) -> Ports {
        let limiter = Arc::new(DynamoRateLimiter::new(
            self.dynamodb.clone(),
            &config.aws.rate_limit_table,
        ));
        let replays = Arc::new(S3Bucket::new(self.s3.clone(), &config.aws.replay_bucket));
        let queue = Arc::new(SqsRenderQueue::new(
            self.sqs.clone(),
            config.aws.render_queue_url.clone(),
            &config.aws.render_queue_name,
        ));
        let postgres = Arc::new(PostgresCheck::new(self.pool.clone()));
        let jobs = Arc::new(PgJobStore::new(
            self.pool.clone(),
            config.database.timeout,
            config.event_lease(),
        ));
        Ports {
            dependencies: vec![postgres, limiter.clone(), replays.clone(), queue.clone()],
            artifacts: Arc::new(S3Bucket::new(self.s3.clone(), &config.aws.artifact_bucket)),
            limiter,
            jobs,
            replays,
            outbox: Arc::new(PgOutboxStore::new(self.pool.clone())),
            queue,
            callbacks: Arc::new(PgCallbackStore::new(self.pool.clone())),
            callback_addresses: Arc::new(CheckedAddresses {
                allow_private: config.callbacks.allow_private,
            }),
            replay_fetcher: Arc::new(HttpReplays::new(
                REPLAY_FETCH_TIMEOUT,
                config.callbacks.allow_private,
            )),
            skins: Arc::new(S3SkinStore::new(
                self.s3.clone(),
                self.sdk.clone(),
                &config.aws.skin_bucket,
            )),
            skin_names: Arc::new(PgSkinRegistry::new(self.pool.clone(), CLAIM_STALE_AFTER)),
            idempotency: Arc::new(PgIdempotencyStore::new(self.pool.clone())),
            keys: Arc::new(PgKeyStore::new(self.pool.clone())),
            policy: Arc::new(PgPolicyStore::new(self.pool.clone())),
            secrets: Arc::new(SecretsManagerStore::new(self.secretsmanager.clone())),
            connections: Arc::new(DynamoConnections::new(
                self.dynamodb.clone(),
                &config.aws.events_table,
            )),
            pusher: config
                .aws
                .events_management_url
                .as_ref()
                .map(|url| Arc::new(ManagementApiPusher::new(&self.sdk, url)) as Arc<dyn Pusher>),
            pushes: Arc::new(PgPushQueue::new(self.pool.clone())),
            wake: config.aws.callback_wake_queue_url.as_ref().map(|url| {
                Arc::new(SqsWake::new(self.sqs.clone(), url.clone())) as Arc<dyn DispatcherWake>
            }),
        }
    }
}

/// The database secret `id` (`DB_SECRET_ARN`), for `Clients::from_parts` to re-read.
pub fn database_secret(sdk: &aws_config::SdkConfig, id: &str) -> Arc<dyn CredentialSource> {
    Arc::new(DatabaseSecret::new(
        aws_sdk_secretsmanager::Client::new(sdk),
        id,
    ))
}

/// What sends callbacks, for the dispatcher (`callbacks::sweep`): built only where it is used,
/// so the other functions link no HTTP client.
pub fn callback_sender(config: &Config) -> Arc<dyn CallbackSender> {
    Arc::new(HttpCallbacks::new(
        config.callbacks.timeout,
        config.callbacks.allow_private,
    ))
}
