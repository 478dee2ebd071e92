//! The osurender core: everything the Lambda functions and the dev server share.
//!
//! Read `admission` top to bottom for the order of the checks; the stores (`limiter`, `jobs`,
//! `replays`) are adapters behind traits, built once per process in `app`.

pub mod admission;
pub mod app;
pub mod aws;
pub mod config;
pub mod db;
pub mod domain;
pub mod form;
pub mod http;
pub mod jobs;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod limiter;
pub mod problem;
pub mod replay;
pub mod replays;
pub mod telemetry;

pub use app::{App, Clients};
pub use config::Config;
