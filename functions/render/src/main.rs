//! `POST /v1/render` on Lambda: configuration and clients once per instance, then the core.

use osurender_core::{http, lambda, telemetry, App, Clients, Config};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    telemetry::init();
    let config = Config::from_env()?;
    let clients = Clients::new(&config).await?;
    let app = App::new(config, &clients);
    lambda::run(http::service(http::render_routes(), app)).await
}
