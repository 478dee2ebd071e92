//! The built `osurender-admin` against a real PostgreSQL database of each test's own (the
//! testkit's, dropped at the end), migrated by the core's runner: the JSON it prints, what it
//! stores (only the key's hash), what it never shows again, revocation as a request's lookup
//! sees it, and its exit codes. The Lambda form (`{"command": [...]}`) runs the same commands,
//! the binary under the testkit's Lambda Runtime API.
//!
//! Needs PostgreSQL where `DATABASE_URL` points (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), and for the TLS mode the TLS-only one of
//! `infra/postgres-tls.sh` (`PG_TLS_DIR`), as `./infra/up.sh` starts them.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use osurender_core::adapters::postgres::keys::PgKeyStore;
use osurender_core::adapters::postgres::{self as db, migrations, Tls};
use osurender_core::domain::key::{ApiKey, KeyId};
use osurender_core::ports::keys::KeyStore;
use osurender_core::support::config::{DbSslMode, MAX_KEY_CACHE_TTL};
use osurender_core::usecases::keys::{KeyLookup, KeyRefusal};
use osurender_testkit::lambda::{Answer, Function};
use osurender_testkit::stack::connect;
use osurender_testkit::tls::TlsServer;
use osurender_testkit::{fresh_database, Database};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A database of this test's own (dropped with the guard), migrated unless `migrated` is
/// false: the guard, and the database's URL.
async fn test_database(test: &str, migrated: bool) -> (Database, String) {
    let database = fresh_database(&format!("admin_{test}")).await;
    let url = database.url();
    if migrated {
        migrations::connect_and_apply(
            db::parse_url(&url).unwrap(),
            &plain(),
            TIMEOUT,
            TIMEOUT,
            None,
        )
        .await
        .expect("migrations");
    }
    (database, url)
}

/// The binary with `args`, on the database `url` (and nothing of the caller's AWS settings).
fn admin(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_osurender-admin"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("DB_SSLMODE", "disable")
        .env("DB_TIMEOUT_MS", "3000")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env_remove("DB_SECRET_ARN")
        .output()
        .expect("running osurender-admin")
}

/// stdout of a run that succeeded, as JSON.
fn answer(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_slice(&output.stdout).expect("one JSON object on stdout")
}

/// stderr of a run that failed (exit 1) and printed nothing on stdout.
fn failure(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "{}", stderr(output));
    assert!(output.stdout.is_empty());
    stderr(output)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn sha256(text: &str) -> Vec<u8> {
    Sha256::digest(text.as_bytes()).to_vec()
}

/// The local server is plain (the tests' DB_SSLMODE).
fn plain() -> Tls {
    Tls::new(DbSslMode::Disable, None).unwrap()
}

fn store(url: &str) -> PgKeyStore {
    PgKeyStore::new(db::pool(db::parse_url(url).unwrap(), &plain(), 1, TIMEOUT).unwrap())
}

#[tokio::test]
async fn create_prints_the_documented_json_and_stores_only_the_hash() {
    let (_database, url) = test_database("create", true).await;
    let created = answer(&admin(
        &url,
        &[
            "keys",
            "create",
            "--name",
            "CI runner",
            "--render-limit",
            "10/hour",
            "--max-active",
            "3",
            "--weight",
            "250",
        ],
    ));
    let mut fields: Vec<&str> = created
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "created_at",
            "deny",
            "id",
            "key",
            "kind",
            "max_active",
            "max_replay_length",
            "max_resolution",
            "name",
            "render_limit",
            "revoked_at",
            "signing_secret",
            "weight"
        ]
    );
    let key = created["key"].as_str().unwrap();
    assert!(key.starts_with("osr_live_"), "{key}");
    assert_eq!(key.len(), "osr_live_".len() + 43);
    assert!(key["osr_live_".len()..]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric()));
    assert!(ApiKey::parse(key).is_ok());
    assert!(created["signing_secret"]
        .as_str()
        .unwrap()
        .starts_with("whsec_"));
    assert_eq!(created["name"], "CI runner");
    assert_eq!(created["kind"], "live");
    assert_eq!(created["render_limit"], "10/hour");
    assert_eq!(created["max_active"], 3);
    assert_eq!(created["weight"], 250);
    assert_eq!(created["revoked_at"], Value::Null);

    let client = connect(&url).await;
    let id: KeyId = created["id"].as_str().unwrap().parse().unwrap();
    let row = client
        .query_one(
            "SELECT key_hash, row_to_json(api_keys)::text FROM api_keys WHERE id = $1",
            &[&id.0],
        )
        .await
        .unwrap();
    let stored_hash: Vec<u8> = row.get(0);
    assert_eq!(stored_hash, sha256(key), "the key's SHA-256 is stored");
    let weight: i32 = client
        .query_one("SELECT weight FROM api_keys WHERE id = $1", &[&id.0])
        .await
        .unwrap()
        .get(0);
    assert_eq!(weight, 250, "the weight is stored");
    let whole_row: String = row.get(1);
    assert!(
        !whole_row.contains(&key["osr_live_".len()..]),
        "the key itself is not stored"
    );

    let default = answer(&admin(&url, &["keys", "create", "--name", "defaults"]));
    assert_eq!(default["render_limit"], "60/minute");
    assert_eq!(default["max_active"], 20);
    assert_eq!(default["max_resolution"], Value::Null);
    assert_eq!(default["deny"], json!([]));
    assert_eq!(default["max_replay_length"], Value::Null);
    assert_eq!(default["weight"], 1);
    assert_ne!(default["key"], created["key"]);
}

#[tokio::test]
async fn list_never_shows_a_key_its_hash_or_its_secret() {
    let (_database, url) = test_database("list", true).await;
    let created: Vec<Value> = ["first", "second"]
        .iter()
        .map(|name| answer(&admin(&url, &["keys", "create", "--name", name])))
        .collect();
    let output = admin(&url, &["keys", "list"]);
    let listed = answer(&output);
    let text = String::from_utf8(output.stdout).unwrap();
    for key in &created {
        let secret = key["key"].as_str().unwrap();
        assert!(!text.contains(&secret["osr_live_".len()..]), "{text}");
        assert!(!text.contains(&hex::encode(sha256(secret))), "{text}");
        assert!(
            !text.contains(key["signing_secret"].as_str().unwrap()),
            "{text}"
        );
    }
    assert!(!text.contains("whsec_") && !text.contains("osr_"), "{text}");
    let ids: Vec<&Value> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["id"])
        .collect();
    assert_eq!(ids, [&created[1]["id"], &created[0]["id"]], "newest first");
    let one = answer(&admin(&url, &["keys", "list", "--limit", "1"]));
    assert_eq!(one["keys"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn sandbox_keys_are_osr_test_keys() {
    let (_database, url) = test_database("sandbox", true).await;
    let created = answer(&admin(
        &url,
        &["keys", "create", "--name", "try", "--sandbox"],
    ));
    let key = created["key"].as_str().unwrap();
    assert!(key.starts_with("osr_test_"), "{key}");
    assert_eq!(key.len(), "osr_test_".len() + 43);
    assert_eq!(created["kind"], "sandbox");
    let client = connect(&url).await;
    let kind: String = client
        .query_one(
            "SELECT kind FROM api_keys WHERE key_hash = $1",
            &[&sha256(key)],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "sandbox");
}

#[tokio::test]
async fn a_revoked_key_is_refused_by_the_lookup() {
    let (_database, url) = test_database("revoke", true).await;
    let created = answer(&admin(&url, &["keys", "create", "--name", "leaked"]));
    let key = ApiKey::parse(created["key"].as_str().unwrap()).unwrap();
    let id = created["id"].as_str().unwrap();
    let store = Arc::new(store(&url));
    let found = store.find_by_hash(&key.hash()).await.unwrap().unwrap();
    assert!(!found.is_revoked());
    assert_eq!(found.summary.id.to_string(), id);
    assert_eq!(found.signing_secret.expose(), created["signing_secret"]);
    let bearer = format!("Bearer {}", key.expose());
    assert!(KeyLookup::new(store.clone(), MAX_KEY_CACHE_TTL)
        .authenticate(&bearer, async { Ok(()) })
        .await
        .is_ok());

    let revoked = answer(&admin(&url, &["keys", "revoke", id]));
    assert_eq!(revoked["id"], id);
    assert_eq!(revoked["already_revoked"], false);
    assert!(revoked["revoked_at"].is_string());

    let found = store.find_by_hash(&key.hash()).await.unwrap().unwrap();
    assert!(found.is_revoked(), "find by hash reports it revoked");
    // A fresh instance's lookup (an instance's cache is at most API_KEY_CACHE_TTL old).
    assert!(matches!(
        KeyLookup::new(store.clone(), MAX_KEY_CACHE_TTL)
            .authenticate(&bearer, async { Ok(()) })
            .await,
        Err(KeyRefusal::Revoked)
    ));
    let listed = answer(&admin(&url, &["keys", "list"]));
    assert_eq!(listed["keys"][0]["revoked_at"], revoked["revoked_at"]);

    let again = answer(&admin(&url, &["keys", "revoke", id]));
    assert_eq!(again["already_revoked"], true);
    assert_eq!(again["revoked_at"], revoked["revoked_at"]);

    let unknown = KeyId::new().to_string();
    let message = failure(&admin(&url, &["keys", "revoke", &unknown]));
    assert!(
        message.contains(&format!("no API key has id {unknown}")),
        "{message}"
    );
}

/// `keys set` changes a live key's weight and max-active in place: answered as `keys list`
/// shows the key, stored, and what a request's lookup reads; a revoked or unknown key is a
/// failure that changes nothing.
#[tokio::test]
async fn set_changes_a_keys_weight_and_max_active_in_place() {
    let (_database, url) = test_database("set", true).await;
    let created = answer(&admin(&url, &["keys", "create", "--name", "community bot"]));
    let other = answer(&admin(&url, &["keys", "create", "--name", "bystander"]));
    let id = created["id"].as_str().unwrap();
    let key = ApiKey::parse(created["key"].as_str().unwrap()).unwrap();

    let heavier = answer(&admin(&url, &["keys", "set", id, "--weight", "40"]));
    assert_eq!(heavier["id"], id);
    assert_eq!(heavier["weight"], 40);
    assert_eq!(heavier["max_active"], 20, "max_active kept");
    assert!(heavier.get("key").is_none() && heavier.get("signing_secret").is_none());
    let listed = answer(&admin(&url, &["keys", "list"]));
    let shown = |id: &Value| {
        let keys = listed["keys"].as_array().unwrap();
        keys.iter().find(|key| &key["id"] == id).unwrap().clone()
    };
    assert_eq!(
        shown(&created["id"]),
        heavier,
        "answered as `keys list` shows it"
    );
    assert_eq!(shown(&other["id"])["weight"], 1, "another key untouched");

    let fewer = answer(&admin(&url, &["keys", "set", id, "--max-active=3"]));
    assert_eq!(
        (&fewer["weight"], &fewer["max_active"]),
        (&json!(40), &json!(3))
    );
    let both = answer(&admin(
        &url,
        &["keys", "set", id, "--max-active", "7", "--weight", "1000"],
    ));
    assert_eq!(
        (&both["weight"], &both["max_active"]),
        (&json!(1000), &json!(7))
    );
    // A fresh instance's lookup reads the new limits (a warm one within API_KEY_CACHE_TTL).
    let store = Arc::new(store(&url));
    let record = KeyLookup::new(store.clone(), MAX_KEY_CACHE_TTL)
        .authenticate(&format!("Bearer {}", key.expose()), async { Ok(()) })
        .await
        .unwrap();
    assert_eq!(
        (
            record.summary.limits.weight.get(),
            record.summary.limits.max_active
        ),
        (1000, 7)
    );

    let unknown = KeyId::new().to_string();
    let message = failure(&admin(&url, &["keys", "set", &unknown, "--weight", "2"]));
    assert!(
        message.contains(&format!("no API key has id {unknown}")),
        "{message}"
    );

    answer(&admin(&url, &["keys", "revoke", id]));
    let message = failure(&admin(&url, &["keys", "set", id, "--weight", "2"]));
    assert!(
        message.contains(&format!("the API key {id} was revoked")),
        "{message}"
    );
    let record = store.find_by_hash(&key.hash()).await.unwrap().unwrap();
    assert_eq!(
        record.summary.limits.weight.get(),
        1000,
        "a revoked key is unchanged"
    );

    let output = admin(&url, &["keys", "set", id, "--weight", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("weight must be 1 to 1000"),
        "{}",
        stderr(&output)
    );
}

#[tokio::test]
async fn bad_arguments_exit_2_before_any_database_access() {
    // Nothing listens here: a usage error must not get as far as connecting.
    let nowhere = "postgres://postgres@127.0.0.1:1/none";
    let id = "5f0c9a4e-1b2d-4c3e-8f70-0123456789ab";
    let usage_errors: [&[&str]; 19] = [
        &[],
        &["keys"],
        &["keys", "create"],
        &["keys", "create", "--name", "x", "--render-limit", "often"],
        &["keys", "create", "--name", "x", "--max-active", "0"],
        &["keys", "create", "--name", "x", "--max-resolution", "8k"],
        &["keys", "create", "--name", "x", "--deny", "video,bg_dim"],
        &["keys", "create", "--name", "x", "--max-replay-length", "0"],
        &["keys", "create", "--name", "x", "--weight", "0"],
        &["keys", "create", "--name", "x", "--weight", "1001"],
        &["keys", "revoke", "not-a-uuid"],
        &["keys", "set", id],
        &["keys", "set", "not-a-uuid", "--weight", "2"],
        &["keys", "set", id, "--weight", "-3"],
        &["keys", "set", id, "--max-active", "0"],
        &["keys", "set", id, "--max-active", "10001"],
        &["keys", "delete", "x"],
        &["skins", "remove"],
        &["skins", "reserve", "Default"],
    ];
    for args in usage_errors {
        let output = admin(nowhere, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
        assert!(
            stderr(&output).contains("usage: osurender-admin"),
            "{args:?}"
        );
    }
    let output = admin(nowhere, &["keys", "list"]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "an unreachable database is a failure"
    );
}

/// `sslmode=require` in `DATABASE_URL` with `DB_SSLMODE=disable` once meant plain text: the
/// startup and a new key's secret sent in the clear. Now nothing starts, and both are named.
#[tokio::test]
async fn a_tls_mode_in_the_url_is_never_overridden_by_a_weaker_one() {
    let (_database, url) = test_database("sslmode", true).await;
    let message = failure(&admin(
        &format!("{url}?sslmode=require"),
        &["keys", "create", "--name", "in the clear?"],
    ));
    for named in ["DB_SSLMODE", "`disable`", "DATABASE_URL", "`require`"] {
        assert!(message.contains(named), "{named}: {message}");
    }
    let keys: i64 = connect(&url)
        .await
        .query_one("SELECT count(*) FROM api_keys", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 0);
}

/// The binary with `args`, `DATABASE_URL` = `url` and no `DB_SSLMODE`: the URL alone says how.
fn admin_url_alone(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_osurender-admin"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("DB_TIMEOUT_MS", "3000")
        .env_remove("DB_SSLMODE")
        .env_remove("DB_SSLROOTCERT")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env_remove("DB_SECRET_ARN")
        .output()
        .expect("running osurender-admin")
}

/// `sslmode=require` in `DATABASE_URL`, no `DB_SSLMODE`: the CLI connects over TLS (the server
/// takes nothing else) without checking the certificate, as libpq's `require`; with no mode
/// anywhere it is `verify-full`, which refuses this server's unknown CA: nothing runs.
#[tokio::test]
async fn the_cli_honours_sslmode_require_in_the_url_and_verifies_by_default() {
    let server = TlsServer::local();
    let (port, password) = (server.port(), server.app_password());
    // The application role's own, dropped with the guard.
    let database = server.fresh_database("admin_url_require").await;
    let name = database.name();
    // At an address the certificate does not name: only `require` gets through.
    let url =
        |database: &str| format!("postgres://osurender_app:{password}@127.0.0.1:{port}/{database}");
    let require = Tls::new(DbSslMode::Require, None).unwrap();
    migrations::connect_and_apply(
        db::parse_url(&url(name)).unwrap(),
        &require,
        TIMEOUT,
        TIMEOUT,
        None,
    )
    .await
    .expect("migrations");

    let in_url = format!("{}?sslmode=require", url(name));
    let created = answer(&admin_url_alone(
        &in_url,
        &["keys", "create", "--name", "over TLS"],
    ));
    let listed = answer(&admin_url_alone(&in_url, &["keys", "list"]));
    assert_eq!(listed["keys"][0]["id"], created["id"]);
    // The key form of the same URL reads alike.
    let key_value = format!(
        "host=127.0.0.1 port={port} dbname={name} user=osurender_app password={password} \
         sslmode=require"
    );
    let listed = answer(&admin_url_alone(&key_value, &["keys", "list"]));
    assert_eq!(listed["keys"].as_array().unwrap().len(), 1);

    // Neither names a mode: verify-full, and this server's CA is not trusted.
    let output = admin_url_alone(&url(name), &["keys", "create", "--name", "unverified"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(output.stdout.is_empty());
    // The error names what to set: this server's CA is private.
    let message = stderr(&output);
    for named in ["UnknownIssuer", "DB_SSLROOTCERT", "DB_SSLMODE=disable"] {
        assert!(message.contains(named), "{message}");
    }
    // As it says: with the CA, and at the name the certificate carries, verify-full connects.
    let trusted = Command::new(env!("CARGO_BIN_EXE_osurender-admin"))
        .args(["keys", "list"])
        .env("DATABASE_URL", server.app_url("localhost", name))
        .env("DB_TIMEOUT_MS", "3000")
        .env("DB_SSLROOTCERT", server.ca())
        .env_remove("DB_SSLMODE")
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .env_remove("DB_SECRET_ARN")
        .output()
        .expect("running osurender-admin");
    assert_eq!(answer(&trusted)["keys"].as_array().unwrap().len(), 1);
    let listed = answer(&admin_url_alone(&in_url, &["keys", "list"]));
    assert_eq!(listed["keys"].as_array().unwrap().len(), 1, "{listed}");
}

/// The local server, with no mode anywhere (verify-full): its certificate is no AWS one, or it
/// takes no TLS at all; either way the error says to set `DB_SSLMODE=disable`.
#[tokio::test]
async fn against_a_local_server_the_tls_error_says_what_to_set() {
    let (_database, url) = test_database("local_tls", true).await;
    let output = admin_url_alone(&url, &["keys", "list"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(output.stdout.is_empty());
    let message = stderr(&output);
    assert!(message.contains("DB_SSLMODE=disable"), "{message}");
}

#[tokio::test]
async fn a_database_without_the_keys_table_is_refused_plainly() {
    let (_database, url) = test_database("unmigrated", false).await;
    let commands: [&[&str]; 2] = [&["keys", "list"], &["keys", "create", "--name", "x"]];
    for args in commands {
        let output = admin(&url, args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(output.stdout.is_empty());
        let message = stderr(&output);
        assert!(
            message.contains("no `api_keys` table") && message.contains("migrate"),
            "{message}"
        );
    }
}

/// The binary as the `admin` function: under a Lambda Runtime API (the testkit's) each event
/// is one command, answered with the same JSON; a bad event is the invocation's error.
#[tokio::test]
async fn the_lambda_form_runs_the_same_commands() {
    let (_database, url) = test_database("lambda", true).await;
    let function = Function::of(env!("CARGO_BIN_EXE_osurender-admin"), "admin")
        .vars(&[("DATABASE_URL", &url), ("DB_SSLMODE", "disable")])
        .start("commands")
        .await;
    let invoke = |id: &'static str, event: Value| function.invoke(id, event, TIMEOUT);
    let created = match invoke(
        "create",
        json!({"command": ["keys", "create", "--name", "from lambda", "--sandbox",
                           "--max-resolution", "720p", "--deny", "video,skin",
                           "--max-replay-length", "300"]}),
    )
    .await
    {
        Answer::Response(created) => created,
        other => panic!("{other:?}"),
    };
    assert!(created["key"].as_str().unwrap().starts_with("osr_test_"));
    let listed = invoke("list", json!({"command": ["keys", "list"]})).await;
    let Answer::Response(listed) = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(listed["keys"][0]["id"], created["id"]);
    for shown in [&created, &listed["keys"][0]] {
        assert_eq!(shown["max_resolution"], "720p", "{shown}");
        assert_eq!(shown["deny"], json!(["load_video", "skin"]), "{shown}");
        assert_eq!(shown["max_replay_length"], 300, "{shown}");
    }
    // As a request's lookup reads the key: its entitlements came with it.
    let key = ApiKey::parse(created["key"].as_str().unwrap()).unwrap();
    let record = store(&url)
        .find_by_hash(&key.hash())
        .await
        .unwrap()
        .unwrap();
    let limits = record.summary.limits;
    assert_eq!(limits.entitlements.denied.to_string(), "load_video,skin");
    assert_eq!(limits.max_replay_length, Some(300));
    for (id, bad) in [
        ("empty", json!({})),
        ("string", json!({"command": "keys list"})),
        ("incomplete", json!({"command": ["keys"]})),
    ] {
        let answer = invoke(id, bad.clone()).await;
        let Answer::Error(error) = &answer else {
            panic!("{bad}: {answer:?}")
        };
        assert!(
            error["errorMessage"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{bad}: {error}"
        );
    }
}

/// `skins reserve|unreserve|remove|free` on the command line and as events: the same JSON
/// answers, an unknown skin's removal or freeing a failure (exit 1, the invocation's error).
#[tokio::test]
async fn the_skin_commands_run_on_the_command_line_and_as_events() {
    let (_database, url) = test_database("skins", true).await;
    let reserved = answer(&admin(&url, &["skins", "reserve", "Official Skin"]));
    assert_eq!(
        reserved,
        json!({"skin": "Official Skin", "reserved": true, "already_reserved": false,
               "listed": false})
    );
    let unknown = admin(&url, &["skins", "remove", "Nobody"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", stderr(&unknown));
    assert!(stderr(&unknown).contains("no skin is named `Nobody`"));
    let not_removed = admin(&url, &["skins", "free", "Official Skin"]);
    assert_eq!(
        not_removed.status.code(),
        Some(1),
        "{}",
        stderr(&not_removed)
    );
    assert!(
        stderr(&not_removed).contains("no removed skin is named `Official Skin`"),
        "{}",
        stderr(&not_removed)
    );

    let function = Function::of(env!("CARGO_BIN_EXE_osurender-admin"), "admin")
        .vars(&[("DATABASE_URL", &url), ("DB_SSLMODE", "disable")])
        .start("skins")
        .await;
    let invoke = async |id: &'static str, words: &[&str]| {
        function
            .invoke(id, json!({ "command": words }), TIMEOUT)
            .await
    };
    let responded = async |id: &'static str, words: &[&str]| match invoke(id, words).await {
        Answer::Response(answer) => answer,
        other => panic!("{id}: {other:?}"),
    };
    let again = responded("again", &["skins", "reserve", "official skin"]).await;
    assert_eq!(again["already_reserved"], true);
    let unreserved = responded("unreserve", &["skins", "unreserve", "OFFICIAL SKIN"]).await;
    assert_eq!(unreserved["was_reserved"], true);
    let refused = async |id: &'static str, words: &[&str], message: &str| {
        let answer = invoke(id, words).await;
        let Answer::Error(error) = &answer else {
            panic!("{id}: {answer:?}")
        };
        let text = error["errorMessage"].as_str().unwrap_or_default();
        assert!(text.contains(message), "{id}: {text}");
    };
    refused("remove", &["skins", "remove", "Nobody"], "no skin is named").await;
    let no_removed = "no removed skin is named `Nobody`";
    refused("free", &["skins", "free", "Nobody"], no_removed).await;
}

#[tokio::test]
async fn the_policy_commands_run_on_the_command_line_and_as_events() {
    let (_database, url) = test_database("policy", true).await;
    let paused = answer(&admin(
        &url,
        &["pause", "--anonymous-only", "--reason", "maintenance"],
    ));
    assert_eq!(
        (
            &paused["paused"],
            &paused["anonymous_only"],
            &paused["reason"]
        ),
        (&json!(true), &json!(true), &json!("maintenance")),
        "{paused}"
    );
    let banned = answer(&admin(
        &url,
        &["bans", "add", "--ip", "203.0.113.0/24", "--for", "7d"],
    ));
    assert!(
        banned["until"].is_string(),
        "a temporary ban ends: {banned}"
    );
    let bad = admin(&url, &["bans", "add", "--ip", "::ffff:203.0.113.7"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));

    let function = Function::of(env!("CARGO_BIN_EXE_osurender-admin"), "admin")
        .vars(&[("DATABASE_URL", &url), ("DB_SSLMODE", "disable")])
        .start("policy")
        .await;
    let responded = async |id: &'static str, words: &[&str]| match function
        .invoke(id, json!({ "command": words }), TIMEOUT)
        .await
    {
        Answer::Response(answer) => answer,
        other => panic!("{id}: {other:?}"),
    };
    let listed = responded("list", &["bans", "list"]).await;
    let bans = listed["bans"].as_array().expect("a list of bans");
    assert_eq!(bans.len(), 1, "{listed}");
    let id = bans[0]["id"].to_string();
    let removed = responded("remove", &["bans", "remove", &id]).await;
    assert!(removed.is_object(), "{removed}");
    let resumed = responded("resume", &["resume"]).await;
    assert!(resumed.is_object(), "{resumed}");
    assert_eq!(
        responded("empty", &["bans", "list"]).await["bans"],
        json!([])
    );
}
