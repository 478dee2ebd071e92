//! What the test files share; they import from here and never from one another. What other
//! test crates need too (fresh databases, the TLS-only PostgreSQL, the fault proxy) is in the
//! `osurender-testkit` crate (testkit/).
//!
//! - `app`: the dev server under test, spawned per test on fresh resources (optionally behind
//!   the testkit's proxies), its HTTP answers, and ways to look behind it;
//! - `invariants`: the state every fault, crash and storm must leave intact;
//! - `replays` and `skins`: the builders of what clients upload, and the forms that carry it;
//! - `jobs`: submissions, status reads and signed worker reports;
//! - `keys`: API keys made in the test's database, and requests that carry them;
//! - `queue`: the render queue and the outbox that feeds it;
//! - `secrets`: secrets in the stand-in's Secrets Manager, created and rotated.
//! - `callbacks`: a client's callback receiver, and the sweeps that deliver to it.
//! - `events`: a live-event WebSocket client, as a bot or a CLI opens one.

pub mod app;
pub mod callbacks;
pub mod events;
pub mod invariants;
pub mod jobs;
pub mod keys;
pub mod policy;
pub mod queue;
pub mod replays;
pub mod secrets;
pub mod skins;
