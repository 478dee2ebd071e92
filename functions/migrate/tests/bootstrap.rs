//! The real `migrate` bootstrap (this package's binary, as built for the tests) run under a
//! local Lambda Runtime API, fed CloudFormation Create, Update and Delete events whose
//! `ResponseURL` is a local HTTP server that records the answer. Every event must be answered
//! there within CloudFormation's patience (60 s here; seconds in practice), with the right
//! `Status`, on every path: database up, missing, unreachable; secret missing; configuration
//! broken; a schema newer than the code; a history row refinery would panic on; a migration
//! that fails; two runners at once; the secret's password over verified TLS, and TLS refused.
//!
//! Needs PostgreSQL where `DATABASE_URL` points (default `postgres://postgres@127.0.0.1:5432/postgres`;
//! each test makes its own database), and for the AWS path (the secret read from Secrets
//! Manager) the stand-in where `AWS_ENDPOINT_URL` points (default `http://127.0.0.1:4566`), as
//! `./infra/test` starts them; the failing-secret cases point at a closed port instead.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::Router;
use rustls::pki_types::pem::PemObject;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_postgres_rustls::MakeRustlsConnect;

use support::{connect, database_url, server_url, shipped_migrations};

mod support;

/// What CloudFormation allows here: an answer later than this fails the test.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);
const CREATE_EVENT: &str = include_str!("../../core/tests/events/cfn_create.json");

/// The Runtime API's and the `ResponseURL`'s shared state.
#[derive(Default)]
struct Shared {
    events: Mutex<VecDeque<Value>>,
    event_ready: Notify,
    answers: Mutex<Vec<Value>>,
    answered: Notify,
}

async fn next_invocation(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    loop {
        let notified = shared.event_ready.notified();
        let event = shared.events.lock().unwrap().pop_front();
        if let Some(event) = event {
            let request_id = event["RequestId"].as_str().unwrap_or("by-hand").to_owned();
            let deadline = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                + Duration::from_secs(300);
            let mut headers = HeaderMap::new();
            headers.insert("lambda-runtime-aws-request-id", request_id.parse().unwrap());
            headers.insert(
                "lambda-runtime-deadline-ms",
                deadline.as_millis().to_string().parse().unwrap(),
            );
            headers.insert(
                "lambda-runtime-invoked-function-arn",
                "arn:aws:lambda:us-east-1:123456789012:function:migrate"
                    .parse()
                    .unwrap(),
            );
            return (headers, event.to_string());
        }
        notified.await;
    }
}

async fn accepted() -> StatusCode {
    StatusCode::ACCEPTED
}

async fn cloudformation_answer(
    State(shared): State<Arc<Shared>>,
    UrlPath(_id): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    // A presigned S3 URL is signed for an empty Content-Type: anything else would be refused.
    let content_type = headers.get("content-type").map(|v| v.as_bytes().to_vec());
    assert!(
        content_type.as_ref().is_none_or(|v| v.is_empty()),
        "Content-Type {content_type:?}"
    );
    let answer: Value = serde_json::from_slice(&body).expect("the answer is JSON");
    shared.answers.lock().unwrap().push(answer);
    shared.answered.notify_waiters();
    StatusCode::OK
}

/// One `migrate` process under its own Runtime API, killed when dropped.
struct Function {
    addr: SocketAddr,
    shared: Arc<Shared>,
    child: Child,
    log: String,
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Function {
    /// Starts `migrate` with only the Lambda environment and `vars`.
    async fn start(name: &str, vars: &[(&str, &str)]) -> Function {
        let shared = Arc::new(Shared::default());
        let routes = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_invocation))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(accepted),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(accepted))
            .route("/2018-06-01/runtime/init/error", post(accepted))
            .route("/cloudformation/{id}", put(cloudformation_answer))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes).await });
        let log = std::env::temp_dir()
            .join(format!(
                "migrate-bootstrap-{name}-{}.log",
                std::process::id()
            ))
            .display()
            .to_string();
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_migrate"))
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "osurender-test-migrate")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("RUST_LOG", "info")
            // The local stack's server takes plain connections; the TLS cases set their own.
            .env("DB_SSLMODE", "disable")
            .envs(vars.iter().copied())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .stdin(Stdio::null())
            .spawn()
            .expect("the migrate binary starts");
        Function {
            addr,
            shared,
            child,
            log,
        }
    }

    /// Hands an event of `kind` to the function and waits for its answer on the `ResponseURL`.
    async fn answer(&self, kind: &str, tag: &str) -> Value {
        self.answer_with(kind, tag, |_| {}).await
    }

    /// `answer`, with the event changed by `edit` before it is sent.
    async fn answer_with(&self, kind: &str, tag: &str, edit: impl FnOnce(&mut Value)) -> Value {
        let mut event: Value = serde_json::from_str(CREATE_EVENT).unwrap();
        event["RequestType"] = kind.into();
        event["RequestId"] = format!("{tag}-{kind}").into();
        event["ResponseURL"] = format!("http://{}/cloudformation/{tag}", self.addr).into();
        if kind != "Create" {
            event["PhysicalResourceId"] = "osurender-migrations".into();
            event["OldResourceProperties"] = json!({ "MigrateVersion": "2" });
        }
        edit(&mut event);
        let before = self.shared.answers.lock().unwrap().len();
        let started = Instant::now();
        self.shared.events.lock().unwrap().push_back(event);
        self.shared.event_ready.notify_waiters();
        let answer = tokio::time::timeout(ANSWER_WITHIN, async {
            loop {
                let answered = self.shared.answered.notified();
                if let Some(answer) = self.shared.answers.lock().unwrap().get(before) {
                    return answer.clone();
                }
                answered.await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{kind} not answered within {ANSWER_WITHIN:?}; log: {}",
                self.log
            )
        });
        eprintln!("{tag} {kind}: {:?} {answer}", started.elapsed());
        assert_eq!(answer["RequestId"], format!("{tag}-{kind}"));
        assert_eq!(answer["PhysicalResourceId"], "osurender-migrations");
        assert_eq!(answer["LogicalResourceId"], "Migration");
        answer
    }
}

fn status(answer: &Value) -> &str {
    answer["Status"].as_str().unwrap_or_default()
}

fn reason(answer: &Value) -> &str {
    answer["Reason"].as_str().unwrap_or_default()
}

/// A database name of this test run; dropped first if a previous run left it.
async fn fresh_database(name: &str) -> String {
    let database = format!("migrate_bootstrap_{name}");
    support::drop_database(&database).await;
    database
}

async fn create_empty(database: &str) {
    support::fresh_database(database).await;
}

async fn history(client: &tokio_postgres::Client) -> Vec<(i32, String)> {
    client
        .query(
            "SELECT version, coalesce(name, '') || '/' || coalesce(applied_on, '') || '/' || \
             coalesce(checksum, '') FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_missing_database_is_created_migrated_and_kept_on_delete() {
    let database = fresh_database("up").await;
    let url = database_url(&database);
    let function = Function::start("up", &[("DATABASE_URL", &url)]).await;

    let created = function.answer("Create", "up").await;
    assert_eq!(status(&created), "SUCCESS", "{created}");
    assert_eq!(created["Data"]["Applied"], shipped_migrations().join(","));
    assert!(
        reason(&created).starts_with("database created;"),
        "{}",
        reason(&created)
    );
    let db = connect(&url).await;
    assert_eq!(history(&db).await.len(), shipped_migrations().len());

    let updated = function.answer("Update", "up").await;
    assert_eq!(status(&updated), "SUCCESS", "{updated}");
    assert_eq!(updated["Data"]["Applied"], "");
    assert_eq!(reason(&updated), "the schema is up to date");

    let deleted = function.answer("Delete", "up").await;
    assert_eq!(status(&deleted), "SUCCESS", "{deleted}");
    assert_eq!(history(&db).await.len(), shipped_migrations().len());
}

/// Where the AWS stand-in is (`AWS_ENDPOINT_URL`, or the local stack's default).
fn aws_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| "http://127.0.0.1:4566".into())
}

/// A database secret `secret` in the stand-in's Secrets Manager: the client and its ARN.
async fn put_secret(tag: &str, secret: &Value) -> (aws_sdk_secretsmanager::Client, String) {
    let endpoint = aws_endpoint();
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_secretsmanager::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "bootstrap-test",
        ))
        .load()
        .await;
    let secrets = aws_sdk_secretsmanager::Client::new(&sdk);
    let name = format!("osurender/migrate-bootstrap-{tag}-{}", std::process::id());
    let arn = secrets
        .create_secret()
        .name(&name)
        .secret_string(secret.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("the AWS stand-in at {endpoint}: {e:?}"))
        .arn
        .unwrap();
    (secrets, arn)
}

async fn delete_secret(secrets: &aws_sdk_secretsmanager::Client, arn: &str) {
    let _ = secrets
        .delete_secret()
        .secret_id(arn)
        .force_delete_without_recovery(true)
        .send()
        .await;
}

/// The path every deploy takes on AWS: no `DATABASE_URL`; the credentials from the secret
/// `DB_SECRET_ARN` names (Secrets Manager: the stand-in), the server from `DB_HOST`,
/// `DB_PORT`, `DB_NAME`.
#[tokio::test]
async fn the_database_secret_is_read_per_event() {
    let database = fresh_database("secret_path").await;
    let server: tokio_postgres::Config = server_url().parse().unwrap();
    let host = match &server.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("DATABASE_URL needs a TCP host, not {other:?}"),
    };
    let port = server
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let secret = serde_json::json!({
        "username": server.get_user().unwrap_or("postgres"),
        "password": server.get_password().map(String::from_utf8_lossy).unwrap_or_default(),
    });
    let (secrets, arn) = put_secret("plain", &secret).await;
    let function = Function::start(
        "secret-path",
        &[
            ("DB_SECRET_ARN", &arn),
            ("DB_HOST", &host),
            ("DB_PORT", &port),
            ("DB_NAME", &database),
            ("AWS_ENDPOINT_URL", &aws_endpoint()),
        ],
    )
    .await;
    let created = function.answer("Create", "secret-path").await;
    delete_secret(&secrets, &arn).await;
    assert_eq!(status(&created), "SUCCESS", "{created}");
    assert_eq!(created["Data"]["Applied"], shipped_migrations().join(","));
}

/// The TLS-only server's port and the directory of its CA (`ca.pem`) and the application
/// role's password (`app-password`), where infra/lib.sh and infra/postgres-tls.sh put them.
pub fn tls_server() -> (u16, PathBuf) {
    let dir = std::env::var_os("PG_TLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local/pg-tls"),
        PathBuf::from,
    );
    // As set, or the port infra/postgres-tls.sh picked for this checkout.
    let port = std::env::var("PG_TLS_PORT")
        .ok()
        .filter(|port| !port.is_empty())
        .or_else(|| std::fs::read_to_string(dir.join("port")).ok())
        .expect("PG_TLS_PORT, or the port file of infra/postgres-tls.sh");
    (port.trim().parse().expect("a port"), dir)
}

/// A connection to `database` on the TLS-only server as `postgres`, verified with its CA.
pub async fn connect_tls(database: &str) -> tokio_postgres::Client {
    let (port, dir) = tls_server();
    let pem = std::fs::read(dir.join("ca.pem"))
        .unwrap_or_else(|e| panic!("{}/ca.pem (run ./infra/up.sh): {e}", dir.display()));
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        rustls::pki_types::CertificateDer::pem_slice_iter(&pem).map(Result::unwrap),
    );
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let url = format!("postgres://postgres@localhost:{port}/{database}?sslmode=require");
    let (client, connection) = tokio_postgres::connect(&url, MakeRustlsConnect::new(config))
        .await
        .unwrap_or_else(|e| panic!("the TLS PostgreSQL at {url} (run ./infra/up.sh): {e}"));
    tokio::spawn(connection);
    client
}

/// The secret path as deployed (`DB_SSLMODE=verify-full`): the secret's username and password
/// (a SCRAM role of the TLS-only server of infra/postgres-tls.sh), the server at its certified
/// name, its CA as `DB_SSLROOTCERT`; the database is created and migrated over TLS. With
/// another CA it is FAILED naming the certificate; an unknown mode is FAILED naming the variable.
#[tokio::test]
async fn the_secret_path_works_over_verified_tls_and_only_so() {
    let (port, dir) = tls_server();
    let database = "migrate_bootstrap_tls";
    connect_tls("postgres")
        .await
        .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        .await
        .unwrap();
    let password = std::fs::read_to_string(dir.join("app-password")).unwrap();
    let secret = json!({ "username": "osurender_app", "password": password.trim() });
    let (secrets, arn) = put_secret("tls", &secret).await;
    let (port, endpoint) = (port.to_string(), aws_endpoint());
    let start = |tag: &'static str, sslmode: &'static str, ca: &str| {
        let ca = dir.join(ca).display().to_string();
        let (arn, port, endpoint) = (arn.clone(), port.clone(), endpoint.clone());
        async move {
            let vars = [
                ("DB_SECRET_ARN", arn.as_str()),
                ("DB_HOST", "localhost"),
                ("DB_PORT", port.as_str()),
                ("DB_NAME", database),
                ("AWS_ENDPOINT_URL", endpoint.as_str()),
                ("DB_SSLMODE", sslmode),
                ("DB_SSLROOTCERT", ca.as_str()),
            ];
            Function::start(tag, &vars).await
        }
    };
    let created = start("tls", "verify-full", "ca.pem")
        .await
        .answer("Create", "tls")
        .await;
    let untrusted = start("tls-untrusted", "verify-full", "other-ca.pem")
        .await
        .answer("Update", "tls-untrusted")
        .await;
    let unknown = start("tls-unknown", "verify-ca", "ca.pem")
        .await
        .answer("Update", "tls-unknown")
        .await;
    delete_secret(&secrets, &arn).await;

    assert_eq!(status(&created), "SUCCESS", "{created}");
    assert_eq!(created["Data"]["Applied"], shipped_migrations().join(","));
    let db = connect_tls(database).await;
    assert_eq!(history(&db).await.len(), shipped_migrations().len());
    assert_eq!(status(&untrusted), "FAILED", "{untrusted}");
    assert!(
        reason(&untrusted).contains("certificate"),
        "{}",
        reason(&untrusted)
    );
    assert_eq!(status(&unknown), "FAILED", "{unknown}");
    assert!(
        reason(&unknown).contains("DB_SSLMODE"),
        "{}",
        reason(&unknown)
    );
}

#[tokio::test]
async fn delete_answers_at_once_without_the_secret_or_the_database() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let function = Function::start(
        "delete",
        &[
            (
                "DB_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:osurender/none",
            ),
            ("DB_HOST", "127.0.0.1"),
            ("AWS_ENDPOINT_URL", &nowhere),
            ("DB_TIMEOUT_MS", "not a number"),
        ],
    )
    .await;
    let started = Instant::now();
    let deleted = function.answer("Delete", "delete").await;
    assert_eq!(status(&deleted), "SUCCESS", "{deleted}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A missing database whose user may not create one: FAILED, saying what to run.
#[tokio::test]
async fn a_missing_database_it_may_not_create_names_the_statement() {
    let database = fresh_database("nocreate").await;
    let admin = connect(&database_url("postgres")).await;
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE migrate_bootstrap_nocreate LOGIN NOCREATEDB; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$",
        )
        .await
        .unwrap();
    let server: tokio_postgres::Config = server_url().parse().unwrap();
    let host = match &server.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("DATABASE_URL needs a TCP host, not {other:?}"),
    };
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let url = format!("postgres://migrate_bootstrap_nocreate@{host}:{port}/{database}");
    let function = Function::start("nocreate", &[("DATABASE_URL", &url)]).await;
    let created = function.answer("Create", "nocreate").await;
    assert_eq!(status(&created), "FAILED", "{created}");
    assert!(
        reason(&created).contains(&format!(
            "run `CREATE DATABASE \"{database}\" OWNER \"migrate_bootstrap_nocreate\"`"
        )),
        "{}",
        reason(&created)
    );
}

#[tokio::test]
async fn an_unreachable_database_fails_and_the_function_lives_on() {
    let url = format!("postgres://postgres@127.0.0.1:{}/osurender", closed_port());
    let function = Function::start("unreachable", &[("DATABASE_URL", &url)]).await;
    let created = function.answer("Create", "unreachable").await;
    assert_eq!(status(&created), "FAILED", "{created}");
    assert!(
        reason(&created).contains("connecting"),
        "{}",
        reason(&created)
    );
    let deleted = function.answer("Delete", "unreachable").await;
    assert_eq!(status(&deleted), "SUCCESS", "{deleted}");
}

/// CloudFormation rolling back a failed deploy sends an Update whose `MigrateVersion` is older
/// than the one it replaces: answered SUCCESS without touching the database (here unreachable,
/// as when the database is what failed), while a forward Update to it is FAILED.
#[tokio::test]
async fn a_rollback_update_succeeds_without_the_database() {
    let url = format!("postgres://postgres@127.0.0.1:{}/osurender", closed_port());
    let function = Function::start("rollback", &[("DATABASE_URL", &url)]).await;
    let rollback = |event: &mut Value| {
        event["ResourceProperties"]["MigrateVersion"] = "9".into();
        event["OldResourceProperties"]["MigrateVersion"] = "10".into();
    };
    let rolled_back = function.answer_with("Update", "rollback", rollback).await;
    assert_eq!(status(&rolled_back), "SUCCESS", "{rolled_back}");
    assert!(
        reason(&rolled_back).contains("rollback (MigrateVersion 10 to 9)"),
        "{}",
        reason(&rolled_back)
    );
    assert_eq!(rolled_back["Data"]["Applied"], "");
    let forward = function
        .answer_with("Update", "forward", |event| {
            event["ResourceProperties"]["MigrateVersion"] = "10".into();
            event["OldResourceProperties"]["MigrateVersion"] = "9".into();
        })
        .await;
    assert_eq!(status(&forward), "FAILED", "{forward}");
    assert!(
        reason(&forward).contains("connecting"),
        "{}",
        reason(&forward)
    );
}

/// A migration behind a lock another transaction holds (here V1's first statement, `CREATE
/// TYPE job_status`, behind an uncommitted one of the same name) waits `MIGRATE_LOCK_TIMEOUT`,
/// then FAILED says so, well before the run's deadline; nothing of the run stays, and once the
/// other transaction has ended the next event applies everything.
#[tokio::test]
async fn a_migration_behind_a_held_lock_fails_within_the_lock_timeout() {
    let database = fresh_database("locked").await;
    create_empty(&database).await;
    let url = database_url(&database);
    let holder = connect(&url).await;
    holder
        .batch_execute("BEGIN; CREATE TYPE job_status AS ENUM ('held')")
        .await
        .unwrap();
    let function = Function::start(
        "locked",
        &[("DATABASE_URL", &url), ("MIGRATE_LOCK_TIMEOUT", "1")],
    )
    .await;
    let started = Instant::now();
    let blocked = function.answer("Create", "locked").await;
    let waited = started.elapsed();
    assert_eq!(status(&blocked), "FAILED", "{blocked}");
    for words in ["lock timeout", "MIGRATE_LOCK_TIMEOUT", "nothing applied"] {
        assert!(reason(&blocked).contains(words), "{}", reason(&blocked));
    }
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let db = connect(&url).await;
    let tables: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' \
             AND tablename <> 'refinery_schema_history'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0);

    holder.batch_execute("ROLLBACK").await.unwrap();
    let retried = function.answer("Update", "locked").await;
    assert_eq!(status(&retried), "SUCCESS", "{retried}");
    assert_eq!(retried["Data"]["Applied"], shipped_migrations().join(","));
}

/// `MIGRATE_DEADLINE` bounds the whole run: here it waits for the migration lock another
/// session holds (it would poll for 30 s) and is given up after 2 s, FAILED saying so.
#[tokio::test]
async fn the_run_is_given_up_at_migrate_deadline() {
    let database = fresh_database("deadline").await;
    create_empty(&database).await;
    let url = database_url(&database);
    let holder = connect(&url).await;
    let lock = osurender_core::domain::client::advisory_lock_id("osurender:migrations");
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&lock])
        .await
        .unwrap();
    let function = Function::start(
        "deadline",
        &[("DATABASE_URL", &url), ("MIGRATE_DEADLINE", "2")],
    )
    .await;
    let started = Instant::now();
    let given_up = function.answer("Create", "deadline").await;
    let waited = started.elapsed();
    assert_eq!(status(&given_up), "FAILED", "{given_up}");
    assert!(
        reason(&given_up).contains("no result within 2 s"),
        "{}",
        reason(&given_up)
    );
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_missing_secret_fails_with_its_reason() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let function = Function::start(
        "secret",
        &[
            (
                "DB_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:osurender/none",
            ),
            ("DB_HOST", "127.0.0.1"),
            ("AWS_ENDPOINT_URL", &nowhere),
        ],
    )
    .await;
    for kind in ["Create", "Update"] {
        let answer = function.answer(kind, "secret").await;
        assert_eq!(status(&answer), "FAILED", "{answer}");
        assert!(
            reason(&answer).contains("database secret"),
            "{}",
            reason(&answer)
        );
    }
}

#[tokio::test]
async fn a_broken_configuration_fails_with_its_reason() {
    let function = Function::start("config", &[("DB_TIMEOUT_MS", "soon")]).await;
    let answer = function.answer("Create", "config").await;
    assert_eq!(status(&answer), "FAILED", "{answer}");
    assert!(
        reason(&answer).contains("DB_TIMEOUT_MS"),
        "{}",
        reason(&answer)
    );
}

/// A rollback (or an older release deployed again) sends an Update from code that lacks the
/// newest migrations: it succeeds and changes nothing.
#[tokio::test]
async fn an_update_over_a_newer_schema_succeeds_and_changes_nothing() {
    let database = fresh_database("newer").await;
    let url = database_url(&database);
    let function = Function::start("newer", &[("DATABASE_URL", &url)]).await;
    assert_eq!(status(&function.answer("Create", "newer").await), "SUCCESS");
    let db = connect(&url).await;
    db.batch_execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
         VALUES (9999, 'from_a_later_release', '2026-11-30T12:00:00Z', '42')",
    )
    .await
    .unwrap();
    let before = history(&db).await;

    let updated = function.answer("Update", "newer").await;
    assert_eq!(status(&updated), "SUCCESS", "{updated}");
    assert_eq!(updated["Data"]["Applied"], "");
    assert!(
        reason(&updated).contains("V9999__from_a_later_release"),
        "{}",
        reason(&updated)
    );
    assert_eq!(history(&db).await, before);
}

/// Rows refinery would `unwrap` into a panic (and so an abort, and no answer) are refused with
/// FAILED; the same process answers again once the row is repaired.
#[tokio::test]
async fn malformed_history_rows_fail_without_a_panic() {
    let database = fresh_database("malformed").await;
    let url = database_url(&database);
    let function = Function::start("malformed", &[("DATABASE_URL", &url)]).await;
    assert_eq!(
        status(&function.answer("Create", "malformed").await),
        "SUCCESS"
    );
    let db = connect(&url).await;
    let original = history(&db).await;
    for (damage, expected) in [
        ("applied_on = 'yesterday'", "RFC 3339"),
        ("name = NULL", "name is NULL"),
        ("checksum = 'abc'", "checksum"),
    ] {
        db.batch_execute(&format!(
            "UPDATE refinery_schema_history SET {damage} WHERE version = 1"
        ))
        .await
        .unwrap();
        let answer = function.answer("Update", "malformed").await;
        assert_eq!(status(&answer), "FAILED", "{damage}: {answer}");
        assert!(
            reason(&answer).contains(expected) && reason(&answer).contains("version `1`"),
            "{damage}: {}",
            reason(&answer)
        );
        db.batch_execute(&format!(
            "UPDATE refinery_schema_history SET name = '{}', applied_on = '2026-11-30T12:00:00Z', \
             checksum = '{}' WHERE version = 1",
            original[0].1.split('/').next().unwrap(),
            original[0].1.rsplit('/').next().unwrap(),
        ))
        .await
        .unwrap();
    }
    let repaired = function.answer("Update", "malformed").await;
    assert_eq!(status(&repaired), "SUCCESS", "{repaired}");
}

/// A migration that fails (here V1's `CREATE TABLE jobs` meets a table of that name) leaves
/// the schema as it was, and the next run, once the obstacle is gone, applies everything.
#[tokio::test]
async fn a_failed_migration_changes_nothing_and_can_be_retried() {
    let database = fresh_database("retry").await;
    create_empty(&database).await;
    let url = database_url(&database);
    let db = connect(&url).await;
    db.batch_execute("CREATE TABLE jobs (squatter int)")
        .await
        .unwrap();
    let function = Function::start("retry", &[("DATABASE_URL", &url)]).await;

    let failed = function.answer("Create", "retry").await;
    assert_eq!(status(&failed), "FAILED", "{failed}");
    assert!(
        reason(&failed).contains("nothing applied")
            && reason(&failed).contains("relation \"jobs\" already exists"),
        "{}",
        reason(&failed)
    );
    assert_eq!(history(&db).await, Vec::new());
    let outbox = db
        .query_one("SELECT to_regclass('outbox_events') IS NULL", &[])
        .await
        .unwrap();
    assert!(outbox.get::<_, bool>(0), "V1 was applied in part");

    db.batch_execute("DROP TABLE jobs").await.unwrap();
    let retried = function.answer("Update", "retry").await;
    assert_eq!(status(&retried), "SUCCESS", "{retried}");
    assert_eq!(retried["Data"]["Applied"], shipped_migrations().join(","));
}

/// Two runners at once (a deploy while someone runs it by hand): the advisory lock makes one
/// apply everything and the other find nothing left to do; each migration is applied once.
#[tokio::test]
async fn two_runners_at_once_apply_each_migration_once() {
    let database = fresh_database("twice").await;
    create_empty(&database).await;
    let url = database_url(&database);
    let first = Function::start("twice-a", &[("DATABASE_URL", &url)]).await;
    let second = Function::start("twice-b", &[("DATABASE_URL", &url)]).await;
    let (a, b) = tokio::join!(
        first.answer("Create", "twice-a"),
        second.answer("Create", "twice-b")
    );
    assert_eq!(status(&a), "SUCCESS", "{a}");
    assert_eq!(status(&b), "SUCCESS", "{b}");
    let mut applied = [
        a["Data"]["Applied"].as_str().unwrap().to_owned(),
        b["Data"]["Applied"].as_str().unwrap().to_owned(),
    ];
    applied.sort();
    assert_eq!(applied, [String::new(), shipped_migrations().join(",")]);
    let db = connect(&url).await;
    assert_eq!(history(&db).await.len(), shipped_migrations().len());
}
