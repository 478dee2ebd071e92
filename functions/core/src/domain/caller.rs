//! Who a request is from: the client its limits are counted by (an address, or an API key
//! wherever it connects from), and the address it came from.

use super::client::ClientKey;
use super::entitlement::Entitlements;
use super::farm::Weight;
use super::key::{KeyId, KeyKind, KeyLimits};
use super::rate::RateLimit;

/// Who a request is from, resolved at the edge: the address it came from (recorded, and what
/// an anonymous client is) and its identity, which decides the client its limits and scopes are
/// counted by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    address: ClientKey,
    identity: Identity,
}

/// Anonymous, or an API key's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    /// Counted by its address, and by its network and the wider block around it (DESIGN.md §3).
    Anonymous {
        network: ClientKey,
        wide_network: ClientKey,
    },
    /// Counted by its key wherever it connects from, under the key's limits.
    Keyed {
        client: ClientKey,
        kind: KeyKind,
        limits: KeyLimits,
    },
}

impl Caller {
    /// A client without a key: counted by its address, under the configured limits, and by
    /// its network and wide network.
    pub fn anonymous(address: ClientKey, network: ClientKey, wide_network: ClientKey) -> Self {
        Self {
            address,
            identity: Identity::Anonymous {
                network,
                wide_network,
            },
        }
    }

    /// The anonymous client of `ip` (an address's /64 for IPv6) in the default network (/24,
    /// /48) and wide network (/16, /32): the configuration's defaults, for tests.
    #[cfg(test)]
    pub fn anonymous_at(ip: &str) -> Self {
        use super::client::NetworkPrefixes;
        let ip = ip.parse().expect("a test's address");
        let network = NetworkPrefixes { ipv4: 24, ipv6: 48 };
        let wide = NetworkPrefixes { ipv4: 16, ipv6: 32 };
        Self::anonymous(
            ClientKey::new(ip, 64),
            ClientKey::network(ip, network),
            ClientKey::network(ip, wide),
        )
    }

    /// A key's client: counted by the key, under the key's limits.
    pub fn keyed(id: KeyId, kind: KeyKind, limits: KeyLimits, address: ClientKey) -> Self {
        Self {
            address,
            identity: Identity::Keyed {
                client: id.client(),
                kind,
                limits,
            },
        }
    }

    /// The client its limits are counted by: its address, or its key.
    pub fn client(&self) -> &ClientKey {
        match &self.identity {
            Identity::Anonymous { .. } => &self.address,
            Identity::Keyed { client, .. } => client,
        }
    }

    /// The address it came from.
    pub fn address(&self) -> &ClientKey {
        &self.address
    }

    /// The network an anonymous client is also counted by; a key has none.
    pub fn network(&self) -> Option<&ClientKey> {
        match &self.identity {
            Identity::Anonymous { network, .. } => Some(network),
            Identity::Keyed { .. } => None,
        }
    }

    /// The wide network an anonymous client is also counted by; a key has none.
    pub fn wide_network(&self) -> Option<&ClientKey> {
        match &self.identity {
            Identity::Anonymous { wide_network, .. } => Some(wide_network),
            Identity::Keyed { .. } => None,
        }
    }

    /// A client without a key.
    pub fn is_anonymous(&self) -> bool {
        matches!(self.identity, Identity::Anonymous { .. })
    }

    /// A sandbox key's client: its jobs are simulated (domain/sandbox.rs).
    pub fn is_sandbox(&self) -> bool {
        matches!(
            self.identity,
            Identity::Keyed {
                kind: KeyKind::Sandbox,
                ..
            }
        )
    }

    /// The key's limits; `None` without a key.
    fn key_limits(&self) -> Option<&KeyLimits> {
        match &self.identity {
            Identity::Anonymous { .. } => None,
            Identity::Keyed { limits, .. } => Some(limits),
        }
    }

    /// The render limit: the key's, or `default` (`RATE_LIMIT_RENDER`) without a key.
    pub fn render_limit(&self, default: RateLimit) -> RateLimit {
        self.key_limits().map_or(default, |limits| limits.render)
    }

    /// What its renders may ask for: the key's entitlements, or `anonymous`
    /// (`ANONYMOUS_MAX_RESOLUTION`, `ANONYMOUS_DENY`) without a key. A sandbox key's are its
    /// own too: a bot learns there what its live key will be refused.
    pub fn entitlements(&self, anonymous: Entitlements) -> Entitlements {
        self.key_limits()
            .map_or(anonymous, |limits| limits.entitlements)
    }

    /// The longest replay it may have rendered, in seconds of play: the key's
    /// `max_replay_length`, or `default` (`MAX_REPLAY_LENGTH`) without one.
    pub fn max_replay_length(&self, default: u32) -> u32 {
        self.key_limits()
            .and_then(|limits| limits.max_replay_length)
            .unwrap_or(default)
    }

    /// Its share of the render farm's time relative to other clients': the key's weight, or
    /// `anonymous` (`ANONYMOUS_WEIGHT`) without a key.
    pub fn fair_weight(&self, anonymous: Weight) -> Weight {
        self.key_limits().map_or(anonymous, |limits| limits.weight)
    }

    /// How many jobs the client may have active: the key's `max_active`, or `default`
    /// (`MAX_ACTIVE_JOBS_PER_IP`) without a key.
    pub fn max_active(&self, default: i64) -> i64 {
        self.key_limits()
            .map_or(default, |limits| i64::from(limits.max_active))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The anonymous client of `address`, in 203.0.113.0/24 and 203.0.0.0/16.
    fn anonymous_of(address: ClientKey) -> Caller {
        let network = ClientKey::new(ip("203.0.113.0"), 64);
        Caller::anonymous(address, network, ClientKey::new(ip("203.0.0.0"), 64))
    }

    /// 203.0.113.1, and the anonymous client it is.
    fn anonymous_at_its_address() -> (ClientKey, Caller) {
        let address = ClientKey::new(ip("203.0.113.1"), 64);
        (address.clone(), anonymous_of(address))
    }

    /// A new live key with `limits`, connecting from `address`.
    fn live_key(limits: KeyLimits, address: ClientKey) -> Caller {
        Caller::keyed(KeyId::new(), KeyKind::Live, limits, address)
    }

    #[test]
    fn a_key_client_is_its_key_wherever_it_connects_from() {
        let id: KeyId = "5f0c9a4e-1b2d-4c3e-8f70-0123456789ab".parse().unwrap();
        let limits = KeyLimits::default();
        let from = |addr| Caller::keyed(id, KeyKind::Live, limits, ClientKey::new(ip(addr), 64));
        let (a, b) = (from("203.0.113.1"), from("198.51.100.7"));
        assert_eq!(a.client(), b.client());
        assert_eq!(
            a.client().as_str(),
            "key:5f0c9a4e-1b2d-4c3e-8f70-0123456789ab"
        );
        assert_eq!(a.client().lock_id(), id.lock_id());
        assert_eq!(a.address().as_str(), "203.0.113.1");
        let five = "5/minute".parse().unwrap();
        assert_eq!(a.render_limit(five), limits.render);
        assert_eq!(a.max_active(2), 20);

        let anonymous = anonymous_of(ClientKey::new(ip("203.0.113.1"), 64));
        assert_eq!(anonymous.client(), a.address());
        assert_eq!(anonymous.render_limit(five), five);
        assert_eq!(anonymous.max_active(2), 2);
    }

    #[test]
    fn entitlements_and_replay_length_are_the_keys_or_the_defaults() {
        use crate::domain::entitlement::DeniedOptions;
        use crate::domain::render::Resolution;

        let (address, anonymous) = anonymous_at_its_address();
        let configured = Entitlements {
            max_resolution: Some(Resolution::Hd720),
            denied: DeniedOptions::parse("video").unwrap(),
        };
        assert_eq!(anonymous.entitlements(configured), configured);
        assert_eq!(anonymous.max_replay_length(600), 600);

        let plain = live_key(KeyLimits::default(), address.clone());
        assert_eq!(plain.entitlements(configured), Entitlements::default());
        assert_eq!(plain.max_replay_length(600), 600);

        let own = Entitlements {
            max_resolution: Some(Resolution::Qhd1440),
            denied: DeniedOptions::parse("skin").unwrap(),
        };
        let limits = KeyLimits::default()
            .with_entitlements(own)
            .with_max_replay_length(Some(90))
            .unwrap();
        let sandbox = Caller::keyed(KeyId::new(), KeyKind::Sandbox, limits, address);
        assert_eq!(sandbox.entitlements(configured), own);
        assert_eq!(sandbox.max_replay_length(600), 90);
    }

    #[test]
    fn the_fair_weight_is_the_keys_or_the_anonymous_one() {
        let (address, anonymous) = anonymous_at_its_address();
        let three = Weight::new(3).unwrap();
        assert_eq!(anonymous.fair_weight(three), three);

        let plain = live_key(KeyLimits::default(), address.clone());
        assert_eq!(
            plain.fair_weight(three),
            Weight::ONE,
            "a key's default weight, not the anonymous one"
        );

        let heavy = KeyLimits::default().with_weight(250).unwrap();
        let bot = live_key(heavy, address);
        assert_eq!(bot.fair_weight(three).get(), 250);
    }
}
