//! The osurender core: everything the Lambda functions and the dev server share.
//!
//! One folder a layer, lowest first; a layer imports only itself and the layers under it
//! (`infra/check-layers`, DESIGN.md §7):
//! - `domain`: the types validated once at the edge, the replay and skin-archive parsers;
//! - `support`: problems (`Rejection`), configuration, metrics, telemetry, the AWS SDK setup;
//! - `ports`: the traits the use cases need of the outside world;
//! - `adapters`: Postgres, DynamoDB, S3, SQS, Secrets Manager, the callback sender, and the
//!   in-memory fakes (feature `memory`);
//! - `usecases`: admission (read `usecases/admission.rs` top to bottom for the order of the
//!   checks), job reads, the job lifecycle, the outbox, callbacks, keys, skins, the janitor;
//! - `routes`: HTTP routes over the use cases;
//! - `entry`: the HTTP service, the Lambda entry points and the wiring that builds the adapters.

pub mod adapters;
pub mod domain;
pub mod entry;
pub mod ports;
pub mod routes;
pub mod support;
pub mod usecases;

pub use entry::wiring::Clients;
pub use support::config::Config;
pub use usecases::app::App;
