//! The osurender core: everything the Lambda functions and the dev server share.
//!
//! Read `admission` top to bottom for the order of the checks; the stores (`limiter`, `jobs`,
//! `replays`, `outbox`, `queue`) are adapters behind traits, built once per process in `app`.
//! After admission a job lives through `webhook` (workers' signed reports), `job_status` (the
//! reads), `outbox` (delivery to the render queue) and `janitor` (jobs that will not finish).

pub mod admission;
pub mod app;
pub mod aws;
pub mod callbacks;
pub mod config;
pub mod deadline;
pub mod domain;
pub mod estimate;
pub mod form;
pub mod health;
pub mod http;
pub mod idempotency;
pub mod janitor;
pub mod keys;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod lifecycle;
pub mod metrics;
pub mod outbox;
pub mod ports;
pub mod problem;
pub mod replay;
pub mod request;
pub mod routes;
pub mod secrets;
pub mod skins;
pub mod store;
pub mod telemetry;
pub mod wiring;

pub use app::App;
pub use config::Config;
pub use wiring::Clients;
