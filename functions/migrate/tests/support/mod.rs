//! What the migrate tests share: where the PostgreSQL servers are (the local stack's, and the
//! TLS-only one of infra/postgres-tls.sh), connections to them, and the migrations the code
//! ships.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

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

/// The TLS-only server's port and the directory of its CA (`ca.pem`) and the application
/// role's password (`app-password`), where infra/lib.sh puts them.
pub fn tls_server() -> (u16, PathBuf) {
    let port = std::env::var("PG_TLS_PORT").map_or(55433, |port| port.parse().unwrap());
    let dir = std::env::var_os("PG_TLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local/pg-tls"),
        PathBuf::from,
    );
    (port, dir)
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
