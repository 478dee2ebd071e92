//! The operator's commands as the tests give them: `osurender-admin`'s own grammar and use
//! case (usecases/keys/admin.rs), run against the test server's database.

use std::time::Duration;

use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::policy::PgPolicyStore;
use osurender_core::adapters::postgres::skins::PgSkinRegistry;
use osurender_core::adapters::postgres::{parse_url, pool, Tls};
use osurender_core::adapters::s3::S3SkinStore;
use osurender_core::ports::skins::CLAIM_STALE_AFTER;
use osurender_core::support::aws;
use osurender_core::support::config::DbSslMode;
use osurender_core::usecases::keys::admin::{parse, run, AdminError, AdminStores};
use serde_json::Value;

use crate::support::app::TestApp;

impl TestApp {
    /// `osurender-admin {line}` (words split on spaces) on this server's database: its answer.
    pub async fn admin(&self, line: &[&str]) -> Value {
        self.try_admin(line).await.unwrap()
    }

    /// `osurender-admin {line}`: its answer, or why it failed.
    pub async fn try_admin(&self, line: &[&str]) -> Result<Value, AdminError> {
        let config = parse_url(&self.database_url).unwrap();
        let plain = Tls::new(DbSslMode::Disable, None).unwrap();
        let pool = pool(config, &plain, 1, Duration::from_secs(5)).unwrap();
        let (keys, policy) = (
            PgKeyStore::new(pool.clone()),
            PgPolicyStore::new(pool.clone()),
        );
        let skins = PgSkinRegistry::new(pool, CLAIM_STALE_AFTER);
        let sdk = aws::sdk_config(
            self.config.aws.timeout,
            self.config.aws.endpoint_url.as_deref(),
        )
        .await;
        let skin_objects = S3SkinStore::new(aws::s3(&sdk), sdk, &self.config.aws.skin_bucket);
        let stores = AdminStores {
            keys: &keys,
            policy: &policy,
            skins: &skins,
            skin_objects: &skin_objects,
        };
        let args: Vec<String> = line.iter().map(|word| (*word).to_owned()).collect();
        run(stores, &parse(&args).unwrap()).await
    }
}
