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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::put;
use axum::Router;
use osurender_testkit::lambda::Function;
use osurender_testkit::stack::{aws_config, aws_endpoint, connect, server_host_port, server_url};
use osurender_testkit::tls::{TlsServer, APP_ROLE, CERTIFIED_HOST};
use osurender_testkit::{fresh_database, Database};
use serde_json::{json, Value};
use tokio::sync::Notify;

use support::shipped_migrations;

mod support;

/// What CloudFormation allows here: an answer later than this fails the test.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);
const CREATE_EVENT: &str = include_str!("../../core/tests/events/cfn_create.json");

/// The answers PUT to the events' `ResponseURL`, as CloudFormation receives them.
#[derive(Default)]
struct Answers {
    received: Mutex<Vec<Value>>,
    answered: Notify,
}

async fn cloudformation_answer(
    State(answers): State<Arc<Answers>>,
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
    answers.received.lock().unwrap().push(answer);
    answers.answered.notify_waiters();
    StatusCode::OK
}

/// One `migrate` process under its own Runtime API (the testkit's), which also serves the
/// events' `ResponseURL`; killed when dropped.
struct Migrate {
    function: Function,
    answers: Arc<Answers>,
}

impl Migrate {
    /// Starts `migrate` with only the Lambda environment and `vars`.
    async fn start(name: &str, vars: &[(&str, &str)]) -> Migrate {
        let answers = Arc::new(Answers::default());
        let response_url = Router::new()
            .route("/cloudformation/{id}", put(cloudformation_answer))
            .with_state(answers.clone());
        let function = Function::of(env!("CARGO_BIN_EXE_migrate"), "migrate")
            // The local stack's server takes plain connections; the TLS cases set their own.
            .vars(&[("DB_SSLMODE", "disable")])
            .vars(vars)
            .routes(response_url)
            .start(name)
            .await;
        Migrate { function, answers }
    }

    /// Hands an event of `kind` to the function and waits for its answer on the `ResponseURL`.
    async fn answer(&self, kind: &str, tag: &str) -> Value {
        self.answer_with(kind, tag, |_| {}).await
    }

    /// `answer`, with the event changed by `edit` before it is sent.
    async fn answer_with(&self, kind: &str, tag: &str, edit: impl FnOnce(&mut Value)) -> Value {
        let request_id = format!("{tag}-{kind}");
        let runtime = self.function.runtime();
        let mut event: Value = serde_json::from_str(CREATE_EVENT).unwrap();
        event["RequestType"] = kind.into();
        event["RequestId"] = request_id.clone().into();
        event["ResponseURL"] = runtime.url(&format!("/cloudformation/{tag}")).into();
        if kind != "Create" {
            event["PhysicalResourceId"] = "osurender-migrations".into();
            event["OldResourceProperties"] = json!({ "MigrateVersion": "2" });
        }
        edit(&mut event);
        let before = self.answers.received.lock().unwrap().len();
        let started = Instant::now();
        runtime.send(&request_id, event);
        let answer = tokio::time::timeout(ANSWER_WITHIN, async {
            loop {
                let answered = self.answers.answered.notified();
                if let Some(answer) = self.answers.received.lock().unwrap().get(before) {
                    return answer.clone();
                }
                answered.await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{kind} not answered within {ANSWER_WITHIN:?}; log: {}",
                self.function.log()
            )
        });
        eprintln!("{tag} {kind}: {:?} {answer}", started.elapsed());
        assert_eq!(answer["RequestId"], request_id);
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

/// The answer's `Status` is `expected` and its `Reason` says each of `words`.
#[track_caller]
fn assert_answer(answer: &Value, expected: &str, words: &[&str]) {
    assert_eq!(status(answer), expected, "{answer}");
    for words in words {
        assert!(
            reason(answer).contains(words),
            "{words}: {}",
            reason(answer)
        );
    }
}

/// A SUCCESS that applied every shipped migration.
#[track_caller]
fn assert_applied_everything(answer: &Value) {
    assert_answer(answer, "SUCCESS", &[]);
    assert_eq!(answer["Data"]["Applied"], shipped_migrations().join(","));
}

/// A unique database name of this test, not created (the function creates it); dropped at the
/// end all the same.
fn missing_database(name: &str) -> Database {
    Database::reserve(&format!("migrate_{name}"))
}

/// An empty database of this test.
async fn empty_database(name: &str) -> Database {
    fresh_database(&format!("migrate_{name}")).await
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

/// The history holds every shipped migration.
async fn assert_history_complete(db: &tokio_postgres::Client) {
    assert_eq!(history(db).await.len(), shipped_migrations().len());
}

fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A database URL nothing answers at.
fn unreachable_url() -> String {
    format!("postgres://postgres@127.0.0.1:{}/osurender", closed_port())
}

#[tokio::test]
async fn a_missing_database_is_created_migrated_and_kept_on_delete() {
    let database = missing_database("up");
    let function = Migrate::start("up", &[("DATABASE_URL", &database.url())]).await;

    let created = function.answer("Create", "up").await;
    assert_applied_everything(&created);
    assert!(
        reason(&created).starts_with("database created;"),
        "{}",
        reason(&created)
    );
    let db = database.connect().await;
    assert_history_complete(&db).await;

    let updated = function.answer("Update", "up").await;
    assert_answer(&updated, "SUCCESS", &[]);
    assert_eq!(updated["Data"]["Applied"], "");
    assert_eq!(reason(&updated), "the schema is up to date");

    let deleted = function.answer("Delete", "up").await;
    assert_answer(&deleted, "SUCCESS", &[]);
    assert_history_complete(&db).await;
}

/// A database secret `secret` in the stand-in's Secrets Manager: the client and its ARN.
async fn put_secret(tag: &str, secret: &Value) -> (aws_sdk_secretsmanager::Client, String) {
    let secrets = aws_sdk_secretsmanager::Client::new(&aws_config().await);
    let name = format!("osurender/migrate-bootstrap-{tag}-{}", std::process::id());
    let arn = secrets
        .create_secret()
        .name(&name)
        .secret_string(secret.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("the AWS stand-in at {}: {e:?}", aws_endpoint()))
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
    let database = missing_database("secret_path");
    let server: tokio_postgres::Config = server_url().parse().unwrap();
    let (host, port) = server_host_port();
    let secret = serde_json::json!({
        "username": server.get_user().unwrap_or("postgres"),
        "password": server.get_password().map(String::from_utf8_lossy).unwrap_or_default(),
    });
    let (secrets, arn) = put_secret("plain", &secret).await;
    let function = Migrate::start(
        "secret-path",
        &[
            ("DB_SECRET_ARN", &arn),
            ("DB_HOST", &host),
            ("DB_PORT", &port.to_string()),
            ("DB_NAME", database.name()),
            ("AWS_ENDPOINT_URL", &aws_endpoint()),
        ],
    )
    .await;
    let created = function.answer("Create", "secret-path").await;
    delete_secret(&secrets, &arn).await;
    assert_applied_everything(&created);
}

/// The secret path as deployed (`DB_SSLMODE=verify-full`): the secret's username and password
/// (a SCRAM role of the TLS-only server of infra/postgres-tls.sh), the server at its certified
/// name, its CA as `DB_SSLROOTCERT`; the database is created and migrated over TLS. With
/// another CA it is FAILED naming the certificate; an unknown mode is FAILED naming the variable.
#[tokio::test]
async fn the_secret_path_works_over_verified_tls_and_only_so() {
    let server = TlsServer::local();
    let database = server.reserve_database("migrate_tls");
    let secret = json!({ "username": APP_ROLE, "password": server.app_password() });
    let (secrets, arn) = put_secret("tls", &secret).await;
    let (port, endpoint) = (server.port().to_string(), aws_endpoint());
    let start = |tag: &'static str, sslmode: &'static str, ca: String| {
        let (arn, port, endpoint, name) = (&arn, &port, &endpoint, database.name());
        async move {
            let vars = [
                ("DB_SECRET_ARN", arn.as_str()),
                ("DB_HOST", CERTIFIED_HOST),
                ("DB_PORT", port.as_str()),
                ("DB_NAME", name),
                ("AWS_ENDPOINT_URL", endpoint.as_str()),
                ("DB_SSLMODE", sslmode),
                ("DB_SSLROOTCERT", ca.as_str()),
            ];
            Migrate::start(tag, &vars).await
        }
    };
    let created = start("tls", "verify-full", server.ca())
        .await
        .answer("Create", "tls")
        .await;
    let untrusted = start("tls-untrusted", "verify-full", server.other_ca())
        .await
        .answer("Update", "tls-untrusted")
        .await;
    let unknown = start("tls-unknown", "verify-ca", server.ca())
        .await
        .answer("Update", "tls-unknown")
        .await;
    delete_secret(&secrets, &arn).await;

    assert_applied_everything(&created);
    assert_history_complete(&database.connect().await).await;
    assert_answer(&untrusted, "FAILED", &["certificate"]);
    assert_answer(&unknown, "FAILED", &["DB_SSLMODE"]);
}

/// The variables of a function whose database secret cannot be read: the stand-in is nowhere.
fn unreadable_secret(nowhere: &str) -> [(&str, &str); 3] {
    [
        (
            "DB_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:osurender/none",
        ),
        ("DB_HOST", "127.0.0.1"),
        ("AWS_ENDPOINT_URL", nowhere),
    ]
}

#[tokio::test]
async fn delete_answers_at_once_without_the_secret_or_the_database() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let mut vars = unreadable_secret(&nowhere).to_vec();
    vars.push(("DB_TIMEOUT_MS", "not a number"));
    let function = Migrate::start("delete", &vars).await;
    let started = Instant::now();
    let deleted = function.answer("Delete", "delete").await;
    assert_answer(&deleted, "SUCCESS", &[]);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A missing database whose user may not create one: FAILED, saying what to run.
#[tokio::test]
async fn a_missing_database_it_may_not_create_names_the_statement() {
    let database = missing_database("nocreate");
    let admin = connect(&osurender_testkit::stack::database_url("postgres")).await;
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE migrate_bootstrap_nocreate LOGIN NOCREATEDB; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$",
        )
        .await
        .unwrap();
    let (host, port) = server_host_port();
    let name = database.name();
    let url = format!("postgres://migrate_bootstrap_nocreate@{host}:{port}/{name}");
    let function = Migrate::start("nocreate", &[("DATABASE_URL", &url)]).await;
    let created = function.answer("Create", "nocreate").await;
    let statement =
        format!("run `CREATE DATABASE \"{name}\" OWNER \"migrate_bootstrap_nocreate\"`");
    assert_answer(&created, "FAILED", &[&statement]);
}

#[tokio::test]
async fn an_unreachable_database_fails_and_the_function_lives_on() {
    let function = Migrate::start("unreachable", &[("DATABASE_URL", &unreachable_url())]).await;
    let created = function.answer("Create", "unreachable").await;
    assert_answer(&created, "FAILED", &["connecting"]);
    let deleted = function.answer("Delete", "unreachable").await;
    assert_answer(&deleted, "SUCCESS", &[]);
}

/// An Update's edit: `MigrateVersion` from `old` to `new`.
fn migrate_version(old: &'static str, new: &'static str) -> impl FnOnce(&mut Value) {
    move |event| {
        event["ResourceProperties"]["MigrateVersion"] = new.into();
        event["OldResourceProperties"]["MigrateVersion"] = old.into();
    }
}

/// CloudFormation rolling back a failed deploy sends an Update whose `MigrateVersion` is older
/// than the one it replaces: answered SUCCESS without touching the database (here unreachable,
/// as when the database is what failed), while a forward Update to it is FAILED.
#[tokio::test]
async fn a_rollback_update_succeeds_without_the_database() {
    let function = Migrate::start("rollback", &[("DATABASE_URL", &unreachable_url())]).await;
    let rolled_back = function
        .answer_with("Update", "rollback", migrate_version("10", "9"))
        .await;
    assert_answer(
        &rolled_back,
        "SUCCESS",
        &["rollback (MigrateVersion 10 to 9)"],
    );
    assert_eq!(rolled_back["Data"]["Applied"], "");
    let forward = function
        .answer_with("Update", "forward", migrate_version("9", "10"))
        .await;
    assert_answer(&forward, "FAILED", &["connecting"]);
}

/// Runs a `Create` of a function with `vars` on the empty database `holder` is connected to
/// and holds a lock of: it is FAILED saying `why`, after waiting at least `at_least` and far
/// less than the run's deadline. The function, to go on.
async fn fails_waiting(
    database: &Database,
    tag: &str,
    vars: &[(&str, &str)],
    at_least: Duration,
    why: &[&str],
) -> Migrate {
    let url = database.url();
    let mut vars = vars.to_vec();
    vars.push(("DATABASE_URL", &url));
    let function = Migrate::start(tag, &vars).await;
    let started = Instant::now();
    let blocked = function.answer("Create", tag).await;
    let waited = started.elapsed();
    assert_answer(&blocked, "FAILED", why);
    assert!(
        waited >= at_least && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    function
}

/// A migration behind a lock another transaction holds (here V1's first statement, `CREATE
/// TYPE job_status`, behind an uncommitted one of the same name) waits `MIGRATE_LOCK_TIMEOUT`,
/// then FAILED says so, well before the run's deadline; nothing of the run stays, and once the
/// other transaction has ended the next event applies everything.
#[tokio::test]
async fn a_migration_behind_a_held_lock_fails_within_the_lock_timeout() {
    let database = empty_database("locked").await;
    let holder = database.connect().await;
    holder
        .batch_execute("BEGIN; CREATE TYPE job_status AS ENUM ('held')")
        .await
        .unwrap();
    let function = fails_waiting(
        &database,
        "locked",
        &[("MIGRATE_LOCK_TIMEOUT", "1")],
        Duration::from_secs(1),
        &["lock timeout", "MIGRATE_LOCK_TIMEOUT", "nothing applied"],
    )
    .await;
    let db = database.connect().await;
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
    assert_applied_everything(&function.answer("Update", "locked").await);
}

/// `MIGRATE_DEADLINE` bounds the whole run: here it waits for the migration lock another
/// session holds (it would poll for 30 s) and is given up after 2 s, FAILED saying so.
#[tokio::test]
async fn the_run_is_given_up_at_migrate_deadline() {
    let database = empty_database("deadline").await;
    let holder = database.connect().await;
    let lock = osurender_core::domain::client::advisory_lock_id("osurender:migrations");
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&lock])
        .await
        .unwrap();
    fails_waiting(
        &database,
        "deadline",
        &[("MIGRATE_DEADLINE", "2")],
        Duration::from_secs(2),
        &["no result within 2 s"],
    )
    .await;
}

#[tokio::test]
async fn a_missing_secret_fails_with_its_reason() {
    let nowhere = format!("http://127.0.0.1:{}", closed_port());
    let function = Migrate::start("secret", &unreadable_secret(&nowhere)).await;
    for kind in ["Create", "Update"] {
        let answer = function.answer(kind, "secret").await;
        assert_answer(&answer, "FAILED", &["database secret"]);
    }
}

#[tokio::test]
async fn a_broken_configuration_fails_with_its_reason() {
    let function = Migrate::start("config", &[("DB_TIMEOUT_MS", "soon")]).await;
    let answer = function.answer("Create", "config").await;
    assert_answer(&answer, "FAILED", &["DB_TIMEOUT_MS"]);
}

/// A function that created and migrated `database` (missing until then), and a connection
/// to it.
async fn migrated_by(database: &Database, tag: &str) -> (Migrate, tokio_postgres::Client) {
    let function = Migrate::start(tag, &[("DATABASE_URL", &database.url())]).await;
    assert_answer(&function.answer("Create", tag).await, "SUCCESS", &[]);
    (function, database.connect().await)
}

/// A rollback (or an older release deployed again) sends an Update from code that lacks the
/// newest migrations: it succeeds and changes nothing.
#[tokio::test]
async fn an_update_over_a_newer_schema_succeeds_and_changes_nothing() {
    let database = missing_database("newer");
    let (function, db) = migrated_by(&database, "newer").await;
    db.batch_execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
         VALUES (9999, 'from_a_later_release', '2026-11-30T12:00:00Z', '42')",
    )
    .await
    .unwrap();
    let before = history(&db).await;

    let updated = function.answer("Update", "newer").await;
    assert_answer(&updated, "SUCCESS", &["V9999__from_a_later_release"]);
    assert_eq!(updated["Data"]["Applied"], "");
    assert_eq!(history(&db).await, before);
}

/// Rows refinery would `unwrap` into a panic (and so an abort, and no answer) are refused with
/// FAILED; the same process answers again once the row is repaired.
#[tokio::test]
async fn malformed_history_rows_fail_without_a_panic() {
    let database = missing_database("malformed");
    let (function, db) = migrated_by(&database, "malformed").await;
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
        assert_answer(&answer, "FAILED", &[expected, "version `1`"]);
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
    assert_answer(&repaired, "SUCCESS", &[]);
}

/// A migration that fails (here V1's `CREATE TABLE jobs` meets a table of that name) leaves
/// the schema as it was, and the next run, once the obstacle is gone, applies everything.
#[tokio::test]
async fn a_failed_migration_changes_nothing_and_can_be_retried() {
    let database = empty_database("retry").await;
    let db = database.connect().await;
    db.batch_execute("CREATE TABLE jobs (squatter int)")
        .await
        .unwrap();
    let function = Migrate::start("retry", &[("DATABASE_URL", &database.url())]).await;

    let failed = function.answer("Create", "retry").await;
    assert_answer(
        &failed,
        "FAILED",
        &["nothing applied", "relation \"jobs\" already exists"],
    );
    assert_eq!(history(&db).await, Vec::new());
    let outbox = db
        .query_one("SELECT to_regclass('outbox_events') IS NULL", &[])
        .await
        .unwrap();
    assert!(outbox.get::<_, bool>(0), "V1 was applied in part");

    db.batch_execute("DROP TABLE jobs").await.unwrap();
    assert_applied_everything(&function.answer("Update", "retry").await);
}

/// Two runners at once (a deploy while someone runs it by hand): the advisory lock makes one
/// apply everything and the other find nothing left to do; each migration is applied once.
#[tokio::test]
async fn two_runners_at_once_apply_each_migration_once() {
    let database = empty_database("twice").await;
    let url = database.url();
    let first = Migrate::start("twice-a", &[("DATABASE_URL", &url)]).await;
    let second = Migrate::start("twice-b", &[("DATABASE_URL", &url)]).await;
    let (a, b) = tokio::join!(
        first.answer("Create", "twice-a"),
        second.answer("Create", "twice-b")
    );
    assert_answer(&a, "SUCCESS", &[]);
    assert_answer(&b, "SUCCESS", &[]);
    let mut applied = [
        a["Data"]["Applied"].as_str().unwrap().to_owned(),
        b["Data"]["Applied"].as_str().unwrap().to_owned(),
    ];
    applied.sort();
    assert_eq!(applied, [String::new(), shipped_migrations().join(",")]);
    assert_history_complete(&database.connect().await).await;
}

/// A login role of one test, dropped (with what it was granted in the database it has outlived)
/// when the guard drops; declare it before the database so the database goes first.
struct TestRole {
    name: String,
}

impl Drop for TestRole {
    fn drop(&mut self) {
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let admin = TlsServer::local().connect("postgres").await;
                admin
                    .batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
                    .await
            })
        });
        if let Ok(Err(error)) = dropped.join() {
            eprintln!("dropping role {}: {error}", self.name);
        }
    }
}

/// `DB_APP_SECRET_ARN` (deploys on AWS): after the migrations migrate creates the application
/// role from the secret, which may then log in (its password, over TLS), read and change rows,
/// and never change the schema (create, alter, drop, truncate); a rotated secret's next run sets
/// the new password (the old one no longer logs in).
#[tokio::test]
async fn migrate_makes_the_application_role_and_sets_a_rotated_password() {
    use osurender_core::adapters::postgres::{parse_url, pool, Tls};
    use osurender_core::support::config::DbSslMode;

    let server = TlsServer::local();
    let role = TestRole {
        name: format!(
            "osurender_t_role_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
    };
    let database = server.reserve_database("migrate_app_role");
    // The master: the TLS server's `postgres`, as RDS's master user.
    let master = json!({ "username": "postgres", "password": "unused: trust" });
    let (secrets, master_arn) = put_secret("app-role-master", &master).await;
    let app = |password: &str| json!({ "username": role.name, "password": password }).to_string();
    let app_secret = secrets
        .create_secret()
        .name(format!("osurender/migrate-app-role-{}", role.name))
        .secret_string(app("first password"))
        .send()
        .await
        .unwrap();
    let app_arn = app_secret.arn.unwrap();
    let (port, endpoint) = (server.port().to_string(), aws_endpoint());
    let ca = server.ca();
    let vars = [
        ("DB_SECRET_ARN", master_arn.as_str()),
        ("DB_APP_SECRET_ARN", app_arn.as_str()),
        ("DB_HOST", CERTIFIED_HOST),
        ("DB_PORT", port.as_str()),
        ("DB_NAME", database.name()),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("DB_SSLMODE", "verify-full"),
        ("DB_SSLROOTCERT", ca.as_str()),
    ];
    let tls = Tls::new(DbSslMode::VerifyFull, Some(std::path::Path::new(&ca))).unwrap();
    let login = async |password: &str| {
        let url = format!(
            "postgres://{}:{}@{CERTIFIED_HOST}:{port}/{}",
            role.name,
            password.replace(' ', "%20"),
            database.name()
        );
        let pool = pool(parse_url(&url).unwrap(), &tls, 1, Duration::from_secs(5)).unwrap();
        pool.get().await.map(|conn| (pool.clone(), conn))
    };

    let created = Migrate::start("app-role", &vars)
        .await
        .answer("Create", "app-role")
        .await;
    assert_eq!(status(&created), "SUCCESS", "{created}");
    let (_pool, conn) = login("first password").await.expect("the role logs in");
    let jobs: i64 = conn
        .query_one("SELECT count(*) FROM jobs", &[])
        .await
        .expect("it reads rows")
        .get(0);
    assert_eq!(jobs, 0);
    conn.batch_execute("DELETE FROM webhook_nonces WHERE false")
        .await
        .expect("it changes rows");
    for schema in [
        "CREATE TABLE stolen (x int)",
        "ALTER TABLE jobs ADD COLUMN stolen int",
        "DROP TABLE webhook_nonces",
        "TRUNCATE jobs CASCADE",
    ] {
        let refused = conn.batch_execute(schema).await;
        assert_eq!(
            refused.unwrap_err().code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "it never changes the schema: {schema}"
        );
    }
    assert!(
        login("a guess").await.is_err(),
        "a wrong password does not log in"
    );

    secrets
        .put_secret_value()
        .secret_id(&app_arn)
        .secret_string(app("second password"))
        .send()
        .await
        .unwrap();
    let updated = Migrate::start("app-role-rotated", &vars)
        .await
        .answer("Update", "app-role-rotated")
        .await;
    assert_eq!(status(&updated), "SUCCESS", "{updated}");
    assert!(
        login("second password").await.is_ok(),
        "the rotated password logs in"
    );
    assert!(
        login("first password").await.is_err(),
        "the old one no longer does"
    );
    drop(conn);
    delete_secret(&secrets, &master_arn).await;
    delete_secret(&secrets, &app_arn).await;
}
