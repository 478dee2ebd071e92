//! Who a client is: the proxies whose word on the address is believed, and the prefixes that
//! make an address a client, a network and a wide network.

use super::{ConfigError, Env};
use crate::domain::client::{NetworkPrefixes, TrustedProxies};

#[derive(Debug, Clone)]
pub struct ClientNetworks {
    /// The proxies whose `CF-Connecting-IP` is believed (`TRUSTED_PROXY_CIDRS`); Cloudflare's
    /// ranges by default.
    pub trusted_proxies: TrustedProxies,
    /// The prefix an IPv6 client is counted by (`IPV6_CLIENT_PREFIX`).
    pub ipv6_client_prefix: u8,
    /// An anonymous client's network (`IPV4_NETWORK_PREFIX`, `IPV6_NETWORK_PREFIX`).
    pub network_prefixes: NetworkPrefixes,
    /// The wider block around it (`IPV4_WIDE_NETWORK_PREFIX`, `IPV6_WIDE_NETWORK_PREFIX`):
    /// whole networks.
    pub wide_network_prefixes: NetworkPrefixes,
}

impl ClientNetworks {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        let trusted_proxies = match env.get("TRUSTED_PROXY_CIDRS") {
            Some(list) => TrustedProxies::parse(&list)
                .map_err(|e| ConfigError::new("TRUSTED_PROXY_CIDRS", e.to_string()))?,
            None => TrustedProxies::cloudflare(),
        };
        let ipv6_client_prefix =
            env.parse_where("IPV6_CLIENT_PREFIX", 64u8, |p| *p <= 128, "must be 0..=128")?;
        let network_prefixes = NetworkPrefixes {
            ipv4: env.parse_where("IPV4_NETWORK_PREFIX", 24u8, |p| *p <= 32, "must be 0..=32")?,
            ipv6: env.parse_where(
                "IPV6_NETWORK_PREFIX",
                48u8,
                |p| *p <= ipv6_client_prefix,
                "must be 0..=IPV6_CLIENT_PREFIX: a network holds whole clients",
            )?,
        };
        let wide_network_prefixes = NetworkPrefixes {
            ipv4: env.parse_where(
                "IPV4_WIDE_NETWORK_PREFIX",
                16u8,
                |p| *p <= network_prefixes.ipv4,
                "must be 0..=IPV4_NETWORK_PREFIX: a wide network holds whole networks",
            )?,
            ipv6: env.parse_where(
                "IPV6_WIDE_NETWORK_PREFIX",
                32u8,
                |p| *p <= network_prefixes.ipv6,
                "must be 0..=IPV6_NETWORK_PREFIX: a wide network holds whole networks",
            )?,
        };
        Ok(Self {
            trusted_proxies,
            ipv6_client_prefix,
            network_prefixes,
            wide_network_prefixes,
        })
    }
}
