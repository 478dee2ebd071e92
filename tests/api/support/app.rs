//! The app under test: an isolated dev server per test (on its own database, limiter table,
//! bucket and queue, optionally behind proxies), and ways to look behind it.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use osurender_core::entry::http::ORIGIN_SECRET_HEADER;
use osurender_core::{App, Clients};
use osurender_testkit::proxy::Proxy;
use osurender_testkit::stack::fresh_queue;
use osurender_testkit::tls::{TlsServer, CERTIFIED_HOST};
use osurender_testkit::{fresh_database, Database};
use reqwest::multipart::Form;
use reqwest::{Response, StatusCode};
use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::NoTls;

use crate::support::replays::valid_form;

fn init_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for (name, value) in osurender_testkit::stack::DEFAULT_ENV {
            if std::env::var_os(name).is_none() {
                std::env::set_var(name, value);
            }
        }
        // Server logs only when asked for: RUST_LOG=info cargo test … Otherwise they are kept
        // in memory, for hostile.rs to check that none carries a secret or a client address.
        if std::env::var_os("RUST_LOG").is_some() {
            osurender_core::support::telemetry::init();
        } else {
            capture_logs();
        }
    });
}

/// Every log line the test servers wrote, as production writes them (JSON) but with the
/// project's own crates at TRACE; empty when `RUST_LOG` sends them to stdout instead.
pub static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

/// One subscriber for the whole process, installed before any server runs: a scoped one
/// would race with the other tests' threads over the callsites' cached interest.
fn capture_logs() {
    struct Sink;
    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            LOGS.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter("info,osurender_core=trace,osurender_local=trace")
        .with_current_span(true)
        .with_writer(|| Sink)
        .try_init();
}

/// A fresh queue on the AWS stand-in, for a server's `CALLBACK_WAKE_QUEUE_URL`: its URL.
pub async fn wake_queue() -> String {
    init_env();
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    fresh_queue(&aws_sdk_sqs::Client::new(&sdk), "wakes").await
}

/// The webhook secret every test server shares with its tests' simulated workers.
pub const WEBHOOK_SECRET: &str = "integration-test-webhook-secret";

pub struct TestApp {
    pub addr: SocketAddr,
    /// The server's configuration, to build more instances of the core against its resources.
    pub config: osurender_core::Config,
    /// Sends `X-Origin-Secret` when the server was given `CF_ORIGIN_SECRET`, as our edge would.
    pub http: reqwest::Client,
    pub db: tokio_postgres::Client,
    pub database_url: String,
    pub s3: aws_sdk_s3::Client,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub bucket: String,
    pub table: String,
    pub queue: String,
    /// Every job id the tests drained from the render queue so far (support/invariants.rs).
    pub delivered_jobs: Mutex<HashSet<String>>,
    /// Last, so the database goes after everything that uses it.
    _database: Database,
}

impl TestApp {
    /// A server with default settings but for `overrides`, and its own fresh resources. The
    /// trusted proxy is loopback, so tests choose the client with `CF-Connecting-IP`. The
    /// outbox sweep, the janitor and the skin ingest do not run on timers: tests run them when
    /// they choose.
    pub async fn spawn(overrides: &[(&str, &str)]) -> TestApp {
        Self::spawn_routed(overrides, None, None).await
    }

    /// `spawn`, but on a database of the TLS-only PostgreSQL, which the server reaches as the
    /// password-authenticated application role at its certified name (`overrides` set
    /// `DB_SSLMODE`); the test's own client is `postgres` over verified TLS.
    pub async fn spawn_on_tls(server: &TlsServer, overrides: &[(&str, &str)]) -> TestApp {
        Self::spawn_routed(overrides, None, Some(server)).await
    }

    /// `spawn`, but the server reaches Postgres and the AWS stand-in through counting,
    /// fault-injecting proxies (its `config` says so); the test's own clients go direct.
    pub async fn spawn_via_proxies(overrides: &[(&str, &str)]) -> (TestApp, Proxies) {
        init_env();
        let proxies = Proxies::start().await;
        (
            Self::spawn_routed(overrides, Some(&proxies), None).await,
            proxies,
        )
    }

    async fn spawn_routed(
        overrides: &[(&str, &str)],
        proxies: Option<&Proxies>,
        tls: Option<&TlsServer>,
    ) -> TestApp {
        init_env();
        let (database, database_url) = match tls {
            Some(server) => {
                let database = server.fresh_database("api").await;
                let url = server.app_url(CERTIFIED_HOST, database.name());
                (database, url)
            }
            None => {
                let database = fresh_database("api").await;
                let url = database.url();
                (database, url)
            }
        };
        let db = database.connect().await;
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let server_database_url = match proxies {
            Some(proxies) => proxies.postgres.database_url(&database_url),
            None => database_url.clone(),
        };
        let aws_endpoint_url = proxies.map(|proxies| proxies.aws.http_url());
        let bucket = format!("replays-{unique}");
        // The workers' artifacts (and the sandbox samples) apart, so the replay bucket holds
        // only what admission stored.
        let artifact_bucket = format!("artifacts-{unique}");
        let table = format!("rate-limits-{unique}");
        let events_table = format!("events-{unique}");
        let queue = format!("render-jobs-{unique}");
        let mut vars: HashMap<String, String> = [
            ("DATABASE_URL", server_database_url.as_str()),
            // The local trust cluster is plain; the TLS tests override it.
            ("DB_SSLMODE", "disable"),
            ("REPLAY_BUCKET", bucket.as_str()),
            ("ARTIFACT_BUCKET", artifact_bucket.as_str()),
            ("RATE_LIMIT_TABLE", table.as_str()),
            ("EVENTS_TABLE", events_table.as_str()),
            ("TRUSTED_PROXY_CIDRS", "127.0.0.0/8, ::1/128"),
            ("DB_POOL_SIZE", "8"),
            ("RENDER_QUEUE_NAME", queue.as_str()),
            ("WEBHOOK_SECRET", WEBHOOK_SECRET),
            ("OUTBOX_SWEEP_INTERVAL", "0"),
            ("JANITOR_INTERVAL", "0"),
            ("SKIN_INGEST_INTERVAL", "0"),
            // The network limits are tested with their defaults in fairness.rs (which unsets
            // these) and skins.rs; elsewhere many clients share a documentation /24 (or /16)
            // while a test is about another cap.
            ("MAX_ACTIVE_PER_NETWORK", "1000000"),
            ("RATE_LIMIT_RENDER_NETWORK", "1000000/hour"),
            ("MAX_ACTIVE_PER_WIDE_NETWORK", "1000000"),
            ("RATE_LIMIT_RENDER_WIDE_NETWORK", "1000000/hour"),
            ("RATE_LIMIT_SKINS_UPLOAD_NETWORK", "1000000/hour"),
            ("RATE_LIMIT_SKINS_UPLOAD_WIDE_NETWORK", "1000000/hour"),
            ("RATE_LIMIT_KEY_LOOKUP_NETWORK", "1000000/hour"),
        ]
        .into_iter()
        .chain(
            aws_endpoint_url
                .iter()
                .map(|url| ("AWS_ENDPOINT_URL", url.as_str())),
        )
        .chain(overrides.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        vars.retain(|_, v| v != UNSET);
        let mut config = osurender_core::Config::from_lookup(|name| vars.get(name).cloned())
            .expect("test config is valid");
        // The tests' requests come through our edge: with the origin secret it adds.
        let mut edge_headers = reqwest::header::HeaderMap::new();
        if let Some(secret) = vars.get("CF_ORIGIN_SECRET") {
            edge_headers.insert(ORIGIN_SECRET_HEADER, secret.parse().unwrap());
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = osurender_local::start(config.clone(), listener)
            .await
            .expect("dev server starts");
        let addr = server.addr;
        tokio::spawn(server.finished());
        // As the dev server does: links absolute under its own address, for every instance.
        if config.http.public_base_url.is_none() {
            config.http.public_base_url = format!("http://{addr}").parse().ok();
        }

        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        TestApp {
            addr,
            http: reqwest::Client::builder()
                .default_headers(edge_headers)
                .build()
                .unwrap(),
            db,
            database_url,
            s3: osurender_core::support::aws::s3(&sdk),
            dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
            sqs: aws_sdk_sqs::Client::new(&sdk),
            config,
            bucket,
            table,
            queue,
            delivered_jobs: Mutex::default(),
            _database: database,
        }
    }

    /// `path` on this server; a link the server gave (absolute already) as it is.
    pub fn url(&self, path: &str) -> String {
        match path.starts_with("http://") || path.starts_with("https://") {
            true => path.to_owned(),
            false => format!("http://{}{}", self.addr, path),
        }
    }

    /// `POST /v1/render` as if Cloudflare forwarded it for `client_ip`.
    pub async fn render(&self, client_ip: &str, form: Form) -> Response {
        self.http
            .post(self.url("/v1/render"))
            .header("CF-Connecting-IP", client_ip)
            .multipart(form)
            .send()
            .await
            .expect("request completes")
    }

    /// A session of its own that holds `client`'s advisory lock (the Python fleet's formula) in
    /// an open transaction, until the test sends `COMMIT`.
    pub async fn hold_client_lock(&self, client: &str) -> tokio_postgres::Client {
        let (holder, connection) = tokio_postgres::connect(&self.database_url, NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        holder.batch_execute("BEGIN").await.unwrap();
        holder
            .execute(
                "SELECT pg_advisory_xact_lock($1)",
                &[&python_lock_id(client)],
            )
            .await
            .unwrap();
        holder
    }

    /// `POST /v1/render` of a valid form for `client_ip` (with `authorization`, if any), in a
    /// task of its own: its status, once answered.
    pub fn spawn_render(
        &self,
        client_ip: &str,
        authorization: Option<&str>,
    ) -> tokio::task::JoinHandle<StatusCode> {
        let mut request = self
            .http
            .post(self.url("/v1/render"))
            .header("CF-Connecting-IP", client_ip);
        if let Some(authorization) = authorization {
            request = request.header("Authorization", authorization);
        }
        let request = request.multipart(valid_form());
        tokio::spawn(async move { request.send().await.unwrap().status() })
    }

    /// The one value `sql` selects: the first column of its one row.
    pub async fn scalar<T: FromSqlOwned>(&self, sql: &str) -> T {
        self.scalar_with(sql, &[]).await
    }

    /// The one value `sql` selects with `params`: the first column of its one row.
    pub async fn scalar_with<T: FromSqlOwned>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> T {
        self.db.query_one(sql, params).await.unwrap().get(0)
    }

    /// The first column of every row `sql` selects with `params`, in its order.
    pub async fn column_with<T: FromSqlOwned>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Vec<T> {
        let rows = self.db.query(sql, params).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// The `count(*)` (or other `bigint`) that `sql` selects.
    pub async fn count(&self, sql: &str) -> i64 {
        self.scalar(sql).await
    }

    /// Waits (10 s at most, else fails with `what`) until a request of this database waits for
    /// an advisory lock another session holds.
    pub async fn until_a_request_waits_for_a_lock(&self, what: &str) {
        let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                       WHERE l.locktype = 'advisory' AND NOT l.granted \
                       AND d.datname = current_database()";
        let give_up = Instant::now() + Duration::from_secs(10);
        while self.count(waiting).await == 0 {
            assert!(Instant::now() < give_up, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The client keys the jobs were recorded under, sorted.
    pub async fn job_client_keys(&self) -> Vec<String> {
        self.column_with("SELECT DISTINCT client_ip FROM jobs ORDER BY 1", &[])
            .await
    }

    /// The bytes stored under `key` in the replay bucket.
    pub async fn replay_object(&self, key: &str) -> bytes::Bytes {
        self.s3
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes()
    }

    /// The keys of the replay bucket's objects.
    pub async fn replay_objects(&self) -> Vec<String> {
        self.objects("").await
    }

    /// The keys of the replay bucket's objects under `prefix`.
    pub async fn objects(&self, prefix: &str) -> Vec<String> {
        let listed = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }

    /// Another instance of the core on this server's database, queue and buckets, as another
    /// Lambda instance would be.
    pub async fn instance(&self) -> App {
        let clients = Clients::new(&self.config).await.unwrap();
        clients.app(self.config.clone())
    }
}

/// The proxies a `spawn_via_proxies` server reaches its backing services through.
pub struct Proxies {
    pub postgres: Proxy,
    pub aws: Proxy,
}

impl Proxies {
    /// Proxies to where `DATABASE_URL` and `AWS_ENDPOINT_URL` point.
    async fn start() -> Proxies {
        Proxies {
            postgres: Proxy::to_local_postgres().await,
            aws: Proxy::to_aws_stand_in().await,
        }
    }

    pub fn reset(&self) {
        self.postgres.reset();
        self.aws.reset();
    }
}

/// A value for `TestApp::spawn` overrides that removes the variable.
pub const UNSET: &str = "\u{0}unset";

/// The job id of a `202 Accepted` render.
pub async fn accepted_job(response: Response) -> String {
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: serde_json::Value = response.json().await.unwrap();
    body["job_id"].as_str().unwrap().to_owned()
}

pub async fn problem(response: Response, status: StatusCode, code: &str) -> serde_json::Value {
    assert_eq!(response.status(), status, "expected {code}");
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16());
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    body
}

pub fn header(response: &Response, name: &str) -> Option<u64> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

/// The Python original's lock id formula, written independently of the core's.
pub fn python_lock_id(client_ip: &str) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(client_ip.as_bytes());
    i64::from_le_bytes(digest[..8].try_into().unwrap())
}

/// A 422's `invalid_params` names, in order.
pub fn invalid_param_names(problem: &serde_json::Value) -> Vec<&str> {
    problem["invalid_params"]
        .as_array()
        .expect("invalid_params")
        .iter()
        .map(|param| param["name"].as_str().expect("a name"))
        .collect()
}

/// Waits, if needed, for a minute with 20 s left: requests sent next count in one minute's
/// windows (a burst that straddled two would see its windows start again mid-way).
pub async fn within_one_minute() {
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 60;
    if into_minute > 40 {
        tokio::time::sleep(Duration::from_secs(61 - into_minute)).await;
    }
}
