//! The use cases: what the API does, over the ports. `app` holds the ports a process built.

pub mod admission;
pub mod app;
pub mod callbacks;
pub mod events;
pub mod health;
pub mod idempotency;
pub mod janitor;
pub mod jobs;
pub mod keys;
pub mod lifecycle;
pub mod outbox;
pub mod policy;
pub mod request;
pub mod secrets;
pub mod skins;
pub mod status;
