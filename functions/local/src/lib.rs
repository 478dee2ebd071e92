//! The development server as a library, so the integration tests run the very same thing.

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use osurender_core::adapters::postgres::migrations;
use osurender_core::entry::wiring::callback_sender;
use osurender_core::ports::callbacks::CallbackSender;
use osurender_core::ports::events::Pusher;
use osurender_core::ports::StoreError;
use osurender_core::support::config::SecretSource;
use osurender_core::usecases::lifecycle::Verifier;
use osurender_core::usecases::outbox::SweepReport;
use osurender_core::{
    entry::http, support::aws, usecases::callbacks, usecases::events as live, usecases::janitor,
    usecases::outbox, usecases::skins, App, Clients, Config,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

mod events;
pub mod provision;
mod wakes;
mod workers;

/// How long the start-up may wait for each AWS call that creates what is missing.
const PROVISION_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Migrates the database, creates the limiter table, the buckets and the render queue when
/// missing, then serves; sweeps the outbox, runs the janitor and ingests presigned skin
/// uploads on timers, and plays the render workers if asked to.
pub async fn start(mut config: Config, listener: TcpListener) -> anyhow::Result<Server> {
    let clients = Clients::new(&config).await?;
    let migrated = migrations::migrate(&clients.pool, config.database.migrate_lock_timeout)
        .await
        .context("applying migrations")?;
    tracing::info!(outcome = migrated.summary(), "migrations");
    // Creating what is missing is start-up, not a request: a slow stand-in gets
    // PROVISION_TIMEOUT rather than the requests' AWS_TIMEOUT_MS.
    let setup = aws::sdk_config(PROVISION_TIMEOUT, config.aws.endpoint_url.as_deref()).await;
    let (dynamodb, s3) = (aws::dynamodb(&setup), aws::s3(&setup));
    provision::rate_limit_table(&dynamodb, &config.aws.rate_limit_table).await?;
    provision::events_table(&dynamodb, &config.aws.events_table).await?;
    provision::bucket(&s3, &config.aws.replay_bucket).await?;
    provision::bucket(&s3, &config.aws.artifact_bucket).await?;
    provision::sandbox_samples(&s3, &config.aws.artifact_bucket).await?;
    provision::bucket(&s3, &config.aws.skin_bucket).await?;
    let queue_url = match &config.aws.render_queue_url {
        Some(url) => url.clone(),
        None => {
            let sqs = aws_sdk_sqs::Client::new(&setup);
            provision::queue(&sqs, &config.aws.render_queue_name).await?
        }
    };
    let source = config.secrets.webhook.get_or_insert_with(|| {
        // Never logged: a user who wants to sign reports by hand sets WEBHOOK_SECRET.
        // Two v4 UUIDs: 244 bits from the operating system's random source.
        tracing::info!("WEBHOOK_SECRET is not set; generated a random one for this run");
        SecretSource::Fixed {
            current: format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            ),
            previous: None,
        }
    });
    let worker_secret = match source {
        SecretSource::Fixed { current, .. } => current.clone(),
        SecretSource::Stored(_) if config.dev_server.simulate_workers => {
            bail!("the simulated workers sign with WEBHOOK_SECRET; unset WEBHOOK_SECRET_ARN")
        }
        SecretSource::Stored(_) => String::new(),
    };

    if config.dev_server.simulate_workers
        && matches!(config.secrets.origin, Some(SecretSource::Stored(_)))
    {
        bail!(
            "the simulated workers reach the API with CF_ORIGIN_SECRET; unset CF_ORIGIN_SECRET_ARN"
        );
    }

    let addr = listener.local_addr()?;
    config
        .http
        .events_url
        .get_or_insert_with(|| format!("ws://{}/v1/events", reachable(addr)));
    if config.http.public_base_url.is_none() {
        config.http.public_base_url = format!("http://{}", reachable(addr)).parse().ok();
    }
    let mut app = clients.app(config);
    // Live events go to this process's own sockets, as API Gateway's Management API would.
    let sockets = Arc::new(events::Sockets::default());
    app.pusher = Some(sockets.pusher.clone() as Arc<dyn Pusher>);
    app.read_secrets().await;
    let verifier = Verifier::from_app(&app).await?;
    let routes = http::all_routes(verifier).merge(events::routes(sockets.clone()));
    let router = http::service(routes, app.clone());
    events::push_while_watched(app.clone(), sockets);
    run_scheduled(&app, &clients.sqs);
    if app.config.dev_server.simulate_workers {
        workers::Simulator {
            app: app.clone(),
            clients: clients.clone(),
            queue_url,
            base_url: format!("http://{}", reachable(addr)),
            secret: worker_secret,
        }
        .spawn();
        tracing::info!("simulating render workers");
    }
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move { axum::serve(listener, service).await });
    Ok(Server { addr, task })
}

/// A callback sweep and a push of watched jobs' changes, as the dispatcher's
/// (entry/lambda/events.rs): then a wake for what is left or due next, when there is a wake
/// queue.
pub(crate) async fn sweep_callbacks(app: &App, sender: &Arc<dyn CallbackSender>, what: &str) {
    let (swept, pushed) = tokio::join!(callbacks::sweep(app, sender), live::sweep_pushes(app));
    callbacks::wake_after_sweep(app, swept.as_ref().ok()).await;
    log_sweep(what, swept);
    match pushed {
        Ok(report) if report.claimed > 0 => tracing::info!(?report, "{what} push sweep"),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "{what} push sweep failed"),
    }
}

fn log_sweep(what: &str, swept: Result<SweepReport, StoreError>) {
    match swept {
        Ok(report) if report.claimed > 0 => tracing::info!(?report, "{what} sweep"),
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "{what} sweep failed"),
    }
}

/// The scheduled functions of a deployment, on the dev server's timers, and the dispatcher's
/// wakes when there is a wake queue.
fn run_scheduled(app: &App, sqs: &aws_sdk_sqs::Client) {
    let sender = callback_sender(&app.config);
    if let Some(url) = &app.config.aws.callback_wake_queue_url {
        wakes::spawn(app.clone(), sqs.clone(), url.clone(), sender.clone());
    }
    let dev_server = &app.config.dev_server;
    every(dev_server.outbox_sweep_interval, app, move |app| {
        let sender = sender.clone();
        async move {
            log_sweep("outbox", outbox::sweep(&app).await);
            sweep_callbacks(&app, &sender, "callback").await;
        }
    });
    every(dev_server.janitor_interval, app, |app| async move {
        if let Err(error) = janitor::run(&app).await {
            tracing::warn!(%error, "janitor run failed");
        }
    });
    // Stands in for the S3 event that invokes the ingest of presigned skin uploads on AWS.
    every(dev_server.skin_ingest_interval, app, |app| async move {
        if let Err(error) = skins::ingest_pending(&app).await {
            tracing::warn!(%error, "skin ingest poll failed");
        }
    });
}

/// Runs `task` every `period` (never if zero) for as long as the runtime lives; a slow run
/// delays the next instead of piling up.
fn every<F, Fut>(period: Duration, app: &App, task: F)
where
    F: Fn(App) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    if period.is_zero() {
        return;
    }
    let app = app.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            task(app.clone()).await;
        }
    });
}

/// Where this server can reach itself: a wildcard listen address is reached on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(v4) if v4.ip().is_unspecified() => (Ipv4Addr::LOCALHOST, v4.port()).into(),
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => (Ipv6Addr::LOCALHOST, v6.port()).into(),
        other => other,
    }
}
