//! `migrations/schema.sql` is the schema as `migrations/V*.sql` and `sql/functions/` leave it, for
//! a reader: this test applies the migrations and the functions (core's own runner) to a scratch database, dumps its schema with
//! `pg_dump --schema-only` (refinery's history table left out), normalizes the dump and compares
//! it with the checked-in file. A migration that changes the schema without the snapshot fails
//! here; `UPDATE_SCHEMA=1 cargo test -p osurender-migrate --test schema` (or
//! `infra/schema-snapshot`) rewrites the file.
//!
//! Needs PostgreSQL where `DATABASE_URL` points (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and its `pg_dump` (the postgresql-client
//! package; `PG_DUMP` names another). The scratch database is the test's own and is dropped
//! at the end (the testkit's guard).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use osurender_testkit::stack::{connect, database_url};
use osurender_testkit::Database;
use support::shipped_migrations;

mod support;

const REWRITE: &str = "UPDATE_SCHEMA=1 cargo test -p osurender-migrate --test schema";
const HEADER: &str = "\
-- The schema as migrations/V*.sql and sql/functions/*.sql leave it (refinery's own history table
-- left out): a snapshot for readers, checked by functions/migrate/tests/schema.rs. Do not edit:
-- change a migration or a function's file, then run infra/schema-snapshot
-- (UPDATE_SCHEMA=1 cargo test -p osurender-migrate --test schema).
";

fn snapshot_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/schema.sql")
}

/// `PG_DUMP`, else Debian's pg_dump of the server's major version, else `pg_dump` on `PATH`.
fn pg_dump(server_major: &str) -> PathBuf {
    if let Some(path) = std::env::var_os("PG_DUMP") {
        return path.into();
    }
    let debian = PathBuf::from(format!("/usr/lib/postgresql/{server_major}/bin/pg_dump"));
    if debian.exists() {
        return debian;
    }
    "pg_dump".into()
}

/// The dump, made deterministic and only ours: no session `SET`s, no `\restrict` keys, no
/// version lines, no banner; one blank line between objects; our header first.
fn normalize(dump: &str) -> String {
    let banner = [
        "--",
        "-- PostgreSQL database dump",
        "-- PostgreSQL database dump complete",
    ];
    let mut blocks: Vec<Vec<&str>> = vec![Vec::new()];
    for line in dump.lines().map(str::trim_end) {
        if line.starts_with("SET ")
            || line.starts_with("SELECT pg_catalog.set_config(")
            || line.starts_with("\\restrict")
            || line.starts_with("\\unrestrict")
            || line.starts_with("-- Dumped from database version")
            || line.starts_with("-- Dumped by pg_dump version")
        {
            continue;
        }
        if line.is_empty() {
            blocks.push(Vec::new());
        } else {
            blocks.last_mut().unwrap().push(line);
        }
    }
    let body: Vec<String> = blocks
        .into_iter()
        .filter(|block| !block.iter().all(|line| banner.contains(line)))
        .map(|block| block.join("\n"))
        .collect();
    format!("{HEADER}\n{}\n", body.join("\n\n"))
}

/// Applies the migrations to `database` (fresh) and returns the normalized dump.
async fn regenerate(database: &Database) -> Result<String, String> {
    let mut db = database.connect().await;
    let url = database.url();
    osurender_core::adapters::postgres::migrations::apply(&mut db, Duration::from_secs(10))
        .await
        .map_err(|e| format!("applying the migrations: {}", e.message()))?;
    // refinery embeds the migrations when core is compiled, and a migration file added since
    // does not make cargo compile it again: a stale build would pass here unnoticed.
    let applied: Vec<String> = db
        .query(
            "SELECT 'V' || version || '__' || name FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let shipped = shipped_migrations();
    if applied != shipped {
        return Err(format!(
            "this build applies {applied:?} but migrations/ has {shipped:?}: core was compiled \
             before a migration was added; `touch functions/core/src/adapters/postgres/migrations.rs` and run again"
        ));
    }
    let major: String = db
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000 || ''",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    drop(db);
    let tool = pg_dump(&major);
    let output = Command::new(&tool)
        .args([
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "--no-comments",
            "--exclude-table=public.refinery_schema_history",
        ])
        .arg(format!("--dbname={url}"))
        .output()
        .map_err(|e| {
            format!(
                "{} (set PG_DUMP, or install postgresql-client): {e}",
                tool.display()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            tool.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let dump = String::from_utf8(output.stdout).map_err(|e| e.to_string())?;
    Ok(normalize(&dump))
}

/// A unified-style diff (`-` the file, `+` the migrations), 3 lines of context per hunk.
fn unified_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    // Longest common subsequence, table from the ends.
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    // (tag, line, old line number, new line number)
    let mut ops: Vec<(char, &str, usize, usize)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i], i, j));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i], i, j));
            i += 1;
        } else {
            ops.push(('+', b[j], i, j));
            j += 1;
        }
    }
    const CONTEXT: usize = 3;
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let mut out = String::from(
        "--- migrations/schema.sql (checked in)\n+++ migrations/schema.sql (from the migrations)\n",
    );
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k < changed.len() && changed[k] <= end + 2 * CONTEXT + 1 {
            end = changed[k];
            k += 1;
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let old_len = hunk.iter().filter(|op| op.0 != '+').count();
        let new_len = hunk.iter().filter(|op| op.0 != '-').count();
        out += &format!(
            "@@ -{},{old_len} +{},{new_len} @@\n",
            hunk[0].2 + usize::from(old_len > 0),
            hunk[0].3 + usize::from(new_len > 0)
        );
        for (tag, line, _, _) in hunk {
            out += &format!("{tag}{line}\n");
        }
    }
    out
}

#[tokio::test]
async fn the_schema_snapshot_matches_the_migrations() {
    let database = osurender_testkit::fresh_database("migrate_schema_snapshot").await;
    let generated = regenerate(&database).await;
    drop(database);
    let generated = generated.unwrap_or_else(|e| panic!("regenerating the schema: {e}"));

    let path = snapshot_path();
    if std::env::var_os("UPDATE_SCHEMA").is_some_and(|v| !v.is_empty() && v != "0") {
        std::fs::write(&path, &generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let checked_in = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with:\n    {REWRITE}", path.display()));
    if checked_in != generated {
        let server = connect(&database_url("postgres"))
            .await
            .query_one("SHOW server_version", &[])
            .await
            .map(|row| row.get::<_, String>(0))
            .unwrap_or_default();
        panic!(
            "migrations/schema.sql is not the schema the migrations leave.\n\n{}\n\
             If the migrations are right, rewrite the snapshot and commit it:\n    {REWRITE}\n\
             (or infra/schema-snapshot). The snapshot is made with PostgreSQL 15's pg_dump; \
             this server is {server}.",
            unified_diff(&checked_in, &generated)
        );
    }
}
