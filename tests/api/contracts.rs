//! The ports' contract suites (core `ports/contracts/`) against the real adapters: the same
//! guarantees the in-memory fakes are held to in the core's unit tests.

use osurender_core::adapters::dynamo::DynamoRateLimiter;
use osurender_core::adapters::postgres::idempotency::PgIdempotencyStore;
use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::skins::PgSkinRegistry;
use osurender_core::ports::contracts;
use osurender_core::ports::skins::CLAIM_STALE_AFTER;
use osurender_core::Clients;

use crate::support::app::TestApp;

#[tokio::test]
async fn the_dynamodb_limiter_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let limiter = DynamoRateLimiter::new(clients.dynamodb.clone(), &app.config.rate_limit_table);
    contracts::limiter::suite(&limiter).await;
}

#[tokio::test]
async fn the_postgres_key_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::keys::suite(&PgKeyStore::new(clients.pool.clone())).await;
}

#[tokio::test]
async fn the_postgres_idempotency_store_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    contracts::idempotency::suite(&PgIdempotencyStore::new(clients.pool.clone())).await;
}

#[tokio::test]
async fn the_postgres_skin_registry_keeps_the_ports_contract() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let registry = PgSkinRegistry::new(clients.pool.clone(), CLAIM_STALE_AFTER);
    contracts::skin_names::suite(&registry).await;
}
