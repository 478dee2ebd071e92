//! The TLS-only PostgreSQL of `infra/postgres-tls.sh` (started by `infra/up.sh`): where it is,
//! its CAs, the URLs code under test is given, and the tests' own connections to it, made with
//! rustls directly (not through the core's code under test).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::database::{Database, Server};

/// The server's name in its certificate: the only one it is valid for.
pub const CERTIFIED_HOST: &str = "localhost";

/// The login the server takes by password (SCRAM), as the application's on AWS.
pub const APP_ROLE: &str = "osurender_app";

#[derive(Debug, Clone)]
pub struct TlsServer {
    port: u16,
    dir: PathBuf,
}

impl TlsServer {
    /// Where `infra/lib.sh` puts it (`PG_TLS_PORT`, `PG_TLS_DIR`, or their defaults).
    pub fn local() -> TlsServer {
        let dir = std::env::var_os("PG_TLS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.local/pg-tls"));
        assert!(
            dir.join("ca.pem").exists(),
            "no {}: run ./infra/up.sh (infra/postgres-tls.sh)",
            dir.join("ca.pem").display()
        );
        // As set, or the port infra/postgres-tls.sh picked for this checkout.
        let port = std::env::var("PG_TLS_PORT")
            .ok()
            .filter(|port| !port.is_empty())
            .or_else(|| std::fs::read_to_string(dir.join("port")).ok())
            .expect("PG_TLS_PORT, or the port file of infra/postgres-tls.sh");
        let port = port
            .trim()
            .parse()
            .expect("the TLS cluster's port is a port");
        TlsServer { port, dir }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The CA that signed the server's certificate.
    pub fn ca(&self) -> String {
        self.dir.join("ca.pem").display().to_string()
    }

    /// A CA that signed nothing of this server.
    pub fn other_ca(&self) -> String {
        self.dir.join("other-ca.pem").display().to_string()
    }

    pub fn app_password(&self) -> String {
        let password = std::fs::read_to_string(self.dir.join("app-password")).unwrap();
        password.trim().to_owned()
    }

    /// `database` at `host` as the password-authenticated application role, as on AWS.
    pub fn app_url(&self, host: &str, database: &str) -> String {
        format!(
            "postgres://{APP_ROLE}:{}@{host}:{}/{database}",
            self.app_password(),
            self.port
        )
    }

    /// `database` at its certified name as `postgres`, over TLS (`sslmode=require`: what
    /// `connect` verifies, the URL alone does not).
    pub fn superuser_url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@{CERTIFIED_HOST}:{}/{database}?sslmode=require",
            self.port
        )
    }

    /// A connection as `postgres` over TLS verified against `ca.pem`.
    pub async fn connect(&self, database: &str) -> tokio_postgres::Client {
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(self.ca()).unwrap();
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
        let url = self.superuser_url(database);
        let (client, connection) = tokio_postgres::connect(&url, MakeRustlsConnect::new(config))
            .await
            .unwrap_or_else(|e| panic!("the TLS PostgreSQL at {url} (run ./infra/up.sh): {e}"));
        tokio::spawn(connection);
        client
    }

    /// A fresh database the application role owns (see `database::fresh_database`).
    pub async fn fresh_database(&self, label: &str) -> Database {
        Database::create(Server::Tls(self.clone()), label, Some(APP_ROLE)).await
    }

    /// A unique database name on this server, not created (see `Database::reserve`).
    pub fn reserve_database(&self, label: &str) -> Database {
        Database::reserve_on(Server::Tls(self.clone()), label)
    }
}
