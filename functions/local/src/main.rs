//! `osurender-local`: the whole API on `OSURENDER_LISTEN`, against the configured Postgres and
//! AWS endpoint (a local stand-in by default: see `infra/`).

use osurender_core::{telemetry, Config};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init();
    let config = Config::from_env()?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let server = osurender_local::start(config, listener).await?;
    tracing::info!(addr = %server.addr, "osurender-local listening");
    tokio::select! {
        result = server.finished() => result,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
