//! What the migrate tests share: where the PostgreSQL server is, connections to it, and the
//! migrations the code ships.

use std::path::Path;

use tokio_postgres::NoTls;

/// The server's URL with the maintenance database, and the same with `database`.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn database_url(database: &str) -> String {
    let server = server_url();
    let (base, _) = server
        .rsplit_once('/')
        .expect("DATABASE_URL ends in /<database>");
    format!("{base}/{database}")
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// An empty database `database` (one of an earlier run dropped first), connected.
pub async fn fresh_database(database: &str) -> tokio_postgres::Client {
    let admin = connect(&database_url("postgres")).await;
    for statement in [
        format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        format!("CREATE DATABASE {database}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
    connect(&database_url(database)).await
}

/// Drops `database`, whoever is still connected to it.
pub async fn drop_database(database: &str) {
    let admin = connect(&database_url("postgres")).await;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        .await
        .unwrap();
}

/// The migrations in `migrations/` (what this code embeds), by refinery's name (`V1__jobs_and_outbox`), oldest first.
pub fn shipped_migrations() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let mut names: Vec<(u32, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|file| {
            let stem = file.strip_suffix(".sql")?;
            let version = stem.strip_prefix('V')?.split_once("__")?.0.parse().ok()?;
            Some((version, stem.to_owned()))
        })
        .collect();
    names.sort();
    names.into_iter().map(|(_, name)| name).collect()
}
