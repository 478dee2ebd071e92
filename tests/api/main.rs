//! Black-box tests of the API over HTTP: each test starts the dev server on its own port with
//! its own database, limiter table and bucket, against real Postgres and the AWS stand-in.

mod helpers;
mod render;
