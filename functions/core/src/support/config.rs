//! Configuration from the environment, in groups by meaning. Each group's variables, defaults
//! and checks are in its file under `config/`; docs/API.md's configuration table lists the
//! variables under the same groups (tests/config_docs.rs ties the two).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::time::Duration;

mod aws;
mod caches;
mod callbacks;
mod capacity;
mod clients;
mod database;
mod dev_server;
mod http;
mod lifecycle;
mod rate_limits;
mod renders;
mod secrets;
mod skins;
mod sslmode;

pub use aws::Aws;
pub use caches::{Caches, MAX_KEY_CACHE_TTL, MAX_POLICY_CACHE_TTL};
pub use callbacks::{Callbacks, MAX_CALLBACK_TIMEOUT};
pub use capacity::Capacity;
pub use clients::ClientNetworks;
pub use database::Database;
pub use dev_server::DevServer;
pub use http::{Http, PublicBaseUrl};
pub use lifecycle::{Lifecycle, MIN_JOB_RETENTION};
pub use rate_limits::RateLimits;
pub use renders::{RenderModes, Renders};
pub use secrets::{SecretSource, Secrets, MIN_SECRET_BYTES};
pub use skins::Skins;
pub use sslmode::{resolve_sslmode, split_sslmode, DbSslMode, DEFAULT_DB_SSLMODE};

/// Every setting, by group. A group's field name is its subheading in docs/API.md's table.
#[derive(Debug, Clone)]
pub struct Config {
    /// Postgres: the connection, its pool and bounds, the migrations' bounds.
    pub database: Database,
    /// AWS: the bound on every call, the endpoint, and the buckets, tables and queues.
    pub aws: Aws,
    /// Answering requests: the deadline, the browsers' origin, the links clients are shown.
    pub http: Http,
    /// The farm and admission's caps.
    pub capacity: Capacity,
    /// What a render may ask for.
    pub renders: Renders,
    /// Who a client is: the proxies believed, and the prefixes of its address and networks.
    pub clients: ClientNetworks,
    pub rate_limits: RateLimits,
    pub callbacks: Callbacks,
    pub secrets: Secrets,
    /// How long an instance keeps what it read.
    pub caches: Caches,
    /// How long jobs wait, run and are kept, and how often a delivery is tried.
    pub lifecycle: Lifecycle,
    pub skins: Skins,
    /// The dev server's own settings.
    pub dev_server: DevServer,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{name}: {reason}")]
pub struct ConfigError {
    name: &'static str,
    reason: String,
}

impl ConfigError {
    fn new(name: &'static str, reason: impl Into<String>) -> Self {
        Self {
            name,
            reason: reason.into(),
        }
    }
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As `from_env`, with `sslmode` as the TLS mode when neither `DB_SSLMODE` nor
    /// `DATABASE_URL` names one (the dev server's `disable`).
    pub fn from_env_with_sslmode(sslmode: DbSslMode) -> Result<Self, ConfigError> {
        Self::from_lookup_with_sslmode(|name| std::env::var(name).ok(), sslmode)
    }

    /// Reads every setting through `lookup`, so tests can configure without touching the
    /// process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::from_lookup_with_sslmode(lookup, DEFAULT_DB_SSLMODE)
    }

    /// As `from_lookup`, with `default_sslmode` when nothing names a TLS mode.
    pub fn from_lookup_with_sslmode(
        lookup: impl Fn(&str) -> Option<String>,
        default_sslmode: DbSslMode,
    ) -> Result<Self, ConfigError> {
        Self::read(&Env::new(&lookup), default_sslmode)
    }

    /// The variables each group reads, by the group's field name.
    pub fn variables_by_group() -> BTreeMap<&'static str, BTreeSet<String>> {
        let unset = |_: &str| None;
        let env = Env::noting(&unset);
        Self::read(&env, DEFAULT_DB_SSLMODE).expect("the defaults are valid");
        env.noted.map(RefCell::into_inner).unwrap_or_default()
    }

    fn read(env: &Env, default_sslmode: DbSslMode) -> Result<Self, ConfigError> {
        Ok(Self {
            database: env.group("database", |env| Database::read(env, default_sslmode))?,
            aws: env.group("aws", Aws::read)?,
            http: env.group("http", Http::read)?,
            capacity: env.group("capacity", Capacity::read)?,
            renders: env.group("renders", Renders::read)?,
            clients: env.group("clients", ClientNetworks::read)?,
            rate_limits: env.group("rate_limits", RateLimits::read)?,
            callbacks: env.group("callbacks", Callbacks::read)?,
            secrets: env.group("secrets", Secrets::read)?,
            caches: env.group("caches", Caches::read)?,
            lifecycle: env.group("lifecycle", Lifecycle::read)?,
            skins: env.group("skins", Skins::read)?,
            dev_server: env.group("dev_server", DevServer::read)?,
        })
    }

    /// How long a publisher owns an event it took: longer than its slowest SQS call (each
    /// bounded by `AWS_TIMEOUT_MS`) plus the statement that marks it, so a live publisher never
    /// loses an event to a second one.
    pub fn event_lease(&self) -> Duration {
        (3 * self.aws.timeout.max(self.database.timeout)).max(MIN_LEASE)
    }

    /// How long a dispatcher owns a callback it took: as `event_lease`, for a send bounded by
    /// `CALLBACK_TIMEOUT_MS` (its lookup included).
    pub fn callback_lease(&self) -> Duration {
        (3 * self.callbacks.timeout.max(self.database.timeout)).max(MIN_LEASE)
    }
}

/// Shortest outbox lease: ample for one concurrent round of SQS calls and the marking statement.
pub const MIN_LEASE: Duration = Duration::from_secs(30);

/// A duration in seconds, or with a unit: `900`, `90s`, `15m`, `6h`, `1d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(u64);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (digits, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let scale = match unit.trim() {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err("expected seconds, or a number with s, m, h or d".into()),
        };
        digits
            .parse::<u64>()
            .map(|n| Seconds(n * scale))
            .map_err(|e| e.to_string())
    }
}

impl From<Seconds> for Duration {
    fn from(secs: Seconds) -> Self {
        Duration::from_secs(secs.0)
    }
}

/// A switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flag(bool);

impl FromStr for Flag {
    type Err = &'static str;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Flag(true)),
            "0" | "false" | "no" | "off" => Ok(Flag(false)),
            _ => Err("expected 1/0, true/false, yes/no or on/off"),
        }
    }
}

/// An error naming `name` with `reason` unless `ok`.
fn ensure(ok: bool, name: &'static str, reason: &str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(name, reason))
    }
}

/// The variables, read through a lookup.
struct Env<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
    group: Cell<&'static str>,
    /// Which group reads each variable, when asked (`variables_by_group`); a function's
    /// configuration notes nothing.
    noted: Option<RefCell<BTreeMap<&'static str, BTreeSet<String>>>>,
}

impl<'a> Env<'a> {
    fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            lookup,
            group: Cell::new(""),
            noted: None,
        }
    }

    /// As `new`, noting which group reads each variable.
    fn noting(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            noted: Some(RefCell::default()),
            ..Self::new(lookup)
        }
    }

    /// Reads one group: the variables `read` reads are noted as the group `name`'s.
    fn group<T>(
        &self,
        name: &'static str,
        read: impl FnOnce(&Self) -> Result<T, ConfigError>,
    ) -> Result<T, ConfigError> {
        self.group.set(name);
        read(self)
    }

    /// The variable as set, empty or not.
    fn get(&self, name: &str) -> Option<String> {
        if let Some(noted) = &self.noted {
            let group = self.group.get();
            let mut noted = noted.borrow_mut();
            noted.entry(group).or_default().insert(name.to_owned());
        }
        (self.lookup)(name)
    }

    /// The variable, empty counting as unset.
    fn non_empty(&self, name: &str) -> Option<String> {
        self.get(name).filter(|value| !value.is_empty())
    }

    fn string(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or_else(|| default.to_owned())
    }

    fn parse<T>(&self, name: &'static str, default: T) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .trim()
                .parse()
                .map_err(|e: T::Err| ConfigError::new(name, format!("`{raw}`: {e}"))),
        }
    }

    /// As `parse`, and an error with `reason` unless `ok` holds of the value.
    fn parse_where<T>(
        &self,
        name: &'static str,
        default: T,
        ok: impl FnOnce(&T) -> bool,
        reason: &str,
    ) -> Result<T, ConfigError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        let value = self.parse(name, default)?;
        ensure(ok(&value), name, reason)?;
        Ok(value)
    }

    /// As `secs`, and an error with `reason` unless `ok` holds of the value.
    fn secs_where(
        &self,
        name: &'static str,
        default: u64,
        ok: impl FnOnce(&Duration) -> bool,
        reason: &str,
    ) -> Result<Duration, ConfigError> {
        let value = self.secs(name, default)?;
        ensure(ok(&value), name, reason)?;
        Ok(value)
    }

    /// A duration (`Seconds`), `default` seconds when unset.
    fn secs(&self, name: &'static str, default: u64) -> Result<Duration, ConfigError> {
        Ok(self.parse(name, Seconds(default))?.into())
    }

    /// A duration in milliseconds, `default` when unset.
    fn millis(&self, name: &'static str, default: u64) -> Result<Duration, ConfigError> {
        Ok(Duration::from_millis(self.parse(name, default)?))
    }

    /// A switch (`Flag`), `default` when unset.
    fn flag(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        Ok(self.parse(name, Flag(default))?.0)
    }
}

#[cfg(test)]
mod tests;
