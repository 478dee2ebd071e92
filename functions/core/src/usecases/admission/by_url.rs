//! A replay named by URL (`replay_url`): a bot passes a Discord attachment's URL
//! instead of downloading and uploading it. The URL follows the callbacks' rules (https; in
//! development `ALLOW_PRIVATE_CALLBACKS=true` also lets it reach loopback over http) and is
//! fetched under their address guard (ports/replays.rs `ReplayFetcher`), only once the rate
//! limit has counted the request: whoever can submit a render can make the service fetch, at
//! most as often as its render limit, at most `MAX_REPLAY_BYTES` each, within a few seconds.
//! The bytes then get every check an upload gets, with the same codes.

use crate::domain::callback::CallbackUrl;
use crate::domain::caller::Caller;
use crate::domain::form::{Form, TextValue, UploadedFile};
use crate::ports::replays::FetchError;
use crate::support::problem::Rejection;
use crate::usecases::app::App;

use super::form::check_replay;
use super::{check_render_rate, RateCount, ReplayFile};

/// The form field that names the replay by URL, and o!rdr's name of it.
pub const REPLAY_URL_FIELD: &str = "replay_url";
const ORDR_REPLAY_URL_FIELD: &str = "replayURL";

/// The replay file check of a form that names its replay by URL (`replay_url` or o!rdr's `replayURL`, the last
/// sent; a blank one is none): a key's request (as for `callback_url`, the service makes
/// requests out only for clients it can hold to a quota), on a deployment with a way out,
/// exactly one of `replay` (the file) and the URL, which the callbacks' rules allow. `None`: the
/// form uploads its replay.
pub(super) fn replay_url(
    app: &App,
    caller: &Caller,
    form: &Form,
) -> Result<Option<CallbackUrl>, Rejection> {
    let invalid = |reason: &str| Rejection::InvalidField(format!("{REPLAY_URL_FIELD}: {reason}"));
    let sent = form
        .fields
        .iter()
        .rev()
        .find(|(name, _)| name == REPLAY_URL_FIELD || name == ORDR_REPLAY_URL_FIELD)
        .map(|(_, value)| value);
    let text = match sent {
        None => return Ok(None),
        Some(TextValue::Text(text)) if text.trim().is_empty() => return Ok(None),
        Some(TextValue::Text(text)) => text,
        Some(_) => return Err(invalid("must be a URL of at most 1024 bytes")),
    };
    if caller.is_anonymous() {
        return Err(Rejection::ApiKeyRequired(
            "a `replay_url` needs `Authorization: Bearer <key>`: only a client with an API key \
             can have the service fetch for it (without a key, upload the file)",
        ));
    }
    if !app.config.callbacks_egress {
        return Err(invalid(
            "this deployment cannot fetch replays (no way out: CALLBACKS_EGRESS=false); upload the file",
        ));
    }
    if form.file.is_some() {
        return Err(invalid(
            "send exactly one of `replay` (the file) and `replay_url`",
        ));
    }
    CallbackUrl::parse(text, app.config.allow_private_callbacks)
        .map(Some)
        .map_err(|reason| invalid(&reason))
}

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
    let max = app.config.max_replay_bytes;
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
