//! Each port's guarantees, written once as a generic async suite: the unit tests run it against
//! the in-memory adapter (adapters/memory/), the integration tests against the real one
//! (Postgres, the AWS stand-in), so a fake cannot keep a promise the real adapter breaks, or
//! the other way round. A suite panics on the first broken guarantee, naming it.
//!
//! A suite leaves what it made behind, under names of its own (`contract-…`, random ids), so it
//! runs on a store that holds other data too — all but the jobs suite, whose janitor sweeps and
//! global caps act on every job: give it a store of its own (a fresh database).

pub mod artifacts;
pub mod callbacks;
pub mod connections;
pub mod idempotency;
pub mod jobs;
pub mod keys;
pub mod leased;
pub mod limiter;
pub mod objects;
pub mod policy;
pub mod pushers;
pub mod pushes;
pub mod queue;
pub mod release;
pub mod replay_urls;
pub mod secrets;
pub mod skin_names;
pub mod wake;

use std::net::{IpAddr, Ipv4Addr};

use crate::domain::caller::Caller;
use crate::domain::client::{ClientKey, NetworkPrefixes};

/// A client of its own for each run: what a suite counts or claims on a store shared between
/// runs stays apart.
fn fresh_client() -> ClientKey {
    ClientKey::new(fresh_address(), 64)
}

/// An anonymous caller of its own, alone in its network and its wide network (a /32).
pub fn fresh_caller() -> Caller {
    let ip = fresh_address();
    let alone = NetworkPrefixes {
        ipv4: 32,
        ipv6: 128,
    };
    let network = ClientKey::network(ip, alone);
    Caller::anonymous(ClientKey::new(ip, 64), network.clone(), network)
}

fn fresh_address() -> IpAddr {
    let n = uuid::Uuid::new_v4().as_u128();
    IpAddr::V4(Ipv4Addr::new(10, (n >> 16) as u8, (n >> 8) as u8, n as u8))
}
