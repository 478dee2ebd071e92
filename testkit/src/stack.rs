//! Where the local stack listens (`infra/lib.sh` sets the same defaults), unless the environment
//! says otherwise.

/// The local stack's defaults, for every variable a test or the code under test reads.
pub const DEFAULT_ENV: [(&str, &str); 5] = [
    (
        "DATABASE_URL",
        "postgres://postgres@127.0.0.1:5432/postgres",
    ),
    ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
];

fn var_or_default(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        let (_, default) = DEFAULT_ENV.iter().find(|(var, _)| *var == name).unwrap();
        (*default).to_owned()
    })
}

/// The local PostgreSQL server: `DATABASE_URL`, or the stack's default.
pub fn server_url() -> String {
    var_or_default("DATABASE_URL")
}

/// `server_url` with `database` for its database (its query, if any, kept).
pub fn database_url(database: &str) -> String {
    let server = server_url();
    let (address, query) = match server.split_once('?') {
        Some((address, query)) => (address, Some(query)),
        None => (server.as_str(), None),
    };
    let (base, _) = address
        .rsplit_once('/')
        .expect("DATABASE_URL ends in /<database>");
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// The server's host and port, for what must be given them apart (`DB_HOST`, `DB_PORT`, a
/// proxy's upstream). A TCP host is required.
pub fn server_host_port() -> (String, u16) {
    let config: tokio_postgres::Config = server_url().parse().expect("DATABASE_URL parses");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(path) => {
            panic!("DATABASE_URL needs a TCP host, not {}", path.display())
        }
    };
    (host, config.get_ports().first().copied().unwrap_or(5432))
}

/// The AWS stand-in: `AWS_ENDPOINT_URL`, or the stack's default.
pub fn aws_endpoint() -> String {
    var_or_default("AWS_ENDPOINT_URL")
}

/// The SDK configuration of the AWS stand-in: its endpoint, region and credentials.
pub async fn aws_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(aws_endpoint())
        .region(aws_config::Region::new(var_or_default("AWS_REGION")))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            var_or_default("AWS_ACCESS_KEY_ID"),
            var_or_default("AWS_SECRET_ACCESS_KEY"),
            None,
            None,
            "osurender-testkit",
        ))
        .load()
        .await
}

/// A queue of its own on the AWS stand-in, named `<what>-<random>`: its URL.
pub async fn fresh_queue(sqs: &aws_sdk_sqs::Client, what: &str) -> String {
    let name = format!("{what}-{}", uuid::Uuid::new_v4().simple());
    sqs.create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("the stand-in creates a queue")
        .queue_url
        .expect("a created queue has a URL")
}

/// A plain connection to `url`, its connection task spawned; panics naming the URL.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} (run ./infra/up.sh): {e}"));
    tokio::spawn(connection);
    client
}
