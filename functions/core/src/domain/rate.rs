//! Rate limits (`5/minute`) and what a fixed window decided for one request.

use std::str::FromStr;

/// A limit in SlowApi's syntax: `5/minute`, `5 per minute`, `10/5 minutes`, `100/day`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub requests: u32,
    pub period_secs: u64,
}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a rate limit like `5/minute`")]
pub struct InvalidRateLimit(String);

impl FromStr for RateLimit {
    type Err = InvalidRateLimit;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidRateLimit(text.to_owned());
        let (count, per) = text
            .split_once('/')
            .or_else(|| text.split_once(" per "))
            .ok_or_else(invalid)?;
        let requests: u32 = count.trim().parse().map_err(|_| invalid())?;
        let per = per.trim();
        let (multiplier, unit) = match per.split_once(char::is_whitespace) {
            Some((n, unit)) => (n.parse::<u64>().map_err(|_| invalid())?, unit.trim()),
            None => (1, per),
        };
        let unit_secs = match unit.trim_end_matches('s') {
            "second" => 1,
            "minute" => 60,
            "hour" => 3_600,
            "day" => 86_400,
            "month" => 30 * 86_400,
            "year" => 365 * 86_400,
            _ => return Err(invalid()),
        };
        if requests == 0 || multiplier == 0 {
            return Err(invalid());
        }
        Ok(Self {
            requests,
            period_secs: multiplier.checked_mul(unit_secs).ok_or_else(invalid)?,
        })
    }
}

/// The limit in the syntax it parses from, largest whole unit first: `60/minute`,
/// `10/5 minutes`, `7/90 seconds`.
impl std::fmt::Display for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let units = [
            (86_400, "day"),
            (3_600, "hour"),
            (60, "minute"),
            (1, "second"),
        ];
        let (secs, unit) = units
            .into_iter()
            .find(|(secs, _)| self.period_secs.is_multiple_of(*secs))
            .unwrap_or((1, "second"));
        match self.period_secs / secs {
            1 => write!(f, "{}/{unit}", self.requests),
            n => write!(f, "{}/{n} {unit}s", self.requests),
        }
    }
}

impl RateLimit {
    /// The fixed window that `now` (epoch seconds) falls in: `[start, end)`.
    pub fn window(&self, now: u64) -> (u64, u64) {
        let start = now - now % self.period_secs;
        (start, start + self.period_secs)
    }
}

/// Whose limit a 429 hit: the client's own (an address, or an IPv6 /64), its network's (an
/// anonymous client's IPv4 /24 or IPv6 /48, or the wide network around it, an IPv4 /16 or IPv6
/// /32), or its API key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitScope {
    Client,
    Network,
    /// A network's limit too, as a problem's `scope` names it; its detail says which.
    #[serde(rename = "network")]
    WideNetwork,
    Key,
}

impl LimitScope {
    /// As a refusal's detail says it: "at most 2 active jobs per client".
    pub fn noun(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Network => "network",
            Self::WideNetwork => "wide network",
            Self::Key => "API key",
        }
    }
}

/// The limiter's answer, with what the `X-RateLimit-*` headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateDecision {
    /// The endpoint counted: the policy's name in the `RateLimit*` headers.
    pub policy: &'static str,
    pub allowed: bool,
    pub limit: u32,
    /// The window's length, seconds.
    pub window: u64,
    pub remaining: u32,
    /// Epoch seconds at which the current window ends.
    pub reset: u64,
    /// Seconds until then, at least 1.
    pub retry_after: u64,
}

impl RateDecision {
    /// The decision once its hit was given back: one more request remains.
    pub fn given_back(self) -> Self {
        Self {
            remaining: self.remaining.saturating_add(1).min(self.limit),
            ..self
        }
    }

    pub fn new(policy: &'static str, limit: RateLimit, hits_after: Option<u64>, now: u64) -> Self {
        let (_, end) = limit.window(now);
        let limit_n = limit.requests;
        Self {
            policy,
            allowed: hits_after.is_some(),
            limit: limit_n,
            window: limit.period_secs,
            remaining: hits_after
                .map(|hits| u64::from(limit_n).saturating_sub(hits) as u32)
                .unwrap_or(0),
            reset: end,
            retry_after: end.saturating_sub(now).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slowapi_syntax() {
        let parse = |s: &str| s.parse::<RateLimit>().ok();
        let limit = |requests, period_secs| {
            Some(RateLimit {
                requests,
                period_secs,
            })
        };
        assert_eq!(parse("5/minute"), limit(5, 60));
        assert_eq!(parse("5 per minute"), limit(5, 60));
        assert_eq!(parse("2/minutes"), limit(2, 60));
        assert_eq!(parse("10/5 minutes"), limit(10, 300));
        assert_eq!(parse("100/day"), limit(100, 86_400));
        assert_eq!(parse(" 3 / second "), limit(3, 1));
        for bad in [
            "",
            "5",
            "x/minute",
            "5/fortnight",
            "0/minute",
            "5/0 minutes",
            "5/99999999999999999 years",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn displays_what_parses_back() {
        for (text, shown) in [
            ("60/minute", "60/minute"),
            ("10/5 minutes", "10/5 minutes"),
            ("7/90 seconds", "7/90 seconds"),
            ("100/day", "100/day"),
            ("1/year", "1/365 days"),
            ("3 per 2 hours", "3/2 hours"),
        ] {
            let limit: RateLimit = text.parse().unwrap();
            assert_eq!(limit.to_string(), shown);
            assert_eq!(shown.parse::<RateLimit>().unwrap(), limit);
        }
    }

    #[test]
    fn decisions_report_window_end() {
        let limit: RateLimit = "5/minute".parse().unwrap();
        let admitted = RateDecision::new("render", limit, Some(2), 1_000_030);
        assert_eq!(admitted.reset, 1_000_080);
        assert_eq!(admitted.retry_after, 50);
        assert_eq!(admitted.remaining, 3);
        assert_eq!((admitted.policy, admitted.window), ("render", 60));
        assert!(admitted.allowed);
        let refused = RateDecision::new("render", limit, None, 1_000_079);
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert_eq!(refused.retry_after, 1);
    }
}
