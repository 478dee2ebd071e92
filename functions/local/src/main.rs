//! `osurender-local`: the whole API on `OSURENDER_LISTEN`, against the configured Postgres and
//! AWS endpoint (a local stand-in by default: see `infra/`).
//!
//! `--simulate-workers` (or `SIMULATE_WORKERS=1`) also plays the render workers.

use anyhow::bail;
use osurender_core::support::config::DbSslMode;
use osurender_core::{support::telemetry, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init();
    // The local trust cluster takes plain connections; a mode in DB_SSLMODE or DATABASE_URL
    // still decides (on AWS, with neither, it is verify-full).
    let mut config = Config::from_env_with_sslmode(DbSslMode::Disable)?;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--simulate-workers" => config.dev_server.simulate_workers = true,
            other => bail!("unknown argument `{other}` (the only one is --simulate-workers)"),
        }
    }
    let listener = tokio::net::TcpListener::bind(config.dev_server.listen).await?;
    let server = osurender_local::start(config, listener).await?;
    tracing::info!(addr = %server.addr, "osurender-local listening");
    tokio::select! {
        result = server.finished() => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
