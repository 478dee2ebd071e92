//! The shared secrets (the workers' webhook key, the edge's origin secret) and how often one
//! kept in Secrets Manager is read again.

use std::time::Duration;

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Secrets {
    /// The key render workers sign reports with (`WEBHOOK_SECRET`, or `WEBHOOK_SECRET_ARN` on
    /// AWS); `job-webhook` refuses to start without one.
    pub webhook: Option<SecretSource>,
    /// The value our edge (a Cloudflare Transform Rule) puts in `X-Origin-Secret`
    /// (`CF_ORIGIN_SECRET`, or `CF_ORIGIN_SECRET_ARN`). Set, every request must carry it, checked
    /// before anything else (http.rs); unset, no request is checked.
    pub origin: Option<SecretSource>,
    /// A secret read from Secrets Manager is read again, on a value that matches neither of its
    /// known ones, at most this often (`SECRET_REFRESH_INTERVAL`): a rotation is learned without
    /// a redeploy, and a flood of wrong values costs one read per interval.
    pub refresh_interval: Duration,
}

impl Secrets {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            webhook: SecretSource::read(env, "WEBHOOK_SECRET")?,
            origin: SecretSource::read(env, "CF_ORIGIN_SECRET")?,
            refresh_interval: env.secs("SECRET_REFRESH_INTERVAL", 30)?,
        })
    }
}

/// A shorter shared secret could be guessed (or brute-forced from one signed report).
pub const MIN_SECRET_BYTES: usize = 16;

/// Where a shared secret comes from: the environment (`{NAME}`, and `{NAME}_PREVIOUS` while a
/// rotation is under way), or a Secrets Manager secret (`{NAME}_ARN`) whose `AWSCURRENT` and
/// `AWSPREVIOUS` versions are both accepted, so rotating it needs no redeploy.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    Fixed {
        current: String,
        previous: Option<String>,
    },
    /// The secret's ARN (or name).
    Stored(String),
}

impl SecretSource {
    /// `None` when neither `{name}` nor `{name}_ARN` is set (empty counts as unset).
    fn read(env: &Env, name: &'static str) -> Result<Option<Self>, ConfigError> {
        let set = |suffix: &str| env.non_empty(&format!("{name}{suffix}"));
        let error = |reason: String| ConfigError::new(name, reason);
        let too_short = |value: &String| value.len() < MIN_SECRET_BYTES;
        match (set(""), set("_PREVIOUS"), set("_ARN")) {
            (None, None, None) => Ok(None),
            (None, None, Some(arn)) => Ok(Some(Self::Stored(arn))),
            (Some(_), _, Some(_)) | (None, Some(_), Some(_)) => Err(error(format!(
                "set either {name} (and {name}_PREVIOUS) or {name}_ARN, not both"
            ))),
            (None, Some(_), None) => Err(error(format!("{name}_PREVIOUS is set without {name}"))),
            (Some(current), previous, None) => {
                if too_short(&current) || previous.as_ref().is_some_and(too_short) {
                    return Err(error(format!("must be at least {MIN_SECRET_BYTES} bytes")));
                }
                Ok(Some(Self::Fixed { current, previous }))
            }
        }
    }
}

/// Never prints a value: the configuration may be logged.
impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fixed { previous, .. } => f
                .debug_struct("Fixed")
                .field("previous", &previous.is_some())
                .finish_non_exhaustive(),
            Self::Stored(arn) => f.debug_tuple("Stored").field(arn).finish(),
        }
    }
}
