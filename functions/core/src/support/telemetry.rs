//! Structured JSON logs, one line per event, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second call (tests start several servers in one process) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        // Each line carries its request's span (request id, method, route) as `span`.
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .try_init();
}
