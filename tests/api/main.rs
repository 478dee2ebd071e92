//! Black-box tests of the API over HTTP: each test starts the dev server on its own port with
//! its own database, limiter table, bucket and render queue, against real Postgres and the AWS
//! stand-in.
//!
//! Each test file is a topic; what several of them share (the app, the invariants, the replay
//! and skin builders) is in `support`, and no test file uses another. What other test crates
//! need too (fresh databases, the fault proxy, the TLS-only PostgreSQL) is in
//! `osurender-testkit` (testkit/).

mod support;

mod bots;
mod browser;
mod budget;
mod callbacks;
mod contracts;
mod entitlements;
mod events;
mod fair_service;
mod fairness;
mod faults;
mod hostile;
mod idempotency;
mod keys;
mod lifecycle;
mod listing;
mod options;
mod origin;
mod outcomes;
mod policy;
mod render;
mod replay_policy;
mod replay_url;
mod request_ids;
mod rotation;
mod sandbox;
mod skins;
mod status;
mod storms;
mod tls;
