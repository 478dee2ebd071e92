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

use std::net::{IpAddr, Ipv4Addr};

use crate::domain::client::ClientKey;

/// A client of its own for each run: what a suite counts or claims on a store shared between
/// runs stays apart.
fn fresh_client() -> ClientKey {
    let n = uuid::Uuid::new_v4().as_u128();
    let ip = Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8);
    ClientKey::new(IpAddr::V4(ip), 64)
}
