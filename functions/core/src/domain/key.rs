//! API keys: the secret a client sends as `Authorization: Bearer <key>`, what is
//! stored of it (its SHA-256, never the key), and what a key is allowed.
//!
//! A key is `osr_live_` (or `osr_test_` for a sandbox key) and 43 base62 characters drawn from
//! the operating system's CSPRNG: 43 × log2(62) ≈ 256 bits, so a key cannot be guessed and its
//! unsalted SHA-256 is as good as a slow hash (there is no dictionary to try). The prefix lets a
//! secret scanner recognize a leaked key and a reader tell a sandbox key at a glance.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::client::{advisory_lock_id, ClientKey, KEY_CLIENT_PREFIX};
use super::entitlement::Entitlements;
use super::farm::Weight;
use super::rate::RateLimit;

const LIVE_PREFIX: &str = "osr_live_";
const SANDBOX_PREFIX: &str = "osr_test_";
const SIGNING_SECRET_PREFIX: &str = "whsec_";
/// Random characters after the prefix: 43 base62 characters carry 256 bits.
pub const SECRET_BODY_LEN: usize = 43;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Live keys render; sandbox keys (`osr_test_`) are for integration testing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyKind {
    Live,
    Sandbox,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Sandbox => "sandbox",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "live" => Some(Self::Live),
            "sandbox" => Some(Self::Sandbox),
            _ => None,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Self::Live => LIVE_PREFIX,
            Self::Sandbox => SANDBOX_PREFIX,
        }
    }
}

/// Not a key: the wrong prefix, length or alphabet. Says nothing about the text itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an API key (expected `osr_live_` or `osr_test_` and 43 letters or digits)")]
pub struct MalformedKey;

/// The operating system's random source failed: no secret can be made.
#[derive(Debug, thiserror::Error)]
#[error("the system's random source failed: {0}")]
pub struct RandomUnavailable(String);

/// An API key: the secret itself. Never stored, never logged: `Debug` shows only its kind.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    kind: KeyKind,
    text: String,
}

impl ApiKey {
    /// A fresh key of `kind` from the CSPRNG.
    pub fn generate(kind: KeyKind) -> Result<Self, RandomUnavailable> {
        Ok(Self {
            kind,
            text: format!("{}{}", kind.prefix(), random_base62()?),
        })
    }

    /// A key as a client sent it: exactly a prefix and 43 base62 characters.
    pub fn parse(text: &str) -> Result<Self, MalformedKey> {
        let (kind, body) = if let Some(body) = text.strip_prefix(LIVE_PREFIX) {
            (KeyKind::Live, body)
        } else if let Some(body) = text.strip_prefix(SANDBOX_PREFIX) {
            (KeyKind::Sandbox, body)
        } else {
            return Err(MalformedKey);
        };
        if body.len() != SECRET_BODY_LEN || !body.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(MalformedKey);
        }
        Ok(Self {
            kind,
            text: text.to_owned(),
        })
    }

    /// The key of an `Authorization` header's value: `Bearer <key>` (the scheme in any case,
    /// RFC 9110 §11.1).
    pub fn from_bearer(authorization: &str) -> Result<Self, MalformedKey> {
        let (scheme, token) = authorization.split_once(' ').ok_or(MalformedKey)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(MalformedKey);
        }
        Self::parse(token.trim_matches(' '))
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// What is stored and looked up: SHA-256 of the whole key, prefix included.
    pub fn hash(&self) -> KeyHash {
        KeyHash(Sha256::digest(self.text.as_bytes()).into())
    }

    /// The secret, to show the client once at creation.
    pub fn expose(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}, redacted)", self.kind.as_str())
    }
}

/// SHA-256 of a key: what the `api_keys` table holds and is searched by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash([u8; 32]);

impl KeyHash {
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The shared secret a key's callbacks are signed with (HMAC). Stored, since the service signs
/// with it; shown to the client once, at creation. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret(String);

impl SigningSecret {
    pub fn generate() -> Result<Self, RandomUnavailable> {
        Ok(Self(format!("{SIGNING_SECRET_PREFIX}{}", random_base62()?)))
    }

    /// A stored secret, as it was generated.
    pub fn parse(text: &str) -> Option<Self> {
        let body = text.strip_prefix(SIGNING_SECRET_PREFIX)?;
        (body.len() == SECRET_BODY_LEN && body.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| Self(text.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(redacted)")
    }
}

/// A key's id: public (listed, logged, named on revocation), unlike the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct KeyId(pub Uuid);

impl KeyId {
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The id's name as a client: `key:` and the id's hyphenated lowercase form
    /// (`key:5f0c…-…`). It stands where an IP client's address stands (the jobs' `client_ip`,
    /// idempotency scope); it cannot be taken for an address, which never contains `k`.
    pub fn client_name(&self) -> String {
        format!("{KEY_CLIENT_PREFIX}{}", self.0.hyphenated())
    }

    /// The key's client: its name, so that its limits, idempotency scope, duplicates and jobs
    /// are the key's wherever it connects from.
    pub fn client(&self) -> ClientKey {
        ClientKey::named(self.client_name())
    }

    /// The per-client advisory lock id of the key's client, by the formula every client's lock
    /// uses (`advisory_lock_id`): the first 8 bytes of SHA-256(`key:<id>`), little-endian,
    /// signed. In Python: `int.from_bytes(sha256(f"key:{id}".encode()).digest()[:8], "little",
    /// signed=True)`.
    pub fn lock_id(&self) -> i64 {
        advisory_lock_id(&self.client_name())
    }
}

impl Default for KeyId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for KeyId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::try_parse(text).map(Self)
    }
}

/// What a key's owner calls it: 1 to 100 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyName(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a key's name is 1 to 100 characters without control characters")]
pub struct InvalidKeyName;

impl KeyName {
    pub const MAX_CHARS: usize = 100;

    pub fn parse(name: &str) -> Result<Self, InvalidKeyName> {
        let chars = name.chars().count();
        if chars == 0 || chars > Self::MAX_CHARS || name.chars().any(char::is_control) {
            return Err(InvalidKeyName);
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a key may do: its render rate limit, how many jobs it may have active at once, what
/// its renders may ask for, how long a replay it may have rendered, and its share of the
/// render farm's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLimits {
    pub render: RateLimit,
    pub max_active: u32,
    pub entitlements: Entitlements,
    /// Seconds of play at most; `None`: the service's `MAX_REPLAY_LENGTH`.
    pub max_replay_length: Option<u32>,
    /// Its share of the render farm's time relative to other clients' (an anonymous network
    /// has `ANONYMOUS_WEIGHT`).
    pub weight: Weight,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKeyLimits {
    #[error("the render limit may allow at most 1000000 renders in at most a year")]
    Render,
    #[error("max_active must be 1 to 10000")]
    MaxActive,
    #[error("max_replay_length must be 1 to 86400 seconds")]
    MaxReplayLength,
    #[error("weight must be 1 to 1000")]
    Weight,
}

impl KeyLimits {
    const MAX_RENDERS: u32 = 1_000_000;
    const MAX_PERIOD_SECS: u64 = 365 * 86_400;
    const MAX_ACTIVE: u32 = 10_000;
    const MAX_REPLAY_LENGTH_SECS: u32 = 86_400;

    /// Limits within what the store and the limiter hold: fits an `integer`, a window of at
    /// most a year, at least one active job. Everything is entitled, the replay length is the
    /// service's, the weight 1 (`with_entitlements`, `with_max_replay_length`, `with_weight`
    /// change them).
    pub fn new(render: RateLimit, max_active: u32) -> Result<Self, InvalidKeyLimits> {
        if render.requests > Self::MAX_RENDERS || render.period_secs > Self::MAX_PERIOD_SECS {
            return Err(InvalidKeyLimits::Render);
        }
        Ok(Self {
            render,
            max_active: Self::checked_max_active(max_active)?,
            entitlements: Entitlements::default(),
            max_replay_length: None,
            weight: Weight::ONE,
        })
    }

    fn checked_max_active(max_active: u32) -> Result<u32, InvalidKeyLimits> {
        match (1..=Self::MAX_ACTIVE).contains(&max_active) {
            true => Ok(max_active),
            false => Err(InvalidKeyLimits::MaxActive),
        }
    }

    /// `Weight`'s bounds, as the `api_keys.weight` check holds them.
    fn checked_weight(weight: u32) -> Result<Weight, InvalidKeyLimits> {
        Weight::new(weight).map_err(|_| InvalidKeyLimits::Weight)
    }

    pub fn with_entitlements(self, entitlements: Entitlements) -> Self {
        Self {
            entitlements,
            ..self
        }
    }

    /// At most a day of play: far past any map, within an `integer`.
    pub fn with_max_replay_length(self, secs: Option<u32>) -> Result<Self, InvalidKeyLimits> {
        if secs.is_some_and(|secs| !(1..=Self::MAX_REPLAY_LENGTH_SECS).contains(&secs)) {
            return Err(InvalidKeyLimits::MaxReplayLength);
        }
        Ok(Self {
            max_replay_length: secs,
            ..self
        })
    }

    pub fn with_weight(self, weight: u32) -> Result<Self, InvalidKeyLimits> {
        Ok(Self {
            weight: Self::checked_weight(weight)?,
            ..self
        })
    }
}

/// New values for a stored key's limits, each within `KeyLimits`' bounds; `None` keeps the
/// stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitsChange {
    weight: Option<Weight>,
    max_active: Option<u32>,
}

impl LimitsChange {
    pub fn new(weight: Option<u32>, max_active: Option<u32>) -> Result<Self, InvalidKeyLimits> {
        Ok(Self {
            weight: weight.map(KeyLimits::checked_weight).transpose()?,
            max_active: max_active.map(KeyLimits::checked_max_active).transpose()?,
        })
    }

    pub fn weight(self) -> Option<Weight> {
        self.weight
    }

    pub fn max_active(self) -> Option<u32> {
        self.max_active
    }

    /// `limits` with this change made.
    pub fn apply(self, limits: KeyLimits) -> KeyLimits {
        KeyLimits {
            weight: self.weight.unwrap_or(limits.weight),
            max_active: self.max_active.unwrap_or(limits.max_active),
            ..limits
        }
    }
}

impl Default for KeyLimits {
    /// What `keys create` gives a key it names no limits for: 60 renders a minute, 20 active.
    fn default() -> Self {
        Self {
            render: RateLimit {
                requests: 60,
                period_secs: 60,
            },
            max_active: 20,
            entitlements: Entitlements::default(),
            max_replay_length: None,
            weight: Weight::ONE,
        }
    }
}

/// 43 base62 characters from the CSPRNG, each unbiased (bytes ≥ 248 = 4 × 62 are redrawn).
fn random_base62() -> Result<String, RandomUnavailable> {
    let mut out = String::with_capacity(SECRET_BODY_LEN);
    let mut pool = [0u8; 64];
    while out.len() < SECRET_BODY_LEN {
        getrandom::fill(&mut pool).map_err(|e| RandomUnavailable(e.to_string()))?;
        for byte in pool.iter().copied().filter(|&b| b < 248) {
            if out.len() == SECRET_BODY_LEN {
                break;
            }
            out.push(char::from(BASE62[usize::from(byte % 62)]));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_with_their_kind() {
        for kind in [KeyKind::Live, KeyKind::Sandbox] {
            let key = ApiKey::generate(kind).unwrap();
            assert_eq!(key.expose().len(), 9 + SECRET_BODY_LEN);
            assert!(key.expose().starts_with(kind.prefix()));
            let parsed = ApiKey::parse(key.expose()).unwrap();
            assert_eq!(parsed, key);
            assert_eq!(parsed.kind(), kind);
            assert_eq!(parsed.hash(), key.hash());
        }
        assert_ne!(
            ApiKey::generate(KeyKind::Live).unwrap(),
            ApiKey::generate(KeyKind::Live).unwrap()
        );
    }

    #[test]
    fn malformed_keys_are_refused() {
        let body = "a".repeat(SECRET_BODY_LEN);
        assert!(ApiKey::parse(&format!("osr_live_{body}")).is_ok());
        for bad in [
            String::new(),
            body.clone(),
            format!("osr_prod_{body}"),
            format!("OSR_LIVE_{body}"),
            format!("osr_live_{}", &body[1..]),
            format!("osr_live_{body}a"),
            format!("osr_live_{}-", &body[1..]),
            format!("osr_live_{}é", &body[2..]),
            format!(" osr_live_{body}"),
        ] {
            assert_eq!(ApiKey::parse(&bad), Err(MalformedKey), "{bad:?}");
        }
    }

    #[test]
    fn bearer_header_carries_the_key() {
        let key = ApiKey::generate(KeyKind::Sandbox).unwrap();
        for header in [
            format!("Bearer {}", key.expose()),
            format!("bearer {}", key.expose()),
            format!("BEARER  {}", key.expose()),
        ] {
            assert_eq!(ApiKey::from_bearer(&header), Ok(key.clone()), "{header}");
        }
        for header in [
            key.expose().to_owned(),
            format!("Basic {}", key.expose()),
            format!("Bearer{}", key.expose()),
            "Bearer ".to_owned(),
            format!("Bearer {} x", key.expose()),
        ] {
            assert_eq!(ApiKey::from_bearer(&header), Err(MalformedKey), "{header}");
        }
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let key = ApiKey::generate(KeyKind::Live).unwrap();
        let secret = SigningSecret::generate().unwrap();
        let shown = format!("{key:?} {secret:?}");
        assert!(!shown.contains(&key.expose()[9..]), "{shown}");
        assert!(!shown.contains(&secret.expose()[6..]), "{shown}");
        assert_eq!(shown, "ApiKey(live, redacted) SigningSecret(redacted)");
    }

    #[test]
    fn the_hash_is_sha256_of_the_whole_key() {
        let key = ApiKey::parse(&format!("osr_test_{}", "0".repeat(SECRET_BODY_LEN))).unwrap();
        // python3 -c 'import hashlib;print(hashlib.sha256(b"osr_test_"+b"0"*43).hexdigest())'
        let expected = "82cd769d23f8d8666040bb876cc678f8cb90795d729388107ec869ebd8068bb2";
        assert_eq!(hex::encode(key.hash().as_bytes()), expected);
        let bytes = *key.hash().as_bytes();
        assert_eq!(KeyHash::from_bytes(&bytes), Some(key.hash()));
        assert_eq!(KeyHash::from_bytes(&bytes[1..]), None);
    }

    #[test]
    fn signing_secrets_round_trip() {
        let secret = SigningSecret::generate().unwrap();
        assert!(secret.expose().starts_with("whsec_"));
        assert_eq!(SigningSecret::parse(secret.expose()), Some(secret));
        assert_eq!(SigningSecret::parse("whsec_short"), None);
    }

    #[test]
    fn a_key_clients_lock_id_follows_the_documented_formula() {
        let id: KeyId = "5f0c9a4e-1b2d-4c3e-8f70-0123456789ab".parse().unwrap();
        assert_eq!(id.client_name(), "key:5f0c9a4e-1b2d-4c3e-8f70-0123456789ab");
        // python3 -c 'import hashlib;print(int.from_bytes(hashlib.sha256(
        //   b"key:5f0c9a4e-1b2d-4c3e-8f70-0123456789ab").digest()[:8],"little",signed=True))'
        assert_eq!(id.lock_id(), PY_LOCK_ID_KEY);
        let upper: KeyId = "5F0C9A4E-1B2D-4C3E-8F70-0123456789AB".parse().unwrap();
        assert_eq!(upper.lock_id(), id.lock_id(), "one id, one lock");
    }

    const PY_LOCK_ID_KEY: i64 = 689424220725896077;

    #[test]
    fn limits_are_bounded() {
        let limit = |text: &str| text.parse::<RateLimit>().unwrap();
        assert_eq!(
            KeyLimits::new(limit("60/minute"), 20),
            Ok(KeyLimits::default())
        );
        assert!(KeyLimits::new(limit("1000000/year"), 10_000).is_ok());
        assert_eq!(
            KeyLimits::new(limit("1000001/day"), 1),
            Err(InvalidKeyLimits::Render)
        );
        assert_eq!(
            KeyLimits::new(limit("1/2 years"), 1),
            Err(InvalidKeyLimits::Render)
        );
        for max_active in [0, 10_001] {
            assert_eq!(
                KeyLimits::new(limit("1/day"), max_active),
                Err(InvalidKeyLimits::MaxActive)
            );
        }
        let limits = KeyLimits::default();
        for secs in [None, Some(1), Some(86_400)] {
            let with = limits.with_max_replay_length(secs).unwrap();
            assert_eq!(with.max_replay_length, secs);
        }
        for secs in [0, 86_401] {
            assert_eq!(
                limits.with_max_replay_length(Some(secs)),
                Err(InvalidKeyLimits::MaxReplayLength)
            );
        }
        assert_eq!(limits.weight.get(), 1, "the default weight");
        for weight in [1, 7, 1_000] {
            assert_eq!(limits.with_weight(weight).unwrap().weight.get(), weight);
        }
        for weight in [0, 1_001] {
            assert_eq!(limits.with_weight(weight), Err(InvalidKeyLimits::Weight));
        }
    }

    #[test]
    fn a_limits_change_replaces_only_what_it_names() {
        let limits = KeyLimits::default().with_weight(5).unwrap();
        let weight = LimitsChange::new(Some(40), None).unwrap();
        assert_eq!(
            weight.apply(limits),
            KeyLimits {
                weight: Weight::new(40).unwrap(),
                ..limits
            }
        );
        let both = LimitsChange::new(Some(1), Some(3)).unwrap();
        let changed = both.apply(limits);
        assert_eq!((changed.weight.get(), changed.max_active), (1, 3));
        assert_eq!(changed.render, limits.render);
        assert_eq!(LimitsChange::new(None, None).unwrap().apply(limits), limits);
        assert_eq!(
            LimitsChange::new(Some(1_001), Some(3)),
            Err(InvalidKeyLimits::Weight)
        );
        assert_eq!(
            LimitsChange::new(Some(2), Some(0)),
            Err(InvalidKeyLimits::MaxActive)
        );
    }

    #[test]
    fn names_are_bounded_and_printable() {
        assert!(KeyName::parse("CI runner — staging").is_ok());
        assert!(KeyName::parse(&"é".repeat(100)).is_ok());
        for bad in ["", "a\nb", "tab\there", &"x".repeat(101)] {
            assert_eq!(KeyName::parse(bad), Err(InvalidKeyName), "{bad:?}");
        }
    }
}
