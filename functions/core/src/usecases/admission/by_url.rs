//! A replay named by URL (`replay_url`): a bot passes a Discord attachment's URL
//! instead of downloading and uploading it. The URL follows the callbacks' rules (https; in
//! development `ALLOW_PRIVATE_CALLBACKS=true` also lets it reach loopback over http) and is
//! fetched under their address guard (ports/replays.rs `ReplayFetcher`), only once the rate
//! limit has counted the request: whoever can submit a render can make the service fetch, at
//! most as often as its render limit, at most `MAX_REPLAY_BYTES` each, within a few seconds.
//! The bytes then get every check an upload gets, with the same codes.

use crate::domain::callback::CallbackUrl;
use crate::domain::caller::Caller;
use crate::domain::form::UploadedFile;
use crate::ports::replays::FetchError;
use crate::support::problem::Rejection;
use crate::usecases::app::App;

use super::form::{check_replay, REPLAY_URL_FIELD};
use super::{check_render_rate, RateCount, ReplayFile};

/// The rate limit, then the replay file, structure and rules checks of a replay named by URL:
/// the rate limit counts the request before anything is fetched for it (a fetch that fails
/// keeps the hit: it was work done for the client); then the bytes get an upload's checks, in
/// its order and with its codes.
pub(super) async fn fetch_replay(
    app: &App,
    caller: &Caller,
    url: &CallbackUrl,
    count: &mut RateCount,
) -> Result<ReplayFile, Rejection> {
    *count = RateCount::BeforeFetch(check_render_rate(app, caller).await?);
    let max = app.config.renders.max_replay_bytes;
    match app.replay_fetcher.fetch(url, max).await {
        Ok(bytes) if bytes.is_empty() => Err(Rejection::InvalidFile(format!(
            "the replay at `{REPLAY_URL_FIELD}` is empty"
        ))),
        Ok(bytes) => check_replay(
            app,
            caller,
            UploadedFile {
                file_name: String::new(),
                bytes,
            },
        ),
        Err(FetchError::TooLarge(limit)) => Err(Rejection::FileTooLarge(format!(
            "the replay at `{REPLAY_URL_FIELD}` is larger than {limit} bytes"
        ))),
        Err(FetchError::Failed(why)) => Err(Rejection::ReplayUrlFailed(why)),
    }
}
