//! The dev server's own settings: where it listens, and the periodic work it does in place of
//! the scheduled functions and S3 events on AWS.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct DevServer {
    /// The address it listens on (`OSURENDER_LISTEN`).
    pub listen: SocketAddr,
    /// How often it sweeps the outbox (`OUTBOX_SWEEP_INTERVAL`; zero: never).
    pub outbox_sweep_interval: Duration,
    /// How often it runs the janitor (`JANITOR_INTERVAL`; zero: never).
    pub janitor_interval: Duration,
    /// Whether it plays the render workers (`SIMULATE_WORKERS`).
    pub simulate_workers: bool,
    /// How often it ingests presigned skin uploads waiting under `incoming/`
    /// (`SKIN_INGEST_INTERVAL`; zero: never).
    pub skin_ingest_interval: Duration,
}

impl DevServer {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            listen: env.parse("OSURENDER_LISTEN", SocketAddr::from(([127, 0, 0, 1], 3000)))?,
            outbox_sweep_interval: env.secs("OUTBOX_SWEEP_INTERVAL", 5)?,
            janitor_interval: env.secs("JANITOR_INTERVAL", 30)?,
            simulate_workers: env.flag("SIMULATE_WORKERS", false)?,
            skin_ingest_interval: env.secs("SKIN_INGEST_INTERVAL", 5)?,
        })
    }
}
