//! Each port's guarantees, written once as a generic async suite: the unit tests run it against
//! the in-memory adapter (adapters/memory/), the integration tests against the real one
//! (Postgres, the AWS stand-in), so a fake cannot keep a promise the real adapter breaks, or
//! the other way round. A suite panics on the first broken guarantee, naming it.
//!
//! A suite leaves what it made behind, under names of its own (`contract-…`, random ids), so it
//! runs on a store that holds other data too.

pub mod idempotency;
pub mod keys;
pub mod limiter;
pub mod skin_names;
