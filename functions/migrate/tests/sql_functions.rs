//! The SQL functions live in `sql/functions/`, one file each, and the migration runner applies
//! them after the versioned migrations (core's adapters/postgres/migrations.rs, `FUNCTIONS`).
//! These tests apply the runner to fresh databases and check:
//! - every function of the schema is exactly its file's, and every file's function is in the
//!   schema: each file is run in a scratch schema (a transaction rolled back) and the function
//!   it makes is compared, as PostgreSQL stores it (`pg_get_functiondef`, `prosrc`), with the
//!   schema's function of that signature;
//! - the folder and the runner's list name the same files;
//! - a second run replaces every function by itself, and a schema newer than the code gets no
//!   function of this code;
//! - `admit_job` refuses an argument with a required key missing or null, or a key it does not
//!   know, and admits what this and earlier releases send.
//!
//! Needs PostgreSQL where `DATABASE_URL` points (default
//! `postgres://postgres@127.0.0.1:5432/postgres`). Each test's database is its own and is
//! dropped at the end (the testkit's guard), passed or failed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use osurender_core::adapters::postgres::migrations::{self, Outcome, FUNCTIONS};
use osurender_testkit::{fresh_database, Database};
use serde_json::{json, Map, Value};
use support::shipped_migrations;

mod support;

/// The schema a file's function is made in to be read back.
const SCRATCH: &str = "sql_function_source";

/// A database of the test's own, migrated; dropped with its guard.
async fn migrated_database(name: &str) -> (Database, tokio_postgres::Client) {
    let database = fresh_database(&format!("migrate_sql_functions_{name}")).await;
    let mut db = database.connect().await;
    let outcome = migrations::apply(&mut db, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("applying the migrations: {}", e.message()));
    // Every migration of the folder: a build older than a migration file would pass unnoticed.
    assert_eq!(outcome, Outcome::Applied(shipped_migrations()));
    (database, db)
}

/// A function as PostgreSQL stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stored {
    name: String,
    /// `pg_get_functiondef`, its schema written `public`.
    definition: String,
    /// The body.
    source: String,
}

/// The functions of `schema` (not an extension's), by signature (`name(identity arguments)`).
async fn functions_in(
    db: &impl tokio_postgres::GenericClient,
    schema: &str,
) -> BTreeMap<String, Stored> {
    db.query(
        "SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
                p.proname::text, pg_get_functiondef(p.oid), p.prosrc
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1
            AND NOT EXISTS (SELECT FROM pg_depend d
                             WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                               AND d.deptype = 'e')",
        &[&schema],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| {
        let definition: String = row.get(2);
        let stored = Stored {
            name: row.get(1),
            definition: definition.replacen(&format!("FUNCTION {schema}."), "FUNCTION public.", 1),
            source: row.get(3),
        };
        (row.get(0), stored)
    })
    .collect()
}

/// What each file makes, by signature: run alone in a scratch schema first on the search path,
/// in a transaction rolled back. A file that makes no function or more than one fails.
async fn functions_of_the_files(
    db: &mut tokio_postgres::Client,
) -> BTreeMap<String, (String, Stored)> {
    let mut made = BTreeMap::new();
    for function in FUNCTIONS {
        let transaction = db.transaction().await.unwrap();
        transaction
            .batch_execute(&format!(
                "CREATE SCHEMA {SCRATCH}; SET LOCAL search_path = {SCRATCH}, public"
            ))
            .await
            .unwrap();
        transaction
            .batch_execute(function.sql)
            .await
            .unwrap_or_else(|e| panic!("sql/functions/{}.sql: {e:?}", function.file));
        let mut of_file = functions_in(&transaction, SCRATCH).await;
        transaction.rollback().await.unwrap();
        assert_eq!(
            of_file.len(),
            1,
            "sql/functions/{}.sql makes {} functions, not one: {:?}",
            function.file,
            of_file.len(),
            of_file.keys().collect::<Vec<_>>()
        );
        let (signature, stored) = of_file.pop_first().unwrap();
        assert!(
            function.file == stored.name || function.file.starts_with(&format!("{}_", stored.name)),
            "sql/functions/{}.sql makes {signature}: a file is named after its function",
            function.file
        );
        let earlier = made.insert(signature.clone(), (function.file.to_owned(), stored));
        assert!(
            earlier.is_none(),
            "{signature} is made by two files: {} and {}",
            earlier.unwrap().0,
            function.file
        );
    }
    made
}

/// The signatures of `these` that `those` lacks.
fn keys_missing_from<'a, A, B>(
    these: &'a BTreeMap<String, A>,
    those: &BTreeMap<String, B>,
) -> Vec<&'a String> {
    these.keys().filter(|s| !those.contains_key(*s)).collect()
}

#[tokio::test]
async fn every_function_of_the_schema_is_its_file_and_every_file_a_function_of_the_schema() {
    let (_database, mut db) = migrated_database("bodies").await;
    let in_schema = functions_in(&db, "public").await;
    let of_files = functions_of_the_files(&mut db).await;

    let without_file = keys_missing_from(&in_schema, &of_files);
    assert!(
        without_file.is_empty(),
        "functions of the schema without a file in sql/functions/ (and in FUNCTIONS): \
         {without_file:?}"
    );
    let not_in_schema = keys_missing_from(&of_files, &in_schema);
    assert!(
        not_in_schema.is_empty(),
        "sql/functions/ makes functions the schema does not have: {not_in_schema:?}"
    );
    for (signature, (file, from_file)) in &of_files {
        let stored = &in_schema[signature];
        assert_eq!(
            stored.source, from_file.source,
            "{signature}: the body in the schema is not sql/functions/{file}.sql's"
        );
        assert_eq!(
            stored.definition, from_file.definition,
            "{signature}: the definition in the schema is not sql/functions/{file}.sql's"
        );
    }
}

#[test]
fn the_folder_and_the_runner_name_the_same_files_each_one_explained_function() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sql/functions");
    let mut in_folder: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|file| file.strip_suffix(".sql").map(str::to_owned))
        .collect();
    in_folder.sort();
    let mut in_runner: Vec<String> = FUNCTIONS.iter().map(|f| f.file.to_owned()).collect();
    in_runner.sort();
    assert_eq!(
        in_folder, in_runner,
        "sql/functions/ and FUNCTIONS (functions/core/src/adapters/postgres/migrations.rs) \
         differ: add the file to both"
    );
    for function in FUNCTIONS {
        let on_disk = std::fs::read_to_string(dir.join(format!("{}.sql", function.file))).unwrap();
        assert_eq!(
            on_disk, function.sql,
            "{}.sql changed after core was compiled: build again",
            function.file
        );
        assert!(
            function.sql.starts_with("-- "),
            "{}.sql starts with its explanation",
            function.file
        );
        assert_eq!(
            function.sql.matches("CREATE OR REPLACE FUNCTION").count(),
            1,
            "{}.sql: one CREATE OR REPLACE FUNCTION",
            function.file
        );
        assert!(
            !function.sql.contains("CREATE FUNCTION") && !function.sql.contains("DROP "),
            "{}.sql: only CREATE OR REPLACE (the file is applied on every run)",
            function.file
        );
    }
}

#[tokio::test]
async fn a_second_run_replaces_each_function_by_itself() {
    let (_database, mut db) = migrated_database("again").await;
    let before = functions_in(&db, "public").await;
    let outcome = migrations::apply(&mut db, Duration::from_secs(10)).await;
    let after = functions_in(&db, "public").await;
    assert_eq!(outcome.unwrap(), Outcome::Applied(Vec::new()));
    assert_eq!(before, after);
}

#[tokio::test]
async fn a_schema_newer_than_the_code_gets_none_of_its_functions() {
    let (_database, mut db) = migrated_database("newer").await;
    // A later release's migration, and its resolve_admission.
    db.batch_execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
         VALUES (9999, 'from_a_later_release', '2026-11-30T12:00:00Z', '42'); \
         CREATE OR REPLACE FUNCTION resolve_admission(p_id uuid, p_client_lock bigint, \
                                                      p_lock_timeout_ms bigint) \
         RETURNS text LANGUAGE sql AS $$ SELECT 'a later release''s' $$",
    )
    .await
    .unwrap();
    let before = functions_in(&db, "public").await;
    let outcome = migrations::apply(&mut db, Duration::from_secs(10)).await;
    let after = functions_in(&db, "public").await;
    assert_eq!(
        outcome.unwrap(),
        Outcome::SchemaNewer(vec!["V9999__from_a_later_release".into()])
    );
    assert_eq!(before, after);
    assert!(after.values().any(|f| f.source.contains("a later release")));
}

/// What this release's code sends (a key's job: the anonymous caps null), with `client` and
/// a fresh job id.
fn admit_args(client: &str) -> Value {
    let id = uuid::Uuid::new_v4();
    json!({
        "id": id,
        "client_ip": client,
        "client_addr": null,
        "client_network": null,
        "client_wide_network": null,
        "client_lock": 1,
        "global_lock": 2,
        "skin": "Default",
        "config": {"skin": "Default"},
        "replay_key": format!("replays/{id}.osr"),
        "replay_sha256": format!("{:064x}", id.as_u128()),
        "max_queued": 100,
        "max_anonymous_queued": null,
        "max_rendering": 10,
        "max_active_per_client": 5,
        "max_active_per_network": null,
        "max_active_per_wide_network": null,
        "lock_timeout_ms": 1000,
        "event_payload": {"job_id": id},
        "event_lease_ms": 30000,
        "idem_endpoint": null,
        "idem_key": null,
        "idem_token": null,
        "idem_response": null,
        "sandbox": false,
        "sandbox_active_ms": 60000,
        "sandbox_video_key": null,
        "sandbox_thumb_key": null,
        "callback_url": null,
        "callbacks": [],
    })
}

/// `admit_args` of a client of the refusals, changed by `edit`.
fn edited(edit: impl FnOnce(&mut Map<String, Value>)) -> Value {
    let mut args = admit_args("203.0.113.1");
    edit(args.as_object_mut().unwrap());
    args
}

async fn admit(db: &tokio_postgres::Client, args: &Value) -> Result<String, String> {
    db.query_one("SELECT verdict FROM admit_job($1::jsonb)", &[args])
        .await
        .map(|row| row.get(0))
        .map_err(|e| {
            e.as_db_error()
                .map(|db| db.message().to_owned())
                .unwrap_or_else(|| e.to_string())
        })
}

#[tokio::test]
async fn admit_job_refuses_a_missing_or_misspelled_key() {
    let (_database, db) = migrated_database("admit").await;
    // (case, the argument, what the refusal names)
    let mut refusals: Vec<(String, Value, String)> = Vec::new();
    // Required keys: missing, or null.
    for key in [
        "max_queued",
        "client_lock",
        "event_payload",
        "replay_sha256",
    ] {
        let without = edited(|args| {
            args.remove(key);
        });
        refusals.push((format!("without {key}"), without, key.to_owned()));
        let null = edited(|args| {
            args.insert(key.into(), Value::Null);
        });
        refusals.push((format!("{key} null"), null, key.to_owned()));
    }
    // Misspelled: a required key (it is missing then too), an optional cap, any other key.
    let misspelled = edited(|args| {
        let value = args.remove("max_rendering").unwrap();
        args.insert("max_renderings".into(), value);
    });
    refusals.push(("max_renderings".into(), misspelled, "max_rendering".into()));
    for (unknown, value) in [
        ("max_anonymous_queue", 10),
        ("maxActivePerNetwork", 3),
        ("max_active_per_wide_networks", 9),
    ] {
        let args = edited(|args| {
            args.insert(unknown.into(), json!(value));
        });
        let names = format!("unknown key(s): {unknown}");
        refusals.push((unknown.into(), args, names));
    }
    let array = json!([admit_args("203.0.113.1")]);
    refusals.push((
        "an array".into(),
        array,
        "must be a JSON object, not array".into(),
    ));

    // What this release sends, for an anonymous client too (its caps set) ...
    let mut admissions = vec![("this release's", admit_args("203.0.113.2"))];
    let mut anonymous = admit_args("203.0.113.3");
    anonymous["client_network"] = json!("203.0.113.0/24");
    anonymous["max_anonymous_queued"] = json!(50);
    anonymous["max_active_per_network"] = json!(3);
    anonymous["client_wide_network"] = json!("203.0.0.0/16");
    anonymous["max_active_per_wide_network"] = json!(9);
    admissions.push(("an anonymous client's", anonymous));
    // ... and an argument with none of the optional keys, as the first `jsonb` callers send it.
    let mut earlier = admit_args("203.0.113.4");
    let object = earlier.as_object_mut().unwrap();
    for later in [
        "client_addr",
        "client_network",
        "max_anonymous_queued",
        "max_active_per_network",
        "client_wide_network",
        "max_active_per_wide_network",
        "sandbox",
        "sandbox_active_ms",
        "sandbox_video_key",
        "sandbox_thumb_key",
        "callback_url",
        "callbacks",
    ] {
        object.remove(later);
    }
    admissions.push(("an earlier release's", earlier));

    let mut refused = Vec::new();
    for (case, args, names) in refusals {
        refused.push((case, admit(&db, &args).await, names));
    }
    let mut answered = Vec::new();
    for (case, args) in admissions {
        answered.push((case, admit(&db, &args).await));
    }
    let jobs: i64 = db
        .query_one("SELECT count(*) FROM jobs", &[])
        .await
        .unwrap()
        .get(0);

    for (case, result, names) in refused {
        match result {
            Err(message) => {
                assert!(message.starts_with("admit_job: "), "{case}: {message}");
                assert!(message.contains(&names), "{case}: {message}");
            }
            Ok(verdict) => panic!("{case}: admitted as `{verdict}`"),
        }
    }
    for (case, result) in answered {
        assert_eq!(result, Ok("admitted".to_owned()), "{case}");
    }
    assert_eq!(jobs, 3, "only the three accepted arguments made a job");
}
