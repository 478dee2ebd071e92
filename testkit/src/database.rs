//! Fresh databases: each a unique name (`osurender_t_<label>_<random>`), created empty or only
//! reserved (for code under test that creates it), and dropped `WITH (FORCE)` when its guard
//! drops, whether the test passed, failed or panicked (unwinding drops it too). A test run so
//! leaves no database behind on the developer's server; only a killed test process can.

use crate::stack;
use crate::tls::TlsServer;

/// Every test database's name starts so (`select datname from pg_database where datname like
/// 'osurender\_t\_%'` finds what a killed run left).
pub const PREFIX: &str = "osurender_t_";

/// The server a database is on.
#[derive(Debug, Clone)]
pub(crate) enum Server {
    /// The local server of `DATABASE_URL`.
    Local,
    /// The TLS-only server.
    Tls(TlsServer),
}

impl Server {
    async fn connect(&self, database: &str) -> tokio_postgres::Client {
        match self {
            Server::Local => stack::connect(&stack::database_url(database)).await,
            Server::Tls(server) => server.connect(database).await,
        }
    }
}

/// A database of one test, dropped with its guard.
#[derive(Debug)]
pub struct Database {
    name: String,
    server: Server,
}

/// A new empty database on the local server (`DATABASE_URL`), named after `label`.
pub async fn fresh_database(label: &str) -> Database {
    Database::create(Server::Local, label, None).await
}

impl Database {
    /// A unique name on the local server, not created: for code under test that creates the
    /// database. Dropped all the same if it was.
    pub fn reserve(label: &str) -> Database {
        Self::reserve_on(Server::Local, label)
    }

    pub(crate) fn reserve_on(server: Server, label: &str) -> Database {
        Database {
            name: unique_name(label),
            server,
        }
    }

    pub(crate) async fn create(server: Server, label: &str, owner: Option<&str>) -> Database {
        // The guard first: a failing CREATE leaves nothing either.
        let database = Self::reserve_on(server, label);
        let owner = owner
            .map(|role| format!(" OWNER {role}"))
            .unwrap_or_default();
        database
            .server
            .connect("postgres")
            .await
            .batch_execute(&format!("CREATE DATABASE {}{owner}", database.name))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {}: {e}", database.name));
        database
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its URL for the server's superuser: on the local server `DATABASE_URL`'s, with this
    /// database; on the TLS server `TlsServer::superuser_url`.
    pub fn url(&self) -> String {
        match &self.server {
            Server::Local => stack::database_url(&self.name),
            Server::Tls(server) => server.superuser_url(&self.name),
        }
    }

    /// A connection to it as the superuser (over verified TLS on the TLS server).
    pub async fn connect(&self) -> tokio_postgres::Client {
        self.server.connect(&self.name).await
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // Dropped inside the test's runtime, which cannot block on a future: the statement runs
        // on a thread and a runtime of its own. FORCE ends the sessions still open on it (the
        // server under test's, a function's, the test's own).
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let admin = server.connect("postgres").await;
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        if let Ok(Err(error)) | Err(error) = dropped.map_err(|_| "the drop panicked".to_string()) {
            eprintln!("could not drop the test database {}: {error}", self.name);
        }
    }
}

/// `osurender_t_<label>_<16 random hex digits>`, within PostgreSQL's 63 bytes; the label
/// lower-cased, anything but ASCII letters and digits made `_`.
fn unique_name(label: &str) -> String {
    const RANDOM: usize = 16;
    let label: String = label
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .take(63 - PREFIX.len() - 1 - RANDOM)
        .collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{PREFIX}{label}_{}", &random[..RANDOM])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_identifiers_within_the_limit() {
        let long = unique_name(&"Very-Long label ".repeat(10));
        assert_eq!(long.len(), 63);
        assert!(long.starts_with("osurender_t_very_long_label_"));
        assert!(long
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'));
        assert_ne!(unique_name("a"), unique_name("a"));
    }

    #[tokio::test]
    async fn a_database_is_dropped_with_its_guard_even_on_a_panic() {
        let exists = |name: String| async move {
            stack::connect(&stack::database_url("postgres"))
                .await
                .query_one(
                    "SELECT count(*) FROM pg_database WHERE datname = $1",
                    &[&name],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
                == 1
        };
        let database = fresh_database("testkit_guard").await;
        let name = database.name().to_owned();
        let session = database.connect().await;
        assert!(exists(name.clone()).await);
        drop(database);
        assert!(!exists(name.clone()).await, "dropped, its session ended");
        assert!(session.simple_query("SELECT 1").await.is_err());

        let panicked = tokio::spawn(async {
            let database = fresh_database("testkit_panic").await;
            let name = database.name().to_owned();
            std::panic::panic_any(name);
        })
        .await
        .unwrap_err()
        .into_panic();
        let name = panicked.downcast::<String>().unwrap();
        assert!(!exists(*name).await, "dropped while unwinding");

        let reserved = Database::reserve("testkit_reserved");
        assert!(!exists(reserved.name().to_owned()).await);
        drop(reserved);
    }
}
