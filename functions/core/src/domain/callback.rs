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
        let url = Self(url);
        // An address named literally is checked here, with the form; a name is looked up later
        // (after the rate limit: the lookup waits on the network).
        match url.literal_address() {
            Some(address) if !allow_private && !is_public(address) => {
                Err("the host is not allowed".into())
            }
            _ => Ok(url),
        }
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

/// Whether a callback may be sent to `ip`: a globally routable unicast address. Refused are
/// loopback, private (RFC 1918), shared (CGNAT), link-local (cloud metadata lives at
/// 169.254.169.254), unique-local, multicast, unspecified, broadcast, documentation and
/// benchmarking ranges, and IPv6 forms that embed any of these (mapped and NAT64/6to4).
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

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    let embedded_v4 = |high: u16, low: u16| {
        let [a, b] = high.to_be_bytes();
        let [c, d] = low.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    match segments[0] {
        // NAT64 (64:ff9b::/96): the IPv4 address it reaches decides.
        0x64 if segments[1] == 0xff9b => is_public_v4(embedded_v4(segments[6], segments[7])),
        // 6to4 (2002::/16) embeds its IPv4 address in bits 16–47.
        0x2002 => is_public_v4(embedded_v4(segments[1], segments[2])),
        // Documentation (2001:db8::/32).
        0x2001 if segments[1] == 0x0db8 => false,
        // Only global unicast (2000::/3) is routable; this also refuses ::, ::1, the old
        // IPv4-compatible forms, unique-local fc00::/7, link-local fe80::/10 and multicast ff00::/8.
        first => (0x2000..=0x3fff).contains(&first),
    }
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
            "2001:db8::1",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(!is_public(refused.parse().unwrap()), "{refused}");
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
