//! Fetching a replay a client names by URL (`replay_url`), under the callbacks' address guard
//! (callback_sender.rs): the resolver refuses a host that resolves to any address callbacks may
//! not reach and connects to the addresses it checked; a literal address is checked first;
//! redirects are not followed and no proxy is used. The body is streamed and cut at the cap.

use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::callback_sender::{send_error, GuardedClient};
use crate::domain::callback::CallbackUrl;
use crate::domain::deadline;
use crate::ports::callbacks::SendError;
use crate::ports::replays::{FetchError, ReplayFetcher};

const USER_AGENT: &str = concat!("osurender-replays/", env!("CARGO_PKG_VERSION"));

/// The fetcher of `POST /v1/render`'s `replay_url`.
pub struct HttpReplays(GuardedClient);

impl HttpReplays {
    /// `timeout`: the whole fetch, connection included (the request's deadline bounds it too).
    /// `allow_private`: `ALLOW_PRIVATE_CALLBACKS` (development), which also permits `http`.
    pub fn new(timeout: Duration, allow_private: bool) -> Self {
        Self(GuardedClient::new(timeout, allow_private, USER_AGENT))
    }
}

#[async_trait]
impl ReplayFetcher for HttpReplays {
    async fn fetch(&self, url: &CallbackUrl, max_bytes: usize) -> Result<Bytes, FetchError> {
        self.0.check_literal_address(url).map_err(said)?;
        let client = self
            .0
            .get()
            .map_err(|_| failed("the service could not fetch it"))?;
        let fetch = async {
            let mut response = client
                .get(url.url().clone())
                .send()
                .await
                .map_err(|error| said(send_error(error)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(failed(&format!("the server answered {}", status.as_u16())));
            }
            if response
                .content_length()
                .is_some_and(|len| len > max_bytes as u64)
            {
                return Err(FetchError::TooLarge(max_bytes));
            }
            let mut body = BytesMut::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|error| said(send_error(error)))?
            {
                if body.len() + chunk.len() > max_bytes {
                    return Err(FetchError::TooLarge(max_bytes));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body.freeze())
        };
        deadline::within(fetch)
            .await
            .map_err(|_| failed("it did not arrive within the request's deadline"))?
    }
}

fn failed(why: &str) -> FetchError {
    FetchError::Failed(format!("the replay could not be fetched: {why}"))
}

/// The guard's or the connection's failure as the client is told it: what happened to the host
/// it named, never an address it resolved to (that would let anyone map internal names).
fn said(error: SendError) -> FetchError {
    match error {
        SendError::Refused { host, .. } => failed(&format!("the host {host} is not allowed")),
        SendError::Unresolved(host) => failed(&format!("the host {host} does not resolve")),
        SendError::LookupFailed(host) => failed(&format!("the host {host} could not be looked up")),
        SendError::Status(code) => failed(&format!("the server answered {code}")),
        SendError::Failed(text) => {
            let kind = text.split(':').next().unwrap_or("failed");
            failed(kind)
        }
    }
}
