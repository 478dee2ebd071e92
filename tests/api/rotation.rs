//! The database password rotated under running instances. Instances are built as
//! a function's start builds them on AWS (`Clients::from_parts` with the credentials read from
//! the database secret, `DB_SECRET_ARN`, and that secret to re-read), here a secret in the
//! stand-in's Secrets Manager and a role of the TLS-only PostgreSQL, which checks passwords
//! (SCRAM). While requests flow, the role's password is changed (`ALTER ROLE`) and the new one
//! published; a connection made after that with the old one is refused (28P01), the instance
//! re-reads the secret and connects with the new one: no request fails for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use osurender_core::entry::{http, wiring};
use osurender_core::{routes, Clients};
use reqwest::StatusCode;
use serde_json::json;

use crate::support::app::TestApp;
use crate::support::secrets::StoredSecret;
use osurender_testkit::tls::{TlsServer, CERTIFIED_HOST};

/// A login role of its own with `password`, which may do what the application role may (its
/// member): the database's tables, functions and sequences.
struct TestRole {
    name: String,
}

impl TestRole {
    async fn create(app: &TestApp, password: &str) -> TestRole {
        let name = format!("osr_rotation_{}", uuid::Uuid::new_v4().simple());
        app.db
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE osurender_app"
            ))
            .await
            .unwrap();
        TestRole { name }
    }

    /// The password changed in the database, as a rotation's setSecret step does.
    async fn change_password(&self, app: &TestApp, password: &str) {
        app.db
            .batch_execute(&format!("ALTER ROLE {} PASSWORD '{password}'", self.name))
            .await
            .unwrap();
    }

    /// The sessions of this role, by `application_name`.
    async fn sessions(&self, app: &TestApp, instance: &str) -> i64 {
        app.scalar_with(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 \
             AND application_name = $2",
            &[&self.name, &instance],
        )
        .await
    }

    /// Waits (10 s at most) until `instance` has `count` sessions of this role, authenticated.
    async fn until_sessions(&self, app: &TestApp, instance: &str, count: i64) {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.sessions(app, instance).await;
            if now == count {
                return;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "{instance}: {now} sessions, not {count}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Ends its sessions and drops it; a session still closing (or an instance's pool
    /// reconnecting meanwhile) is waited out, 5 s at most, so a run leaves no role behind.
    async fn drop(self, app: &TestApp) {
        let statement = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{0}'; \
             DROP ROLE IF EXISTS {0}",
            self.name
        );
        for _ in 0..50 {
            if app.db.batch_execute(&statement).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("role {} could not be dropped", self.name);
    }
}

/// The database secret's JSON, as RDS makes it.
fn secret_json(role: &TestRole, password: &str, server_port: u16, database: &str) -> String {
    json!({
        "engine": "postgres",
        "username": role.name,
        "password": password,
        "host": CERTIFIED_HOST,
        "port": server_port,
        "dbname": database,
    })
    .to_string()
}

/// An instance of the jobs function started with `password` read from `secret`: what its
/// start read, and the secret to re-read. Sessions are named `instance`. Its address.
async fn start_instance(
    app: &TestApp,
    role: &TestRole,
    password: &str,
    secret: &StoredSecret,
    instance: &str,
) -> SocketAddr {
    let mut config = app.config.clone();
    config.database.pool_size = 2;
    let mut postgres: tokio_postgres::Config = app.database_url.parse().unwrap();
    postgres
        .user(&role.name)
        .password(password)
        .application_name(instance);
    let sdk = osurender_core::support::aws::sdk_config(
        config.aws.timeout,
        config.aws.endpoint_url.as_deref(),
    )
    .await;
    let source = wiring::database_secret(&sdk, &secret.arn);
    let clients = Clients::from_parts(&config, sdk, postgres, Some(source)).unwrap();
    let router = http::service(routes::jobs::routes(), clients.app(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// Requests to `addr` reading `job`, `parallel` at a time, until `stop` (and at least
/// `MIN_ROUNDS` rounds): every answer's status.
fn flow(
    addr: SocketAddr,
    job: &str,
    parallel: usize,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<StatusCode>> {
    let url = format!("http://{addr}/v1/jobs/{job}");
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut statuses = Vec::new();
        let mut rounds = 0;
        while rounds < MIN_ROUNDS || !stop.load(Ordering::SeqCst) {
            rounds += 1;
            let requests = (0..parallel).map(|_| {
                client
                    .get(&url)
                    .header("CF-Connecting-IP", "203.0.113.90")
                    .timeout(Duration::from_secs(15))
                    .send()
            });
            for answer in futures_util::future::join_all(requests).await {
                statuses.push(answer.map_or(StatusCode::GATEWAY_TIMEOUT, |r| r.status()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        statuses
    })
}

async fn stop_flow(
    stop: &AtomicBool,
    flow: tokio::task::JoinHandle<Vec<StatusCode>>,
) -> Vec<StatusCode> {
    stop.store(true, Ordering::SeqCst);
    flow.await.unwrap()
}

const MIN_ROUNDS: usize = 3;

fn assert_all_answered(statuses: &[StatusCode], what: &str) {
    assert!(statuses.len() >= MIN_ROUNDS, "{what}: {statuses:?}");
    let failed: Vec<&StatusCode> = statuses.iter().filter(|s| **s != StatusCode::OK).collect();
    assert!(
        failed.is_empty(),
        "{what}: {failed:?} of {}",
        statuses.len()
    );
}

/// Lets the flows run a while.
async fn flowing() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}

async fn tls_app() -> (TlsServer, TestApp) {
    let server = TlsServer::local();
    let ca = server.ca();
    let app = TestApp::spawn_on_tls(
        &server,
        &[
            ("DB_SSLMODE", "verify-full"),
            ("DB_SSLROOTCERT", ca.as_str()),
            ("RATE_LIMIT_READ", "1000000/minute"),
        ],
    )
    .await;
    (server, app)
}

fn database_name(app: &TestApp) -> String {
    app.database_url.rsplit('/').next().unwrap().to_owned()
}

fn port(app: &TestApp) -> u16 {
    let postgres: tokio_postgres::Config = app.database_url.parse().unwrap();
    postgres.get_ports()[0]
}

/// By hand: the password changed, then the new one published as the secret's current version.
/// Between the two no new connection is needed (the flow reuses its connection); after,
/// connections made with the old password are refused and the new one is learned: by the
/// running instance as its load grows, and by one that started before the rotation and serves
/// its first requests after it.
#[tokio::test]
async fn a_password_changed_and_published_is_learned_while_requests_flow() {
    let (_server, app) = tls_app().await;
    let job = app.submit("203.0.113.91").await;
    let role = TestRole::create(&app, "first-password").await;
    let (port, database) = (port(&app), database_name(&app));
    let secret = StoredSecret::create(&secret_json(&role, "first-password", port, &database)).await;
    let running = start_instance(&app, &role, "first-password", &secret, "running").await;
    let idle = start_instance(&app, &role, "first-password", &secret, "idle").await;

    let stop = Arc::new(AtomicBool::new(false));
    let steady = flow(running, &job, 1, stop.clone());
    // One request at a time: one connection, made before the rotation.
    role.until_sessions(&app, "running", 1).await;
    flowing().await;

    role.change_password(&app, "second-password").await;
    flowing().await;
    secret
        .rotate(&secret_json(&role, "second-password", port, &database))
        .await;
    flowing().await;
    // More load on the running instance: its pool grows, with the new password.
    let burst = flow(running, &job, 6, stop.clone());
    // The instance that started with the old password begins serving.
    let late = flow(idle, &job, 2, stop.clone());
    flowing().await;
    flowing().await;
    let (steady, burst, late) = (
        stop_flow(&stop, steady).await,
        stop_flow(&stop, burst).await,
        stop_flow(&stop, late).await,
    );
    assert_all_answered(&steady, "the steady flow");
    assert_all_answered(&burst, "the burst");
    assert_all_answered(&late, "the instance started before the rotation");
    // The pool's second connection, made after the rotation.
    role.until_sessions(&app, "running", 2).await;
    assert!(role.sessions(&app, "idle").await >= 1);
    role.drop(&app).await;
}

/// As Secrets Manager rotates an RDS secret: the new password staged (`AWSPENDING`), set in
/// the database, then made current. A connection made between the last two steps is refused
/// with the current version and accepted with the pending one; one made after, with the
/// current one again. No request fails at any step.
#[tokio::test]
async fn a_managed_rotation_is_followed_through_its_pending_version() {
    let (_server, app) = tls_app().await;
    let job = app.submit("203.0.113.92").await;
    let role = TestRole::create(&app, "before-rotation").await;
    let (port, database) = (port(&app), database_name(&app));
    let secret =
        StoredSecret::create(&secret_json(&role, "before-rotation", port, &database)).await;
    let during = start_instance(&app, &role, "before-rotation", &secret, "during").await;
    let after = start_instance(&app, &role, "before-rotation", &secret, "after").await;

    let stop = Arc::new(AtomicBool::new(false));
    let steady = flow(during, &job, 1, stop.clone());
    flowing().await;
    let pending = secret
        .stage_pending(&secret_json(&role, "after-rotation", port, &database))
        .await;
    flowing().await;
    role.change_password(&app, "after-rotation").await;
    // Between setSecret and finishSecret: the running instance's pool grows.
    let burst = flow(during, &job, 6, stop.clone());
    role.until_sessions(&app, "during", 2).await;
    flowing().await;
    secret.promote(&pending).await;
    // After finishSecret: an instance that started before the rotation begins serving.
    let late = flow(after, &job, 2, stop.clone());
    flowing().await;
    flowing().await;
    let (steady, burst, late) = (
        stop_flow(&stop, steady).await,
        stop_flow(&stop, burst).await,
        stop_flow(&stop, late).await,
    );
    assert_all_answered(&steady, "the steady flow");
    assert_all_answered(&burst, "the burst between setSecret and finishSecret");
    assert_all_answered(&late, "the instance started before the rotation");
    assert!(role.sessions(&app, "after").await >= 1);
    role.drop(&app).await;
}
