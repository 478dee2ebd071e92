//! Answering requests: the deadline, the browsers' origin, and the links clients are shown.

use std::str::FromStr;
use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Http {
    /// Every request is answered within this (`REQUEST_DEADLINE_MS`; deadline.rs); on Lambda
    /// also before the invocation's own deadline, less a margin.
    pub request_deadline: Duration,
    /// The origin (`https://example.com`, or `*`) whose pages may call the API
    /// (`CORS_ALLOW_ORIGIN`): on Lambda they may read its answers (CORS; API Gateway answers the
    /// preflights), and everywhere only they may submit renders and uploads from a browser
    /// (routes/mod.rs `check_request_site`). `None`: no CORS headers, and no page submits.
    pub cors_allow_origin: Option<String>,
    /// Where clients reach this API (`PUBLIC_BASE_URL`, `https://render.example.com`): every
    /// link (`links.*`, `Location`, a page's `next`) is absolute under it, in answers, callbacks
    /// and live events. None: links are paths (the dev server sets its own address).
    pub public_base_url: Option<PublicBaseUrl>,
    /// The live events' WebSocket URL clients are shown (`links.events`; `EVENTS_URL`); none:
    /// not shown.
    pub events_url: Option<String>,
    /// Lifetime of the presigned artifact URLs `GET /v1/jobs/{id}` hands out
    /// (`ARTIFACT_URL_TTL`).
    pub artifact_url_ttl: Duration,
}

/// At most this part of a request's deadline is kept for settling a write whose answer was
/// lost (a third: the write itself still gets the rest).
const SETTLE_SHARE_OF_DEADLINE: u32 = 3;

impl Http {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let public_base_url = match env
            .get("PUBLIC_BASE_URL")
            .filter(|url| !url.trim().is_empty())
        {
            None => None,
            Some(url) => Some(
                url.parse()
                    .map_err(|reason: String| ConfigError::new("PUBLIC_BASE_URL", reason))?,
            ),
        };
        Ok(Self {
            request_deadline: env.millis("REQUEST_DEADLINE_MS", 10_000)?,
            cors_allow_origin: env.non_empty("CORS_ALLOW_ORIGIN"),
            public_base_url,
            events_url: env.non_empty("EVENTS_URL"),
            artifact_url_ttl: env.secs("ARTIFACT_URL_TTL", 900)?,
        })
    }

    /// `path` (`/v1/jobs/…`) as clients are shown it: absolute under `PUBLIC_BASE_URL`, or as
    /// it is without one.
    pub fn link(&self, path: &str) -> String {
        match &self.public_base_url {
            Some(base) if path.starts_with('/') => format!("{}{path}", base.as_str()),
            _ => path.to_owned(),
        }
    }

    /// What a write leaves of the request's deadline for settling its outcome if no answer
    /// comes: one `settle_call` (bounded as it is), at most a third of the deadline.
    pub fn settle_reserve(&self, settle_call: Duration) -> Duration {
        settle_call.min(self.request_deadline / SETTLE_SHARE_OF_DEADLINE)
    }
}

/// An `http(s)://host[:port][/prefix]` URL that links are made absolute under; no trailing
/// slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicBaseUrl(String);

impl FromStr for PublicBaseUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let url = text.trim().trim_end_matches('/');
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(|| format!("`{text}`: expected an http(s):// URL"))?;
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() || url.contains(['?', '#', ' ']) {
            return Err(format!(
                "`{text}`: expected a scheme, a host and at most a path"
            ));
        }
        Ok(Self(url.to_owned()))
    }
}

impl PublicBaseUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}
