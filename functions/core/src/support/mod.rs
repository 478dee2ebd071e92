//! What every layer above the domain leans on: problems, configuration, metrics, telemetry.

pub mod aws;
pub mod config;
pub mod estimate;
pub mod metrics;
pub mod problem;
pub mod refreshed;
pub mod telemetry;
