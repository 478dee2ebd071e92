//! The operator's policy over intake: whether new renders are paused, and who is
//! banned. Set with `osurender-admin` (usecases/policy/admin.rs), read by every instance
//! through its cache (usecases/policy/mod.rs), decided here.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use ipnet::IpNet;

use super::caller::Caller;
use super::client::carries_ipv4;
use super::key::KeyId;
use super::text;

/// The longest reason an operator may give (it is shown to clients in a problem's `detail`).
pub const MAX_REASON_CHARS: usize = 500;
/// The longest player name a ban may name (osu! names are at most 15; replays carry more).
pub const MAX_PLAYER_CHARS: usize = 64;

/// An operator's reason: 1 to `MAX_REASON_CHARS` characters, no control characters, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > MAX_REASON_CHARS {
            return Err(format!("a reason is 1 to {MAX_REASON_CHARS} characters"));
        }
        if text.chars().any(char::is_control) {
            return Err("a reason has no control characters".into());
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A banned player's name: as the operator typed it (trimmed), 1 to `MAX_PLAYER_CHARS`
/// characters, and its skeleton (text.rs), what a replay's player is compared by, so that no
/// case, invisible character or look-alike letter gets around the ban. Computed here, once per
/// policy read, not per request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlayerName {
    typed: String,
    skeleton: String,
}

impl PlayerName {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > MAX_PLAYER_CHARS {
            return Err(format!(
                "a player name is 1 to {MAX_PLAYER_CHARS} characters"
            ));
        }
        // A replay's player is stored without them (replay/info.rs): no ban could match one.
        if text.chars().any(char::is_control) {
            return Err("a player name has no control characters".into());
        }
        let skeleton = text::skeleton(text);
        // Such a ban would hold every replay whose player shows nothing.
        if skeleton.is_empty() {
            return Err("a player name has a visible character".into());
        }
        Ok(Self {
            typed: text.to_owned(),
            skeleton,
        })
    }

    /// The name as the operator typed it.
    pub fn as_str(&self) -> &str {
        &self.typed
    }
}

/// A range of client addresses: an address is its single-host range. Stored truncated to its
/// prefix (`203.0.113.7/24` is `203.0.113.0/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressRange(IpNet);

impl FromStr for AddressRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let net = IpNet::from_str(text)
            .or_else(|_| IpAddr::from_str(text).map(IpNet::from))
            .map(|net| net.trunc())
            .map_err(|_| format!("`{text}` is not an IP address or a CIDR range"))?;
        // Clients in these are counted as the IPv4 address they carry (domain/client.rs): a
        // ban on the IPv6 form would never match.
        if carries_ipv4(net) {
            return Err(format!(
                "`{text}` is an IPv6 form of IPv4 addresses (mapped, compatible, NAT64, 6to4 or \
                 Teredo): ban the IPv4 address or range it carries"
            ));
        }
        Ok(Self(net))
    }
}

impl AddressRange {
    /// Whether a client counted as `client` (an IPv4 address, or the IPv6 prefix clients are
    /// counted by, domain/client.rs) is in the range. The two overlap when either holds the
    /// other: a range narrower than the client's IPv6 prefix covers its whole prefix, since
    /// any address inside it is the same client (and free to take).
    pub fn covers(&self, client: IpNet) -> bool {
        self.0.contains(&client) || client.contains(&self.0)
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Who a ban is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BanTarget {
    /// Requests from these addresses, with or without a key.
    Address(AddressRange),
    /// Requests with this API key.
    Key(KeyId),
    /// Renders of this player's replays.
    Player(PlayerName),
}

impl BanTarget {
    /// The kind's name, as stored and as `bans list` shows it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Address(_) => "ip",
            Self::Key(_) => "key",
            Self::Player(_) => "player",
        }
    }

    /// The target as text (an address range, a key id, a name as typed).
    pub fn value(&self) -> String {
        match self {
            Self::Address(range) => range.to_string(),
            Self::Key(id) => id.to_string(),
            Self::Player(name) => name.as_str().to_owned(),
        }
    }

    /// The target of a stored `kind` and `value`.
    pub fn parse(kind: &str, value: &str) -> Result<Self, String> {
        match kind {
            "ip" => value.parse().map(Self::Address),
            "key" => value
                .parse()
                .map(Self::Key)
                .map_err(|_| format!("`{value}` is not a key id (a UUID)")),
            "player" => PlayerName::parse(value).map(Self::Player),
            other => Err(format!("`{other}` is not a kind of ban")),
        }
    }
}

/// A ban in the policy: who, why, until when (`None`: until removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ban {
    pub id: i64,
    pub target: BanTarget,
    pub reason: Option<Reason>,
    pub until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// The intake's pause, when it is paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    /// Only anonymous clients are paused; keyed ones are still admitted.
    pub anonymous_only: bool,
    pub reason: Option<Reason>,
    pub since: DateTime<Utc>,
}

/// The whole policy at one moment: the pause, if any, and the bans then in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub pause: Option<Pause>,
    pub bans: Vec<Ban>,
}

impl Policy {
    /// The ban of the caller's address or key in force at `now`, if any.
    pub fn caller_ban(&self, caller: &Caller, now: DateTime<Utc>) -> Option<&Ban> {
        let address = caller.address().as_net();
        self.in_force(now).find(|ban| match &ban.target {
            BanTarget::Address(range) => address.is_some_and(|net| range.covers(net)),
            BanTarget::Key(id) => !caller.is_anonymous() && id.client() == *caller.client(),
            BanTarget::Player(_) => false,
        })
    }

    /// The ban of the replay's player in force at `now`, if any: names compare by their
    /// skeletons (text.rs), the player's computed once here.
    pub fn player_ban(&self, player: &str, now: DateTime<Utc>) -> Option<&Ban> {
        let player = text::skeleton(player);
        self.in_force(now)
            .find(|ban| matches!(&ban.target, BanTarget::Player(name) if name.skeleton == player))
    }

    /// The pause that holds the caller back, if any: never a sandbox key's (its jobs hold no
    /// capacity), and with `anonymous_only` only an anonymous client's.
    pub fn pause_for(&self, caller: &Caller) -> Option<&Pause> {
        self.pause.as_ref().filter(|pause| {
            !caller.is_sandbox() && (caller.is_anonymous() || !pause.anonymous_only)
        })
    }

    /// A cached policy may hold bans that ended since it was read.
    fn in_force(&self, now: DateTime<Utc>) -> impl Iterator<Item = &Ban> {
        self.bans
            .iter()
            .filter(move |ban| ban.until.is_none_or(|until| until > now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_forms_of_ipv4_addresses_are_refused_as_ban_ranges() {
        for text in [
            "::ffff:203.0.113.7",
            "::ffff:203.0.113.0/120",
            "2002:cb00:7100::/40",
            "::203.0.113.7",
            "64:ff9b::203.0.113.0/120",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001::/32",
        ] {
            assert!(text.parse::<AddressRange>().is_err(), "{text}");
        }
        // The loopback and unspecified addresses are no IPv4 address's, nor is a range wider
        // than the forms.
        for text in ["::1", "::/128", "::/64", "2001::/31"] {
            assert!(text.parse::<AddressRange>().is_ok(), "{text}");
        }
        assert!("2001:db8::/48".parse::<AddressRange>().is_ok());
        assert!(
            "::/0".parse::<AddressRange>().is_ok(),
            "a wider range holds real IPv6 too"
        );
        assert!("203.0.113.0/24".parse::<AddressRange>().is_ok());
    }
    use crate::domain::client::ClientKey;
    use crate::domain::key::{KeyKind, KeyLimits};

    fn ban(target: BanTarget, until: Option<DateTime<Utc>>) -> Ban {
        Ban {
            id: 1,
            target,
            reason: None,
            until,
            created_at: Utc::now(),
        }
    }

    fn banning(target: &str) -> Policy {
        Policy {
            pause: None,
            bans: vec![ban(BanTarget::Address(target.parse().unwrap()), None)],
        }
    }

    #[test]
    fn address_bans_match_any_prefix_of_either_family() {
        let now = Utc::now();
        for (range, ip, banned) in [
            ("203.0.113.0/24", "203.0.113.200", true),
            ("203.0.113.0/24", "203.0.114.1", false),
            ("203.0.113.7", "203.0.113.7", true),
            ("203.0.113.7", "203.0.113.8", false),
            ("2001:db8:1::/48", "2001:db8:1:ffff::1", true),
            ("2001:db8:1::/48", "2001:db8:2::1", false),
            // Narrower than the /64 an IPv6 client is: its whole /64.
            ("2001:db8:1:2::5/128", "2001:db8:1:2::9", true),
            ("2001:db8:1:2::5/128", "2001:db8:1:3::5", false),
            // Every IPv6 form of an IPv4 address is the IPv4 client.
            ("203.0.113.0/24", "::ffff:203.0.113.9", true),
            ("203.0.113.9", "::203.0.113.9", true),
            ("203.0.113.9", "64:ff9b::203.0.113.9", true),
            ("203.0.113.9", "2002:cb00:7109:5::1", true),
            // Teredo: its last 32 bits are 203.0.113.9 inverted.
            ("203.0.113.9", "2001:0:4136:e378:8000:63bf:34ff:8ef6", true),
            ("203.0.113.9", "2001:0:4136:e378:8000:63bf:34ff:8ef7", false),
        ] {
            let policy = banning(range);
            assert_eq!(
                policy.caller_ban(&Caller::anonymous_at(ip), now).is_some(),
                banned,
                "{range} vs {ip}"
            );
        }
        assert_eq!(
            "203.0.113.7/24"
                .parse::<AddressRange>()
                .unwrap()
                .to_string(),
            "203.0.113.0/24"
        );
        assert!("203.0.113.0/33".parse::<AddressRange>().is_err());
    }

    #[test]
    fn key_bans_match_the_key_wherever_it_connects_from_and_expire() {
        let id = KeyId::new();
        let address = ClientKey::new("203.0.113.1".parse().unwrap(), 64);
        let keyed = Caller::keyed(id, KeyKind::Live, KeyLimits::default(), address);
        let now = Utc::now();
        let later = now + chrono::Duration::hours(1);
        let policy = Policy {
            pause: None,
            bans: vec![ban(BanTarget::Key(id), Some(later))],
        };
        assert!(policy.caller_ban(&keyed, now).is_some());
        assert!(policy
            .caller_ban(&Caller::anonymous_at("203.0.113.1"), now)
            .is_none());
        assert!(policy.caller_ban(&keyed, later).is_none(), "expired");
    }

    #[test]
    fn player_bans_match_names_that_read_alike_and_show_the_name_as_typed() {
        let name = PlayerName::parse("  Cookiezi ").unwrap();
        let target = BanTarget::Player(name);
        assert_eq!(target.value(), "Cookiezi", "as typed, trimmed");
        let policy = Policy {
            pause: None,
            bans: vec![ban(target, None)],
        };
        let now = Utc::now();
        for alike in [
            "COOKIEZI",
            "Cookiezi\u{200b}",
            "\u{feff}Cookiezi",
            "C\u{200d}o\u{200c}okiezi",
            "\u{421}ookiezi",
        ] {
            assert!(policy.player_ban(alike, now).is_some(), "{alike:?}");
        }
        for other in ["cookiez", "WhiteCat"] {
            assert!(policy.player_ban(other, now).is_none(), "{other:?}");
        }
        assert!(PlayerName::parse("  ").is_err());
        assert!(
            PlayerName::parse("\u{200b}\u{feff}").is_err(),
            "nothing visible"
        );
        assert!(Reason::parse("bad\u{7}bell").is_err());
    }

    #[test]
    fn a_pause_spares_sandbox_keys_and_with_anonymous_only_every_key() {
        let address = ClientKey::new("203.0.113.1".parse().unwrap(), 64);
        let keyed = |kind| Caller::keyed(KeyId::new(), kind, KeyLimits::default(), address.clone());
        let paused = |anonymous_only| Policy {
            pause: Some(Pause {
                anonymous_only,
                reason: None,
                since: Utc::now(),
            }),
            bans: vec![],
        };
        let all = paused(false);
        assert!(all
            .pause_for(&Caller::anonymous_at("203.0.113.1"))
            .is_some());
        assert!(all.pause_for(&keyed(KeyKind::Live)).is_some());
        assert!(all.pause_for(&keyed(KeyKind::Sandbox)).is_none());
        let some = paused(true);
        assert!(some
            .pause_for(&Caller::anonymous_at("203.0.113.1"))
            .is_some());
        assert!(some.pause_for(&keyed(KeyKind::Live)).is_none());
        assert!(Policy::default()
            .pause_for(&Caller::anonymous_at("203.0.113.1"))
            .is_none());
    }
}
