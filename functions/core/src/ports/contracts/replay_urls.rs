//! The replay fetch's guarantees (`ReplayFetcher`): a body within the cap as it is, one past it
//! (declared or streamed) refused as too large, anything but a 2xx a failure that names the
//! status.

use bytes::Bytes;

use crate::domain::callback::CallbackUrl;
use crate::ports::replays::{FetchError, ReplayFetcher};

/// What the caller serves for the suite: `body` at `ok`, 4000 bytes at `big`, nothing (404)
/// at `missing`.
pub struct Served {
    pub ok: String,
    pub body: Bytes,
    pub big: String,
    pub missing: String,
}

pub async fn suite(fetcher: &dyn ReplayFetcher, served: &Served) {
    let url = |text: &str| CallbackUrl::parse(text, true).expect("a URL");
    let fetched = fetcher.fetch(&url(&served.ok), 4000).await;
    assert_eq!(fetched, Ok(served.body.clone()), "a body within the cap");
    let exact = fetcher.fetch(&url(&served.big), 4000).await;
    assert_eq!(
        exact.map(|b| b.len()),
        Ok(4000),
        "a body of exactly the cap"
    );
    assert_eq!(
        fetcher.fetch(&url(&served.big), 3999).await,
        Err(FetchError::TooLarge(3999)),
        "a body past the cap"
    );
    match fetcher.fetch(&url(&served.missing), 4000).await {
        Err(FetchError::Failed(why)) => assert!(why.contains("404"), "{why}"),
        other => panic!("a 404 is a failure that names it: {other:?}"),
    }
}
