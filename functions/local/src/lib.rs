//! The development server as a library, so the integration tests run the very same thing.

use std::net::SocketAddr;

use anyhow::Context;
use osurender_core::{db, http, App, Clients, Config};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

mod provision;

pub struct Server {
    pub addr: SocketAddr,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Resolves when the server stops (it only stops on an I/O error).
    pub async fn finished(self) -> anyhow::Result<()> {
        Ok(self.task.await??)
    }
}

/// Migrates the database, creates the limiter table and the bucket when missing, then serves.
pub async fn start(config: Config, listener: TcpListener) -> anyhow::Result<Server> {
    let clients = Clients::new(&config).await?;
    db::migrate(&clients.pool)
        .await
        .context("applying migrations")?;
    provision::rate_limit_table(&clients.dynamodb, &config.rate_limit_table).await?;
    provision::bucket(&clients.s3, &config.replay_bucket).await?;

    let app = App::new(config, &clients);
    let router = http::service(http::render_routes(), app);
    let addr = listener.local_addr()?;
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move { axum::serve(listener, service).await });
    Ok(Server { addr, task })
}
