//! Black-box tests of the API over HTTP: each test starts the dev server on its own port with
//! its own database, limiter table, bucket and render queue, against real Postgres and the AWS
//! stand-in.

mod budget;
mod faults;
mod helpers;
mod hostile;
mod idempotency;
mod invariants;
mod lifecycle;
mod outcomes;
mod proxy;
mod render;
mod skins;
mod storms;
