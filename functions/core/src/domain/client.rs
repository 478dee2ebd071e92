//! Who is asking: the client address behind Cloudflare, and the key that limits are counted by.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use sha2::{Digest, Sha256};

use super::rate::LimitScope;

/// The header Cloudflare sets to the visitor's address. Believed only from a trusted peer.
pub const CF_CONNECTING_IP: &str = "cf-connecting-ip";

/// Cloudflare's published ranges: the default for `TRUSTED_PROXY_CIDRS`.
const CLOUDFLARE_RANGES: &str = include_str!("../../data/cloudflare-ips.txt");

/// Peers whose `CF-Connecting-IP` header we believe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a CIDR range or an IP address")]
pub struct InvalidCidr(String);

impl TrustedProxies {
    /// Parses a comma- or newline-separated list; `#` comments and blanks are skipped.
    /// A bare address is taken as a single-host range. An empty list trusts no one.
    pub fn parse(list: &str) -> Result<Self, InvalidCidr> {
        list.lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                IpNet::from_str(item)
                    .or_else(|_| IpAddr::from_str(item).map(IpNet::from))
                    .map_err(|_| InvalidCidr(item.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn cloudflare() -> Self {
        Self::parse(CLOUDFLARE_RANGES).expect("the bundled Cloudflare range list parses")
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv6 address that carries an IPv4 address is the IPv4 client it carries: otherwise each
/// such form would be a client (and a network) of its own, with its own budgets, and around a
/// ban on the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => carried_ipv4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 address carries, in the forms that carry one:
/// - IPv4-mapped, `::ffff:a.b.c.d` (RFC 4291);
/// - IPv4-compatible, `::a.b.c.d` (RFC 4291, deprecated), but for `::` and `::1`, which are
///   the unspecified and the loopback address;
/// - NAT64's well-known prefix, `64:ff9b::a.b.c.d` (RFC 6052);
/// - 6to4, `2002:AABB:CCDD::/48` (RFC 3056): every IPv4 address owns a whole /48 of it, so
///   counted as IPv6 one IPv4 /24 would be 256 networks;
/// - Teredo, `2001:0::/32` (RFC 4380): the client's public IPv4 address, inverted, is the last
///   32 bits.
fn carried_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let low = u128::from(v6) as u32;
    match v6.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low.into()),
        [0, 0, 0, 0, 0, 0, _, _] if !v6.is_unspecified() && !v6.is_loopback() => Some(low.into()),
        [0x2002, high, middle, ..] => Some(((u32::from(high) << 16) | u32::from(middle)).into()),
        [0x2001, 0, ..] => Some((!low).into()),
        _ => None,
    }
}

/// Whether every address of `range` is counted as an IPv4 address it carries: an IPv6 form of
/// IPv4 addresses, which no client is ever counted as. The forms are prefixes (the compatible
/// one less its two lowest addresses), so a CIDR range lies inside one exactly when both its
/// ends carry an IPv4 address.
pub fn carries_ipv4(range: IpNet) -> bool {
    match range {
        IpNet::V6(net) => {
            carried_ipv4(net.network()).is_some() && carried_ipv4(net.broadcast()).is_some()
        }
        IpNet::V4(_) => false,
    }
}

/// The client's address: `CF-Connecting-IP` when the connecting peer is a trusted proxy,
/// the peer itself otherwise. A missing or unparsable header falls back to the peer.
pub fn resolve_client_ip(
    peer: IpAddr,
    cf_connecting_ip: Option<&str>,
    trusted: &TrustedProxies,
) -> IpAddr {
    let forwarded = cf_connecting_ip
        .filter(|_| trusted.contains(peer))
        .and_then(|value| IpAddr::from_str(value.trim()).ok());
    canonical(forwarded.unwrap_or(peer))
}

/// How an API key's client is named (`key:<uuid>`, domain/key.rs), where an anonymous client's
/// address stands; the store tells anonymous jobs from keyed ones by it too (`job_counts`).
pub const KEY_CLIENT_PREFIX: &str = "key:";

/// What per-client limits are counted by: an IPv4 address, or the IPv6 prefix
/// (by default the /64 one host is given) so rotating inside it buys nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientKey(String);

impl ClientKey {
    pub fn new(ip: IpAddr, ipv6_prefix_len: u8) -> Self {
        match canonical(ip) {
            IpAddr::V4(v4) => Self(v4.to_string()),
            IpAddr::V6(v6) if ipv6_prefix_len >= 128 => Self(v6.to_string()),
            IpAddr::V6(v6) => {
                let net = Ipv6Net::new(v6, ipv6_prefix_len)
                    .expect("prefix length validated by config")
                    .trunc();
                Self(net.to_string())
            }
        }
    }

    /// The network an anonymous client's address belongs to (`IPV4_NETWORK_PREFIX`,
    /// `IPV6_NETWORK_PREFIX`): what one actor with many cheap addresses is also counted by; with
    /// the wide prefixes (`IPV4_WIDE_NETWORK_PREFIX`, `IPV6_WIDE_NETWORK_PREFIX`), what one
    /// actor with many cheap networks of one allocation is.
    pub fn network(ip: IpAddr, prefixes: NetworkPrefixes) -> Self {
        match canonical(ip) {
            IpAddr::V4(v4) => Self(
                Ipv4Net::new(v4, prefixes.ipv4)
                    .expect("prefix length validated by config")
                    .trunc()
                    .to_string(),
            ),
            IpAddr::V6(v6) => Self(
                Ipv6Net::new(v6, prefixes.ipv6)
                    .expect("prefix length validated by config")
                    .trunc()
                    .to_string(),
            ),
        }
    }

    /// A client by its name, as the store keeps it: an API key's client (`KeyId::client`).
    pub(super) fn named(name: String) -> Self {
        Self(name)
    }

    /// A job's client as the store keeps it (`jobs.client_ip`): an address, a prefix, or a
    /// key's client. Only for a name the store wrote.
    pub fn stored(name: &str) -> Self {
        Self(name.to_owned())
    }

    /// A key's client as the store names it (`key:<uuid>`), if `name` is one.
    pub fn key_client(name: &str) -> Option<Self> {
        let id = name.strip_prefix(KEY_CLIENT_PREFIX)?;
        uuid::Uuid::parse_str(id).ok()?;
        Some(Self(name.to_owned()))
    }

    /// What a WebSocket connection's frames are counted by (`conn:<id>`): never an address or
    /// a key's client, so its window is its own.
    pub fn connection(id: &str) -> Self {
        Self(format!("conn:{id}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The addresses this client is, as a range (an IPv4 address, an IPv6 prefix); `None`
    /// for a key's client.
    pub fn as_net(&self) -> Option<IpNet> {
        IpNet::from_str(&self.0)
            .or_else(|_| IpAddr::from_str(&self.0).map(IpNet::from))
            .ok()
    }

    /// What a limit counted by this client is, as a 429 names it: a key's, or an address's.
    pub fn scope(&self) -> LimitScope {
        match self.0.starts_with(KEY_CLIENT_PREFIX) {
            true => LimitScope::Key,
            false => LimitScope::Client,
        }
    }

    /// The per-client advisory lock id, bit for bit the Python original's
    /// `int.from_bytes(sha256(ip.encode()).digest()[:8], "little", signed=True)`,
    /// so both fleets serialize on the same lock during a migration.
    pub fn lock_id(&self) -> i64 {
        advisory_lock_id(&self.0)
    }
}

/// The prefix lengths of an anonymous client's network (0..=32, and 0..=the client's IPv6
/// prefix, so a network holds whole clients), or of its wide network (at most the network's,
/// so a wide network holds whole networks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkPrefixes {
    pub ipv4: u8,
    pub ipv6: u8,
}

/// `pg_advisory_xact_lock` id of a name: the first 8 bytes of its SHA-256, little-endian, signed.
pub fn advisory_lock_id(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

impl std::fmt::Display for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_header_is_believed_only_from_a_trusted_peer() {
        let trusted = TrustedProxies::parse("10.0.0.0/8, 2400:cb00::/32").unwrap();
        let none = TrustedProxies::parse("").unwrap();
        // (peer, CF-Connecting-IP, trusted proxies, the client)
        let cases = [
            ("10.1.2.3", Some("203.0.113.9"), &trusted, "203.0.113.9"),
            (
                "198.51.100.1",
                Some("203.0.113.9"),
                &trusted,
                "198.51.100.1",
            ),
            ("10.1.2.3", Some("not an ip"), &trusted, "10.1.2.3"),
            ("10.1.2.3", None, &trusted, "10.1.2.3"),
            // An empty list trusts no one.
            ("127.0.0.1", Some("203.0.113.9"), &none, "127.0.0.1"),
        ];
        for (peer, header, proxies, client) in cases {
            assert_eq!(
                resolve_client_ip(ip(peer), header, proxies),
                ip(client),
                "{peer} {header:?}"
            );
        }
    }

    #[test]
    fn mapped_addresses_are_ipv4_everywhere() {
        let trusted = TrustedProxies::parse("10.0.0.0/8").unwrap();
        assert!(trusted.contains(ip("::ffff:10.0.0.1")));
        assert_eq!(
            resolve_client_ip(ip("::ffff:10.0.0.1"), Some("::ffff:203.0.113.9"), &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(ClientKey::new(ip("::ffff:1.2.3.4"), 64).as_str(), "1.2.3.4");
    }

    #[test]
    fn every_ipv6_form_of_an_ipv4_address_is_that_address() {
        // (the IPv6 form, the IPv4 address it carries)
        let forms = [
            ("::ffff:203.0.113.7", "203.0.113.7"),
            ("::203.0.113.7", "203.0.113.7"),
            ("::2", "0.0.0.2"),
            ("64:ff9b::203.0.113.7", "203.0.113.7"),
            ("64:ff9b::cb00:7107", "203.0.113.7"),
            ("2002:cb00:7107::1", "203.0.113.7"),
            ("2002:cb00:7107:ffff:1:2:3:4", "203.0.113.7"),
            // Teredo (RFC 4380's example: server 65.54.227.120, client 192.0.2.45 port 40000).
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"),
            ("2001::ffff:ffff", "0.0.0.0"),
        ];
        let trusted = TrustedProxies::parse("").unwrap();
        for (v6, v4) in forms {
            assert_eq!(resolve_client_ip(ip(v6), None, &trusted), ip(v4), "{v6}");
            assert_eq!(ClientKey::new(ip(v6), 64).as_str(), v4, "{v6}");
            let prefixes = NetworkPrefixes { ipv4: 24, ipv6: 48 };
            assert_eq!(
                ClientKey::network(ip(v6), prefixes),
                ClientKey::network(ip(v4), prefixes),
                "{v6}"
            );
        }
        // Not a form of IPv4: the unspecified and loopback addresses, a NAT64 local-use prefix,
        // other 2001::/16 space, and IPv6 that merely ends like an IPv4 address.
        for v6 in [
            "::",
            "::1",
            "64:ff9b:1::cb00:7107",
            "2001:1::cb00:7107",
            "2001:db8::cb00:7107",
            "::1:cb00:7107",
        ] {
            assert!(resolve_client_ip(ip(v6), None, &trusted).is_ipv6(), "{v6}");
        }
        for (range, carries) in [
            ("::ffff:0:0/96", true),
            ("::203.0.113.0/120", true),
            ("64:ff9b::/96", true),
            ("2002::/16", true),
            ("2001::/32", true),
            ("203.0.113.0/24", false),
            ("::/96", false),
            ("::/127", false),
            ("64:ff9b::/95", false),
            ("2001::/31", false),
            ("2001:db8::/32", false),
        ] {
            assert_eq!(carries_ipv4(range.parse().unwrap()), carries, "{range}");
        }
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_prefix() {
        let a = ClientKey::new(ip("2001:db8:1:2:aaaa::1"), 64);
        let b = ClientKey::new(ip("2001:db8:1:2:ffff::9"), 64);
        let c = ClientKey::new(ip("2001:db8:1:3::1"), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.as_str(), "2001:db8:1:2::/64");
        assert_eq!(
            ClientKey::new(ip("2001:db8::1"), 128).as_str(),
            "2001:db8::1"
        );
    }

    #[test]
    fn networks_group_the_addresses_of_one_allocation() {
        let prefixes = NetworkPrefixes { ipv4: 24, ipv6: 48 };
        let net = |s| ClientKey::network(ip(s), prefixes);
        assert_eq!(net("203.0.113.9").as_str(), "203.0.113.0/24");
        assert_eq!(net("203.0.113.250"), net("203.0.113.9"));
        assert_ne!(net("203.0.114.9"), net("203.0.113.9"));
        assert_eq!(net("::ffff:203.0.113.7").as_str(), "203.0.113.0/24");
        // 6to4: each IPv4 address's /48 is that address, client and network alike.
        assert_eq!(net("2002:cb00:7107:1::9").as_str(), "203.0.113.0/24");
        assert_eq!(net("2002:cb00:71fe:ffff::1"), net("203.0.113.1"));
        assert_eq!(
            ClientKey::new(ip("2002:cb00:7107:1::9"), 64).as_str(),
            "203.0.113.7"
        );
        // 256 /64s of a home /56 and every /64 of a broker's /48 are one network.
        assert_eq!(net("2001:db8:7:ff00::1").as_str(), "2001:db8:7::/48");
        assert_eq!(net("2001:db8:7:1::1"), net("2001:db8:7:ffff:ffff::1"));
        assert_ne!(net("2001:db8:8::1"), net("2001:db8:7::1"));
        let exact = NetworkPrefixes {
            ipv4: 32,
            ipv6: 128,
        };
        assert_eq!(
            ClientKey::network(ip("198.51.100.4"), exact).as_str(),
            "198.51.100.4/32"
        );
    }

    #[test]
    fn wide_networks_group_the_networks_of_one_allocation() {
        let wide = NetworkPrefixes { ipv4: 16, ipv6: 32 };
        let block = |s| ClientKey::network(ip(s), wide);
        // Every /48 a tunnel broker gives away from its /32 is one wide network.
        assert_eq!(block("2001:db8:48:1::1").as_str(), "2001:db8::/32");
        assert_eq!(block("2001:db8:ffff:ffff::1"), block("2001:db8::1"));
        assert_ne!(block("2001:db9::1"), block("2001:db8::1"));
        // Every /24 of an IPv4 /16, and every IPv6 form of its addresses.
        assert_eq!(block("203.0.113.9").as_str(), "203.0.0.0/16");
        assert_eq!(block("203.0.255.1"), block("203.0.0.1"));
        assert_ne!(block("203.1.0.1"), block("203.0.0.1"));
        assert_eq!(block("2002:cb00:7107::1"), block("203.0.1.1"));
        assert_eq!(
            block("2001:0:4136:e378:8000:63bf:3fff:fdd2").as_str(),
            "192.0.0.0/16"
        );
    }

    #[test]
    fn lock_id_matches_the_python_formula() {
        // python3 -c 'import hashlib;print(int.from_bytes(hashlib.sha256(b"203.0.113.9").digest()[:8],"little",signed=True))'
        assert_eq!(
            ClientKey::new(ip("203.0.113.9"), 64).lock_id(),
            PY_LOCK_ID_203_0_113_9
        );
    }

    const PY_LOCK_ID_203_0_113_9: i64 = -4473425657128853032;

    #[test]
    fn bundled_cloudflare_list_parses() {
        let cf = TrustedProxies::cloudflare();
        assert!(cf.contains(ip("173.245.48.1")));
        assert!(cf.contains(ip("2606:4700::1")));
        assert!(!cf.contains(ip("127.0.0.1")));
    }
}
