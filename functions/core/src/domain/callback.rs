//! Callbacks (DESIGN.md §9, "Callbacks"): where a keyed client wants its job's status changes
//! POSTed, which addresses such a POST may reach, and how it is signed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::{Host, Url};

/// The form field a submission names its callback in.
pub const CALLBACK_FIELD: &str = "callback_url";
/// The header a callback's signature travels in.
pub const SIGNATURE_HEADER: &str = "x-osurender-signature";
/// Longer URLs are refused: one is stored with the job and each of its callbacks. (A form's
/// text fields are at most this long anyway: form.rs.)
pub const MAX_URL_BYTES: usize = 1024;

/// A callback URL as submitted: absolute `https` (or `http` where private callbacks are
/// allowed), with a host, without credentials or a fragment. Whether its host is public is
/// for the resolver to say (`is_public`), at submission and again at every delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackUrl(Url);

impl CallbackUrl {
    /// `allow_private`: `ALLOW_PRIVATE_CALLBACKS` (development), which also permits `http`.
    pub fn parse(text: &str, allow_private: bool) -> Result<Self, String> {
        let text = text.trim();
        if text.len() > MAX_URL_BYTES {
            return Err(format!("must be a URL of at most {MAX_URL_BYTES} bytes"));
        }
        let url = Url::parse(text).map_err(|e| format!("not an absolute URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if allow_private => {}
            _ => return Err("must be an https URL".into()),
        }
        if url.host().is_none() {
            return Err("must name a host".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not carry credentials".into());
        }
        if url.fragment().is_some() {
            return Err("must not have a fragment".into());
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn url(&self) -> &Url {
        &self.0
    }

    /// The host's address when the URL names one literally (no lookup is made for it).
    pub fn literal_address(&self) -> Option<IpAddr> {
        match self.0.host()? {
            Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
            Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
            Host::Domain(_) => None,
        }
    }

    /// The host name to resolve, and the port to connect to.
    pub fn host_and_port(&self) -> (String, u16) {
        let host = self.0.host_str().unwrap_or_default();
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        (host, self.0.port_or_known_default().unwrap_or(443))
    }
}

/// Whether a callback may be sent to `ip`: a globally reachable unicast address. Refused are
/// loopback, private (RFC 1918), shared (CGNAT), link-local (cloud metadata lives at
/// 169.254.169.254), unique-local, multicast, unspecified, broadcast, documentation and
/// benchmarking ranges, every block of IANA's IPv6 special-purpose registry that is not globally
/// reachable, and IPv6 forms that embed a refused IPv4 address (mapped, NAT64, 6to4).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space, RFC 6598
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

/// IANA's IPv6 special-purpose address registry, checked 2026-12: its blocks inside global
/// unicast (2000::/3) that are not globally reachable, as (prefix, length). The rest of the
/// registry lies outside 2000::/3 (::/128, ::1/128, 100::/64, 100:0:0:1::/64, 5f00::/16,
/// fc00::/7, fe80::/10; the NAT64 and mapped forms are decided by the IPv4 address they carry),
/// and 2001::/23 is handled by `is_public_2001`.
const REFUSED_V6: [(u128, u8); 2] = [
    (0x2001_0db8 << 96, 32), // documentation, RFC 3849
    (0x3fff << 112, 20),     // documentation, RFC 9637
];

fn in_block(ip: u128, (prefix, len): (u128, u8)) -> bool {
    (ip ^ prefix) >> (128 - u32::from(len)) == 0
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let bits = u128::from(ip);
    let segments = ip.segments();
    let embedded_v4 = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    // NAT64's well-known prefix (64:ff9b::/96, RFC 6052) is globally reachable: the IPv4
    // address it translates to decides. The local-use 64:ff9b:1::/48 (RFC 8215) is not, and the
    // rest of 64:ff9b::/32 is unassigned: both lie outside 2000::/3 and are refused below.
    if in_block(bits, (0x0064_ff9b << 96, 96)) {
        return is_public_v4(embedded_v4(segments[6], segments[7]));
    }
    // 6to4 (2002::/16) embeds its IPv4 address in bits 16–47.
    if segments[0] == 0x2002 {
        return is_public_v4(embedded_v4(segments[1], segments[2]));
    }
    if in_block(bits, (0x2001 << 112, 23)) {
        return is_public_2001(bits);
    }
    // Only global unicast (2000::/3) is routable; this also refuses ::, ::1, the old
    // IPv4-compatible forms, discard 100::/64, 64:ff9b:1::/48, segment routing 5f00::/16,
    // unique-local fc00::/7, link-local fe80::/10 and multicast ff00::/8.
    (0x2000..=0x3fff).contains(&segments[0])
        && !REFUSED_V6.iter().any(|&block| in_block(bits, block))
}

/// 2001::/23, IETF protocol assignments (RFC 2928), is not globally reachable except for the
/// registry's entries marked so. Refused within it: Teredo 2001::/32 (it also carries an
/// obfuscated IPv4 address), benchmarking 2001:2::/48, ORCHID 2001:10::/28 and ORCHIDv2
/// 2001:20::/28 (the registry marks ORCHIDv2 reachable, but an ORCHID names a host and is
/// not routable: RFC 7343 §2), and everything unassigned.
fn is_public_2001(bits: u128) -> bool {
    const GLOBAL: [(u128, u8); 6] = [
        ((0x2001_0001 << 96) | 1, 128),             // PCP anycast, RFC 7723
        ((0x2001_0001 << 96) | 2, 128),             // TURN anycast, RFC 8155
        ((0x2001_0001 << 96) | 3, 128),             // DNS-SD SRP anycast, RFC 9665
        (0x2001_0003 << 96, 32),                    // AMT, RFC 7450
        ((0x2001_0004 << 96) | (0x0112 << 80), 48), // AS112-v6, RFC 7535
        (0x2001_0030 << 96, 28),                    // drone remote ID tags, RFC 9374
    ];
    GLOBAL.iter().any(|&block| in_block(bits, block))
}

/// The `X-Osurender-Signature` of a callback body sent at `timestamp` (Unix seconds):
/// `t=<timestamp>,v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`. The timestamp is
/// signed, so a receiver that rejects old ones cannot be replayed to later.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={timestamp},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls_with_a_host_and_no_credentials() {
        let ok = CallbackUrl::parse(" https://bot.example/hooks/osu?x=1 ", false).unwrap();
        assert_eq!(ok.as_str(), "https://bot.example/hooks/osu?x=1");
        assert_eq!(ok.host_and_port(), ("bot.example".into(), 443));
        assert_eq!(ok.literal_address(), None);
        for bad in [
            "http://bot.example/",
            "ftp://bot.example/",
            "bot.example/hook",
            "https://user:pw@bot.example/",
            "https://bot.example/#frag",
            "data:text/plain,hi",
            "",
        ] {
            assert!(CallbackUrl::parse(bad, false).is_err(), "{bad}");
        }
        let long = format!("https://bot.example/{}", "a".repeat(MAX_URL_BYTES));
        assert!(CallbackUrl::parse(&long, false).is_err());
        let local = CallbackUrl::parse("http://[::1]:8080/cb", true).unwrap();
        assert_eq!(local.literal_address(), Some("::1".parse().unwrap()));
        assert_eq!(local.host_and_port(), ("::1".into(), 8080));
    }

    #[test]
    fn only_global_unicast_addresses_are_public() {
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "::ffff:93.184.216.34",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2400:cb00::1",
            "3ffe:ffff::1",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for refused in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "5f00::1",
        ] {
            assert!(!is_public(refused.parse().unwrap()), "{refused}");
        }
    }

    /// Each block of IANA's IPv6 special-purpose registry that is not globally reachable, at
    /// its first and last address, and the IPv4 addresses the translating forms embed.
    #[test]
    fn ipv6_special_purpose_blocks_are_refused() {
        for (block, first, last) in [
            ("discard 100::/64", "100::", "100::ffff:ffff:ffff:ffff"),
            (
                "dummy 100:0:0:1::/64",
                "100:0:0:1::",
                "100::1:ffff:ffff:ffff:ffff",
            ),
            (
                "NAT64 local 64:ff9b:1::/48",
                "64:ff9b:1::808:808",
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "unassigned 64:ff9b::/32",
                "64:ff9b:2::808:808",
                "64:ff9b:0:0:1::808:808",
            ),
            (
                "IETF 2001::/23",
                "2001:5::1",
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "Teredo 2001::/32",
                "2001::",
                "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "Teredo of a public IPv4",
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                "2001::1",
            ),
            ("PCP's neighbours", "2001:1::", "2001:1::4"),
            (
                "benchmarking 2001:2::/48",
                "2001:2::",
                "2001:2:0:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "ORCHID 2001:10::/28",
                "2001:10::",
                "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "ORCHIDv2 2001:20::/28",
                "2001:20::",
                "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "documentation 2001:db8::/32",
                "2001:db8::",
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "documentation 3fff::/20",
                "3fff::",
                "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            ("6to4 of a private IPv4", "2002:a00:1::", "2002:c0a8:101::1"),
            ("6to4 of loopback", "2002:7f00:1::", "2002:7fff:ffff::1"),
            ("6to4 of link-local", "2002:a9fe:a9fe::1", "2002:a9fe::"),
            ("6to4 of shared space", "2002:6440:1::", "2002:647f:ffff::"),
            (
                "NAT64 of a private IPv4",
                "64:ff9b::a00:1",
                "64:ff9b::c0a8:101",
            ),
            ("NAT64 of loopback", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe"),
            (
                "segment routing 5f00::/16",
                "5f00::",
                "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "unique-local fc00::/7",
                "fc00::",
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
            (
                "link-local fe80::/10",
                "fe80::",
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            ),
        ] {
            for address in [first, last] {
                let ip: IpAddr = address.parse().unwrap();
                assert!(!is_public(ip), "{block}: {address}");
            }
        }
    }

    /// The registry's globally reachable entries inside 2001::/23 stay reachable.
    #[test]
    fn globally_reachable_special_purpose_addresses_are_public() {
        for address in [
            "2001:1::1",
            "2001:1::2",
            "2001:1::3",
            "2001:3::1",
            "2001:3:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:4:112::1",
            "2001:4:112:ffff:ffff:ffff:ffff:ffff",
            "2001:30::1",
            "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff",
            "2001:200::1",
            "2620:4f:8000::1",
            "3fff:1000::1",
        ] {
            assert!(is_public(address.parse().unwrap()), "{address}");
        }
    }

    #[test]
    fn the_signature_covers_the_timestamp_and_the_body() {
        let header = signature(b"secret", 1_764_530_000, br#"{"a":1}"#);
        // echo -n '1764530000.{"a":1}' | openssl dgst -sha256 -hmac secret
        let expected = "4b9c1e1bdb211a921f2f239c5b041e17e77dbccfb11fe6601d42e372782f3f18";
        assert_eq!(header, format!("t=1764530000,v1={expected}"));
        assert_ne!(header, signature(b"secret", 1_764_530_001, br#"{"a":1}"#));
        assert_ne!(header, signature(b"secret", 1_764_530_000, br#"{"a":2}"#));
        assert_ne!(header, signature(b"other", 1_764_530_000, br#"{"a":1}"#));
    }
}
