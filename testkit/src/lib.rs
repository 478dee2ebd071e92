//! What the workspace's test crates share, in one place:
//!
//! - `stack`: where the local stack of `infra/up.sh` listens (PostgreSQL, the AWS stand-in),
//!   unless the environment says otherwise, and the SDK configuration of the stand-in;
//! - `database`: fresh databases with unique names, dropped `WITH (FORCE)` when their guard
//!   drops (a test that fails or panics included), so a test run leaves none behind;
//! - `tls`: the TLS-only PostgreSQL of `infra/postgres-tls.sh`, its CAs and connections to it;
//! - `proxy`: the counting, fault-injecting TCP proxy between code under test and its services,
//!   with `pg`, the one PostgreSQL wire framer of the tree;
//! - `lambda`: a local Lambda Runtime API that runs a function's built binary and feeds it
//!   events.
//!
//! Nothing here knows the service: no configuration, no routes, no schema. The builders of what
//! clients send (replays, skins, forms) stay with the HTTP tests in `tests/api/support`.

pub mod database;
pub mod lambda;
pub mod pg;
pub mod proxy;
pub mod stack;
pub mod tls;

pub use database::{fresh_database, Database};

/// Feeds `stream` to `scan` whole, then in pieces of every size from 1 to 16 bytes: the result
/// must not depend on where reads split the stream.
#[cfg(test)]
pub(crate) fn in_pieces<T: PartialEq + std::fmt::Debug>(
    stream: &[u8],
    mut scan: impl FnMut(&[&[u8]]) -> T,
) -> T {
    let whole = scan(&[stream]);
    for size in 1..=16 {
        let pieces: Vec<&[u8]> = stream.chunks(size).collect();
        assert_eq!(scan(&pieces), whole, "pieces of {size}");
    }
    whole
}
