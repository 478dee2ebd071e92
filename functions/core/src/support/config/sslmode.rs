//! The Postgres TLS mode: `DB_SSLMODE`, or the `sslmode` a `DATABASE_URL` carries.

use std::str::FromStr;

use super::ConfigError;

/// `DB_SSLMODE` (or `DATABASE_URL`'s `sslmode`), with libpq's meanings: `disable` sends
/// everything in the clear; `require` encrypts but accepts any server certificate (so not
/// proof against someone in the path); `verify-full` accepts only a certificate that chains to
/// a trusted root and names the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbSslMode {
    Disable,
    Require,
    VerifyFull,
}

impl FromStr for DbSslMode {
    type Err = &'static str;

    /// libpq's other modes are refused rather than mapped: `allow` and `prefer` would take
    /// plain text from anyone in the path who refuses TLS, and `verify-ca` checks less than
    /// `verify-full` but more than `require`, so either mapping would be a guess.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "disable" => Ok(Self::Disable),
            "require" => Ok(Self::Require),
            "verify-full" => Ok(Self::VerifyFull),
            "allow" | "prefer" => Err("falls back to plain text without saying so, so it is \
                                       not supported: use require or verify-full for TLS, \
                                       disable for plain text"),
            "verify-ca" => Err(
                "is not supported: use verify-full (the certificate must also \
                                name the host) or require",
            ),
            _ => Err("expected disable, require or verify-full"),
        }
    }
}

/// TLS to Postgres when neither `DB_SSLMODE` nor `DATABASE_URL` names a mode: verified, as
/// on AWS. The dev server and the tests choose `disable` for the local trust cluster.
pub const DEFAULT_DB_SSLMODE: DbSslMode = DbSslMode::VerifyFull;

/// The mode of `DB_SSLMODE` (`setting`) and `DATABASE_URL`'s `sslmode` values (`in_url`):
/// whichever is set, `default` when neither is, and an error naming both when they differ
/// (the weaker is never picked silently).
pub fn resolve_sslmode(
    setting: Option<&str>,
    in_url: &[String],
    default: DbSslMode,
) -> Result<DbSslMode, ConfigError> {
    let parse = |name: &'static str, raw: &str| {
        raw.trim().parse::<DbSslMode>().map_err(|e| ConfigError {
            name,
            reason: format!("`{raw}` {e}"),
        })
    };
    let url_mode = match in_url {
        [] => None,
        [first, rest @ ..] => {
            if rest.iter().any(|other| other != first) {
                return Err(ConfigError {
                    name: "DATABASE_URL",
                    reason: "names sslmode more than once, differently".into(),
                });
            }
            Some((first, parse("DATABASE_URL", first)?))
        }
    };
    match (setting, url_mode) {
        (None, None) => Ok(default),
        (None, Some((_, mode))) => Ok(mode),
        (Some(raw), None) => parse("DB_SSLMODE", raw),
        (Some(raw), Some((url_raw, url_mode))) => {
            let mode = parse("DB_SSLMODE", raw)?;
            if mode != url_mode {
                return Err(ConfigError {
                    name: "DB_SSLMODE",
                    reason: format!(
                        "`{raw}` differs from DATABASE_URL's sslmode `{url_raw}`: set one of \
                         them, or both alike"
                    ),
                });
            }
            Ok(mode)
        }
    }
}

/// `conninfo` (`DATABASE_URL`) without its `sslmode` settings, and their values. Both of
/// libpq's forms: a URL (`postgres://…?sslmode=require&…`) and `key=value` pairs. The rest is
/// for tokio-postgres, which knows neither `verify-full` nor our reading of the modes.
pub fn split_sslmode(conninfo: &str) -> (String, Vec<String>) {
    let is_url = ["postgres://", "postgresql://"]
        .iter()
        .any(|scheme| conninfo.starts_with(scheme));
    if is_url {
        let Some((base, query)) = conninfo.split_once('?') else {
            return (conninfo.to_owned(), Vec::new());
        };
        let (modes, kept): (Vec<&str>, Vec<&str>) = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .partition(|pair| pair.split('=').next() == Some("sslmode"));
        let modes = modes
            .iter()
            .map(|pair| pair.split_once('=').map_or("", |(_, v)| v).to_owned())
            .collect();
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (rest, modes);
    }
    split_key_value_sslmode(conninfo)
}

/// `key = value` pairs, a value possibly 'quoted' with `\` escapes (libpq's conninfo).
fn split_key_value_sslmode(conninfo: &str) -> (String, Vec<String>) {
    let chars: Vec<char> = conninfo.chars().collect();
    let (mut kept, mut modes) = (Vec::new(), Vec::new());
    let mut i = 0;
    let skip_space = |i: &mut usize| {
        while chars.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    loop {
        skip_space(&mut i);
        let start = i;
        if i >= chars.len() {
            break;
        }
        while chars
            .get(i)
            .is_some_and(|&c| c != '=' && !c.is_whitespace())
        {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect();
        skip_space(&mut i);
        if chars.get(i) != Some(&'=') {
            // Malformed: left whole for tokio-postgres to refuse with its own message.
            kept.push(chars[start..].iter().collect::<String>());
            break;
        }
        i += 1;
        skip_space(&mut i);
        let mut value = String::new();
        let quoted = chars.get(i) == Some(&'\'');
        if quoted {
            i += 1;
        }
        while let Some(&c) = chars.get(i) {
            if (quoted && c == '\'') || (!quoted && c.is_whitespace()) {
                break;
            }
            if c == '\\' {
                i += 1;
            }
            if let Some(&c) = chars.get(i) {
                value.push(c);
            }
            i += 1;
        }
        if quoted {
            i += 1;
        }
        let pair: String = chars[start..i.min(chars.len())].iter().collect();
        if key == "sslmode" {
            modes.push(value);
        } else {
            kept.push(pair);
        }
    }
    (kept.join(" "), modes)
}
