//! API keys as the tests make them: created and revoked in the test server's own database
//! through the core's key use case (as `osurender-admin` does), and requests that carry them.

use std::sync::Arc;
use std::time::Duration;

use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::{parse_url, pool, Tls};
use osurender_core::domain::key::{KeyId, KeyKind, KeyLimits, KeyName};
use osurender_core::ports::keys::{KeyStore, Revocation};
use osurender_core::support::config::DbSslMode;
use osurender_core::usecases::keys::create;
use reqwest::multipart::Form;
use reqwest::Response;

use crate::support::app::{accepted_job, TestApp};

/// A key made for a test: what a client sends, and the key's id.
pub struct TestKey {
    /// The `Authorization` header's value: `Bearer osr_live_…`.
    pub bearer: String,
    pub id: KeyId,
    /// What the key's callbacks are signed with.
    pub signing_secret: String,
}

impl TestKey {
    /// The key's client as jobs record it: `key:<uuid>`.
    pub fn client(&self) -> String {
        self.id.client_name()
    }
}

impl TestApp {
    fn key_store(&self) -> Arc<dyn KeyStore> {
        let config = parse_url(&self.database_url).unwrap();
        let plain = Tls::new(DbSslMode::Disable, None).unwrap();
        Arc::new(PgKeyStore::new(
            pool(config, &plain, 1, Duration::from_secs(5)).unwrap(),
        ))
    }

    /// A live key with this render limit (`60/minute`) and `max_active`.
    pub async fn create_key(&self, render_limit: &str, max_active: u32) -> TestKey {
        self.create_key_of(KeyKind::Live, render_limit, max_active)
            .await
    }

    /// A key of `kind` with this render limit and `max_active`.
    pub async fn create_key_of(
        &self,
        kind: KeyKind,
        render_limit: &str,
        max_active: u32,
    ) -> TestKey {
        let limits = KeyLimits::new(render_limit.parse().unwrap(), max_active).unwrap();
        self.create_key_with(kind, limits).await
    }

    /// A key of `kind` with these limits (entitlements, replay length).
    pub async fn create_key_with(&self, kind: KeyKind, limits: KeyLimits) -> TestKey {
        let name = KeyName::parse("test").unwrap();
        let created = create(self.key_store().as_ref(), name, kind, limits)
            .await
            .unwrap();
        TestKey {
            bearer: format!("Bearer {}", created.key.expose()),
            id: created.record.summary.id,
            signing_secret: created.record.signing_secret.expose().to_owned(),
        }
    }

    pub async fn revoke_key(&self, key: &TestKey) {
        let revoked = self.key_store().revoke(key.id).await.unwrap();
        assert!(matches!(revoked, Revocation::Revoked(_)));
    }

    /// `POST /v1/render` for `client_ip` with `Authorization: {authorization}`.
    pub async fn render_with(&self, client_ip: &str, authorization: &str, form: Form) -> Response {
        self.render_with_headers(client_ip, &[("Authorization", authorization)], form)
            .await
    }

    /// `render_with`, admitted: the new job's id.
    pub async fn submit_with(&self, client_ip: &str, authorization: &str, form: Form) -> String {
        accepted_job(self.render_with(client_ip, authorization, form).await).await
    }

    /// `POST /v1/render` for `client_ip` with these headers.
    pub async fn render_with_headers(
        &self,
        client_ip: &str,
        headers: &[(&str, &str)],
        form: Form,
    ) -> Response {
        let request = self
            .http
            .post(self.url("/v1/render"))
            .header("CF-Connecting-IP", client_ip);
        headers
            .iter()
            .fold(request, |request, (name, value)| {
                request.header(*name, *value)
            })
            .multipart(form)
            .send()
            .await
            .expect("request completes")
    }

    /// `GET path` for `client_ip` with `Authorization: {authorization}`.
    pub async fn get_with(&self, client_ip: &str, authorization: &str, path: &str) -> Response {
        self.http
            .get(self.url(path))
            .header("CF-Connecting-IP", client_ip)
            .header("Authorization", authorization)
            .send()
            .await
            .expect("request completes")
    }
}
