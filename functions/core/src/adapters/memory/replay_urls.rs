//! Replays served at URLs: what a test puts there, fetched as the HTTP adapter would.

use super::*;
use crate::domain::callback::CallbackUrl;
use crate::ports::replays::{FetchError, ReplayFetcher};

/// The bodies served at URLs (a test `serve`s them); any other URL answers 404. The cap and
/// the failures read as the HTTP adapter's (adapters/replay_fetch.rs).
#[derive(Default)]
pub struct MemoryReplayUrls {
    served: Mutex<HashMap<String, Bytes>>,
}

impl MemoryReplayUrls {
    pub fn serve(&self, url: &str, body: Bytes) {
        lock(&self.served).insert(url.to_owned(), body);
    }
}

#[async_trait]
impl ReplayFetcher for MemoryReplayUrls {
    async fn fetch(&self, url: &CallbackUrl, max_bytes: usize) -> Result<Bytes, FetchError> {
        match lock(&self.served).get(url.as_str()) {
            Some(body) if body.len() > max_bytes => Err(FetchError::TooLarge(max_bytes)),
            Some(body) => Ok(body.clone()),
            None => Err(FetchError::Failed(
                "the replay could not be fetched: the server answered 404".into(),
            )),
        }
    }
}
