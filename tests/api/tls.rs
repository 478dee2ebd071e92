//! Postgres over TLS (`DB_SSLMODE`, `DB_SSLROOTCERT`) against the TLS-only PostgreSQL of
//! `infra/postgres-tls.sh`: a certificate for `localhost` only, signed by a CA of its own; no
//! connection in the clear accepted. `verify-full` with that CA admits and reads back over
//! HTTP; with an untrusted CA or another name for the server, and `disable`, the database is
//! not used: the dev server refuses to start, and an instance serving anyway answers 503
//! `database_unavailable` (health: postgres unavailable) within its bound, never a 500 or a
//! hang. `require` connects whatever the certificate. `sslmode=require` in `DATABASE_URL`
//! alone (no `DB_SSLMODE`) is honoured: over TLS here, and refused, not sent in the clear, by
//! the plain local server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use osurender_core::support::config::{ConfigError, DbSslMode};
use osurender_core::usecases::lifecycle::Verifier;
use osurender_core::{entry::http, Clients, Config};
use osurender_testkit::pg::SSL_REQUEST;
use osurender_testkit::tls::{TlsServer, CERTIFIED_HOST};
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{header, problem, TestApp};
use crate::support::replays::valid_form;

/// Connecting and each statement are bounded by this; a refused handshake ends far sooner.
const DB_TIMEOUT: &str = "1000";
/// The longest any answer may take here: a few of those bounds, far below a hang.
const ANSWER_BOUND: Duration = Duration::from_secs(6);

/// A server on the TLS-only PostgreSQL with `verify-full` and its CA, and a job it admitted.
async fn verified_app(server: &TlsServer) -> (TestApp, String) {
    let ca = server.ca();
    let app = TestApp::spawn_on_tls(
        server,
        &[
            ("DB_SSLMODE", "verify-full"),
            ("DB_SSLROOTCERT", ca.as_str()),
            ("DB_TIMEOUT_MS", DB_TIMEOUT),
        ],
    )
    .await;
    let job = app.submit("203.0.113.60").await;
    (app, job)
}

/// `config` on `app`'s database and AWS resources, served as the dev server serves (without
/// its start-up migration, which would refuse it), on a port of its own.
async fn serve_instance(config: &Config) -> SocketAddr {
    let clients = Clients::new(config).await.expect("nothing connects yet");
    let app = clients.app(config.clone());
    let verifier = Verifier::from_app(&app).await.unwrap();
    let router = http::service(http::all_routes(verifier), app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// `app`'s configuration with other TLS settings, and its database at `host`.
fn variant(app: &TestApp, mode: DbSslMode, root: Option<String>, host: &str) -> Config {
    let mut config = app.config.clone();
    config.database.sslmode = mode;
    config.database.sslrootcert = root.map(Into::into);
    config.database.url = app.database_url.replace(CERTIFIED_HOST, host);
    config
}

/// `app`'s configuration, but its database settings read from `DATABASE_URL` = `url` alone,
/// as a function's start reads them (no `DB_SSLMODE`, no `DB_SSLROOTCERT`).
fn from_url_alone(app: &TestApp, url: &str) -> Result<Config, ConfigError> {
    let read = Config::from_lookup(|name| (name == "DATABASE_URL").then(|| url.to_owned()))?;
    let mut config = app.config.clone();
    config.database.url = read.database.url;
    config.database.sslmode = read.database.sslmode;
    config.database.sslrootcert = read.database.sslrootcert;
    Ok(config)
}

async fn bounded(request: reqwest::RequestBuilder) -> reqwest::Response {
    let started = Instant::now();
    let response = tokio::time::timeout(ANSWER_BOUND, request.send())
        .await
        .unwrap_or_else(|_| panic!("no answer within {ANSWER_BOUND:?}"))
        .unwrap();
    assert!(started.elapsed() < ANSWER_BOUND);
    response
}

/// The dev server refuses `config` at start, saying `why`, and an instance serving it anyway
/// does not use the database: renders and job reads are 503 `database_unavailable`, health
/// names postgres.
async fn database_unused(job: &str, config: Config, why: &str) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let refused = osurender_local::start(config.clone(), listener).await;
    let error = format!(
        "{:#}",
        refused.err().expect("the dev server refuses to start")
    );
    assert!(started.elapsed() < ANSWER_BOUND, "{why}: start took long");
    assert!(
        error.contains("applying migrations") && error.contains(why),
        "{why}: {error}"
    );

    let addr = serve_instance(&config).await;
    let http = reqwest::Client::new();
    let render = bounded(
        http.post(format!("http://{addr}/v1/render"))
            .header("CF-Connecting-IP", "203.0.113.61")
            .multipart(valid_form()),
    )
    .await;
    assert!(header(&render, "retry-after").is_some(), "{why}");
    problem(
        render,
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
    )
    .await;
    let read = bounded(
        http.get(format!("http://{addr}/v1/jobs/{job}"))
            .header("CF-Connecting-IP", "203.0.113.61"),
    )
    .await;
    problem(
        read,
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
    )
    .await;
    let health = bounded(http.get(format!("http://{addr}/health"))).await;
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE, "{why}");
    let body: Value = health.json().await.unwrap();
    assert_eq!(body["checks"]["postgres"], "unavailable", "{why}: {body}");
    assert_eq!(body["checks"]["sqs"], "ok", "{why}: {body}");
}

/// The server has sessions as the application role on its database, and each is over TLS.
async fn assert_app_sessions_over_tls(app: &TestApp) {
    let sessions: Vec<bool> = app
        .column_with(
            "SELECT s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.usename = 'osurender_app' AND a.datname = current_database()",
            &[],
        )
        .await;
    assert!(!sessions.is_empty());
    assert!(sessions.iter().all(|ssl| *ssl), "{sessions:?}");
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_admits_and_reads_back_over_tls() {
    let server = TlsServer::local();
    let (app, job) = verified_app(&server).await;
    assert_eq!(app.job(&job).await["status"], "queued");
    let health = app.http.get(app.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    // The server's sessions are the application role's, each over TLS.
    assert_app_sessions_over_tls(&app).await;
}

#[tokio::test]
async fn verify_full_refuses_an_untrusted_ca_or_another_name() {
    let server = TlsServer::local();
    let (app, job) = verified_app(&server).await;
    let untrusted = variant(
        &app,
        DbSslMode::VerifyFull,
        Some(server.other_ca()),
        CERTIFIED_HOST,
    );
    database_unused(&job, untrusted, "UnknownIssuer").await;
    // Only the compiled-in AWS roots.
    let aws_only = variant(&app, DbSslMode::VerifyFull, None, CERTIFIED_HOST);
    database_unused(&job, aws_only, "UnknownIssuer").await;
    // The right CA, but an address the certificate does not name.
    let misnamed = variant(&app, DbSslMode::VerifyFull, Some(server.ca()), "127.0.0.1");
    database_unused(&job, misnamed, "not valid for name").await;
}

#[tokio::test]
async fn disable_is_refused_by_a_tls_only_server() {
    let server = TlsServer::local();
    let (app, job) = verified_app(&server).await;
    let plain = variant(&app, DbSslMode::Disable, None, CERTIFIED_HOST);
    database_unused(&job, plain, "no encryption").await;
}

/// `require` checks no certificate: neither the CA (none trusted here) nor the name.
#[tokio::test]
async fn require_connects_without_verifying_the_certificate() {
    let server = TlsServer::local();
    let (app, job) = verified_app(&server).await;
    let config = variant(&app, DbSslMode::Require, None, "127.0.0.1");
    let addr = serve_instance(&config).await;
    let http = reqwest::Client::new();
    let read = bounded(
        http.get(format!("http://{addr}/v1/jobs/{job}"))
            .header("CF-Connecting-IP", "203.0.113.62"),
    )
    .await;
    assert_eq!(read.status(), StatusCode::OK);
    let render = bounded(
        http.post(format!("http://{addr}/v1/render"))
            .header("CF-Connecting-IP", "203.0.113.62")
            .multipart(valid_form()),
    )
    .await;
    assert_eq!(render.status(), StatusCode::ACCEPTED);
}

/// Once `DB_SSLMODE`'s default overrode it: `sslmode=require` in the URL alone meant plain
/// text. Now it is TLS, and (at an address the certificate does not name) unverified, as
/// libpq's `require`; `verify-full`, the default, would refuse this address.
#[tokio::test]
async fn sslmode_require_in_the_url_alone_is_honoured() {
    let server = TlsServer::local();
    let (app, job) = verified_app(&server).await;
    let url = format!(
        "{}?sslmode=require",
        app.database_url.replace(CERTIFIED_HOST, "127.0.0.1")
    );
    let config = from_url_alone(&app, &url).unwrap();
    assert_eq!(config.database.sslmode, DbSslMode::Require);
    let addr = serve_instance(&config).await;
    let read = bounded(
        reqwest::Client::new()
            .get(format!("http://{addr}/v1/jobs/{job}"))
            .header("CF-Connecting-IP", "203.0.113.63"),
    )
    .await;
    assert_eq!(read.status(), StatusCode::OK);
    // The server takes no other, but see it: every session of the role is over TLS.
    assert_app_sessions_over_tls(&app).await;

    // The URL's mode and DB_SSLMODE disagreeing: no start, both named.
    let vars = [("DATABASE_URL", url.as_str()), ("DB_SSLMODE", "disable")];
    let error = Config::from_lookup(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_string())
    })
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("DB_SSLMODE") && error.contains("DATABASE_URL"),
        "{error}"
    );
    assert!(
        error.contains("disable") && error.contains("require"),
        "{error}"
    );
}

/// A server that takes plain text only (it answers TLS requests `N`, as PostgreSQL with
/// `ssl = off`): with `sslmode=require` in the URL nothing is sent to it in the clear — not
/// the startup message, which names the user — and the database is not used.
#[tokio::test]
async fn sslmode_require_in_the_url_does_not_fall_back_to_plain_text() {
    let app = TestApp::spawn(&[("DB_TIMEOUT_MS", DB_TIMEOUT)]).await;
    let job = app.submit("203.0.113.64").await;
    let (plain_only, sent_in_clear) = plain_text_only_server().await;
    let url = format!("postgres://postgres@{plain_only}/osurender?sslmode=require");
    let config = from_url_alone(&app, &url).unwrap();
    assert_eq!(config.database.sslmode, DbSslMode::Require);
    database_unused(&job, config, "server does not support TLS").await;
    // A client falling back would send its startup right after the `N`: let it arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let clear = sent_in_clear.lock().unwrap().clone();
    assert!(clear.is_empty(), "sent in the clear: {clear:?}");
}

/// A listener that refuses TLS to every connection and keeps whatever a client then sends
/// (or sends first, without asking for TLS): what went over the wire in the clear.
async fn plain_text_only_server() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let kept = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                let mut first = [0u8; 8];
                if stream.read_exact(&mut first).await.is_err() {
                    return;
                }
                let mut clear = Vec::new();
                if first == SSL_REQUEST {
                    if stream.write_all(b"N").await.is_err() {
                        return;
                    }
                } else {
                    clear.extend_from_slice(&first);
                }
                let mut rest = [0u8; 1024];
                let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut rest));
                if let Ok(Ok(n)) = read.await {
                    clear.extend_from_slice(&rest[..n]);
                }
                if !clear.is_empty() {
                    kept.lock().unwrap().push(clear);
                }
            });
        }
    });
    (addr, sent)
}
