//! Steps every submission route shares (render, skin uploads, the reads): the form's bounded
//! read (400/413), the file check, the endpoint's rate limit, and what a
//! submission came to.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::form::{self, BodyStream, Form, FormError, FormSpec, UploadedFile};
use crate::domain::job::JobId;
use crate::domain::rate::{LimitScope, RateDecision, RateLimit};
use crate::ports::idempotency::{Reply, StoredResponse};
use crate::ports::limiter::Hit;
use crate::support::problem::Rejection;
use crate::usecases::app::App;

/// What a submission came to: what it made (the job, for a render), or the step that refused
/// it, plus the rate-limit state once the limit step has run (reported on every later response).
#[derive(Debug)]
pub struct Submission<T = JobId> {
    pub outcome: Result<T, Rejection>,
    pub rate: Option<RateDecision>,
}

impl<T> Submission<T> {
    /// Refused before the rate limit counted it.
    pub fn refused(rejection: Rejection) -> Self {
        Self {
            outcome: Err(rejection),
            rate: None,
        }
    }
}

/// A form body as it arrives, with the headers that describe it.
pub struct FormUpload<S> {
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    pub body: S,
}

impl<T> Submission<Reply<T>> {
    /// Answered with a first request's stored response: before the rate limit counted it.
    pub fn replayed(response: StoredResponse) -> Self {
        Self {
            outcome: Ok(Reply::Replayed(response)),
            rate: None,
        }
    }
}

/// Reads the form within `spec`'s bounds: 413 past the size, 400 for anything malformed.
pub async fn read_form<S: BodyStream>(
    spec: FormSpec,
    upload: FormUpload<S>,
) -> Result<Form, Rejection> {
    let form = async {
        spec.check_declared_length(upload.content_length)?;
        form::read_form(spec, upload.content_type.as_deref(), upload.body).await
    };
    form.await.map_err(|error| match error {
        FormError::FileTooLarge { .. } => Rejection::FileTooLarge(error.to_string()),
        other => Rejection::InvalidFile(other.to_string()),
    })
}

/// The file check: the spec's file field, named `*{extension}` (any case), with 1..=`max_file_bytes`
/// bytes (the upper bound was enforced while reading): `*.osr` up to `MAX_REPLAY_BYTES` here.
pub fn check_file(
    file: Option<UploadedFile>,
    spec: &FormSpec,
    extension: &str,
) -> Result<UploadedFile, Rejection> {
    let field = spec.file_field;
    let file = file
        .ok_or_else(|| Rejection::InvalidFile(format!("the form has no `{field}` file field")))?;
    if !file.file_name.to_ascii_lowercase().ends_with(extension) {
        return Err(Rejection::InvalidFile(format!(
            "the {field} file name must end in {extension}"
        )));
    }
    if file.bytes.is_empty() {
        return Err(Rejection::InvalidFile(format!("the {field} file is empty")));
    }
    debug_assert!(file.bytes.len() <= spec.max_file_bytes);
    Ok(file)
}

/// The rate limit: the endpoint's fixed window for this client. An outage refuses (503) unless
/// `RATE_LIMIT_FAIL_OPEN` lets requests through. Every rate-limited endpoint checks this way,
/// each under its own `endpoint` name.
pub async fn check_rate_limit(
    app: &App,
    endpoint: &'static str,
    limit: RateLimit,
    client: &ClientKey,
) -> Result<Option<RateDecision>, Rejection> {
    check_rate_limit_as(app, endpoint, limit, client, client.scope()).await
}

/// As `check_rate_limit`, for requests counted together under `counter` (a network's address
/// range, which is no client's scope): a refusal names `scope`.
pub async fn check_rate_limit_as(
    app: &App,
    endpoint: &'static str,
    limit: RateLimit,
    counter: &ClientKey,
    scope: LimitScope,
) -> Result<Option<RateDecision>, Rejection> {
    let hit = Hit {
        endpoint,
        client: counter,
        limit,
        now: epoch_secs(),
    };
    check_hit(app, hit, scope).await
}

/// `hit` counted: its decision, or the refusal (over the limit, or no limiter).
async fn check_hit(
    app: &App,
    hit: Hit<'_>,
    scope: LimitScope,
) -> Result<Option<RateDecision>, Rejection> {
    match app.limiter.hit(hit).await {
        Ok(rate) if rate.allowed => Ok(Some(rate)),
        Ok(rate) => Err(Rejection::RateLimited(rate, scope)),
        Err(error) if app.config.rate_limits.fail_open => {
            tracing::warn!(%error, "rate limiter unavailable; failing open");
            Ok(None)
        }
        Err(error) => {
            tracing::error!(%error, "rate limiter unavailable");
            Err(Rejection::LimiterUnavailable)
        }
    }
}

/// Whose requests a rate-limit window counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// The client's own: its address (an IPv6 /64), or its key.
    Client,
    /// Its address's, even with a key (a WebSocket connection carries none: keys go in frames).
    Address,
    /// An anonymous client's network's: all its clients together.
    Network,
    /// An anonymous client's wide network's: all its networks together.
    WideNetwork,
}

/// One window of an action limited at several scales: the limiter's endpoint name, its limit,
/// and whose requests it counts.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub endpoint: &'static str,
    pub limit: RateLimit,
    pub counted: Counted,
}

/// The rate limit of an action limited at several scales (DESIGN.md §3): its windows in order, the
/// client's first, each counted only for a request every window before it allowed, so one
/// address over its own limit does not spend its neighbours' quota, nor one network its wide
/// network's. A window of a scale the caller has none of (a key has no network) is skipped.
/// The answer reports the client's window; a refusal, the window that refused.
pub async fn check_rate_windows(
    app: &App,
    caller: &Caller,
    windows: &[Window],
) -> Result<Option<RateDecision>, Rejection> {
    count_rate_windows(app, caller, windows)
        .await
        .map(|spent| spent.rate)
}

/// What a request's windows counted (`count_rate_windows`): the client's decision, and each
/// hit counted, to give back when the request is then refused for the service's state.
#[derive(Debug)]
pub struct Spent {
    pub rate: Option<RateDecision>,
    hits: Vec<(&'static str, RateLimit, ClientKey, u64)>,
}

/// The window counting the hits a client was given back: as many per window as its limit, so
/// a client that hammers a full queue is limited again after twice its quota (the rate limit
/// still shields the database), while one that honours `Retry-After` never spends any.
pub const GIVEN_BACK_ENDPOINT: &str = "given_back";

impl Spent {
    /// Gives the counted hits back, each once its scale's `given_back` window allows it (best
    /// effort: a limiter that fails keeps the hit, as if the refusal had come before); the
    /// client's decision as it stands after.
    pub async fn give_back(self, app: &App) -> Option<RateDecision> {
        let mut client_back = false;
        for (i, (endpoint, limit, client, now)) in self.hits.iter().enumerate() {
            let allowance = Hit {
                endpoint: GIVEN_BACK_ENDPOINT,
                client,
                limit: *limit,
                now: *now,
            };
            match app.limiter.hit(allowance).await {
                Ok(decision) if decision.allowed => {}
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "the given-back window could not be read");
                    break;
                }
            }
            let hit = Hit {
                endpoint,
                client,
                limit: *limit,
                now: *now,
            };
            match app.limiter.give_back(hit).await {
                Ok(()) => client_back |= i == 0,
                Err(error) => tracing::warn!(%error, endpoint, "a hit could not be given back"),
            }
        }
        match client_back {
            true => self.rate.map(RateDecision::given_back),
            false => self.rate,
        }
    }
}

/// `check_rate_windows`, keeping what it counted (`Spent`).
pub async fn count_rate_windows(
    app: &App,
    caller: &Caller,
    windows: &[Window],
) -> Result<Spent, Rejection> {
    let mut spent = Spent {
        rate: None,
        hits: Vec::new(),
    };
    for window in windows {
        let (counter, scope) = match window.counted {
            Counted::Client => (Some(caller.client()), caller.client().scope()),
            Counted::Address => (Some(caller.address()), caller.address().scope()),
            Counted::Network => (caller.network(), LimitScope::Network),
            Counted::WideNetwork => (caller.wide_network(), LimitScope::WideNetwork),
        };
        let Some(counter) = counter else {
            continue;
        };
        let now = epoch_secs();
        let hit = Hit {
            endpoint: window.endpoint,
            client: counter,
            limit: window.limit,
            now,
        };
        let rate = check_hit(app, hit, scope).await?;
        if rate.is_some() {
            spent
                .hits
                .push((window.endpoint, window.limit, counter.clone(), now));
        }
        if matches!(window.counted, Counted::Client | Counted::Address) {
            spent.rate = rate;
        }
    }
    Ok(spent)
}

pub fn epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}
