//! Entry points: the HTTP service (dev server and Lambda alike), the Lambda runtimes, and the
//! wiring that builds the adapters behind an `App`.

pub mod http;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod wiring;
