//! What the migrate tests share: where the PostgreSQL server is, and connections to it.

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
