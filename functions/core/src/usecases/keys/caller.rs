//! Who a request is from (DESIGN.md §3, "API keys"): without `Authorization`, the anonymous
//! client of its address, as always; with one, the key's client, or a 401 `invalid_api_key`
//! for a malformed, unknown or revoked key. Resolved before anything else about the request,
//! so a refused key spends no quota and writes nothing.
//!
//! Only a key the instance's cache cannot answer for costs a database read, and every such
//! read is first counted against the address's `RATE_LIMIT_KEY_LOOKUP` and its network's
//! `RATE_LIMIT_KEY_LOOKUP_NETWORK` (an IPv4 /24 or IPv6 /48: the addresses of one network are
//! cheap identities). A flood of made-up keys is held to that many reads per address and per
//! network, and never holds back their real keys: a refused key on the instance's list of
//! live keys (keys/lookup.rs) is read anyway. A failed lookup is a 503, never a 401: an
//! unknown answer is not a no.

use axum::http::HeaderValue;

use crate::domain::caller::Caller;
use crate::domain::client::ClientKey;
use crate::domain::rate::LimitScope;
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::keys::lookup::KeyRefusal;
use crate::usecases::request::{check_rate_limit, check_rate_limit_as};

/// The rate-limited endpoint name of key lookups that reach the database, per address.
pub const KEY_LOOKUP_ENDPOINT: &str = "key_lookup";
/// The same, per network.
pub const KEY_LOOKUP_NETWORK_ENDPOINT: &str = "key_lookup_network";

/// The caller of a request from `address` (in `network`, and that in `wide_network`) with this
/// `Authorization` header, if any.
pub async fn identify(
    app: &App,
    address: ClientKey,
    (network, wide_network): (ClientKey, ClientKey),
    authorization: Option<&HeaderValue>,
) -> Result<Caller, Rejection> {
    let Some(authorization) = authorization else {
        return Ok(Caller::anonymous(address, network, wide_network));
    };
    // A header that is not visible ASCII cannot be `Bearer osr_…`: malformed, like any other.
    let authorization = authorization.to_str().unwrap_or_default();
    // Both windows are counted at once (the second costs no time), so junk spends both; a
    // refusal names the window that refused, the address's first.
    let before_read = async {
        let limits = &app.config.rate_limits;
        let (address, network) = tokio::join!(
            check_rate_limit(app, KEY_LOOKUP_ENDPOINT, limits.key_lookup, &address),
            check_rate_limit_as(
                app,
                KEY_LOOKUP_NETWORK_ENDPOINT,
                limits.key_lookup_network,
                &network,
                LimitScope::Network
            ),
        );
        address?;
        network?;
        Ok(())
    };
    match app.keys.authenticate(authorization, before_read).await {
        Ok(record) => {
            let summary = record.summary;
            Ok(Caller::keyed(
                summary.id,
                summary.kind,
                summary.limits,
                address,
            ))
        }
        Err(KeyRefusal::Malformed(malformed)) => Err(Rejection::InvalidApiKey(format!(
            "Authorization must be `Bearer <key>`: {malformed}"
        ))),
        Err(KeyRefusal::Unknown) => Err(Rejection::InvalidApiKey("unknown API key".into())),
        Err(KeyRefusal::Revoked) => Err(Rejection::InvalidApiKey(
            "this API key has been revoked".into(),
        )),
        Err(KeyRefusal::Unavailable(error)) => {
            tracing::error!(%error, "API key lookup failed");
            Err(Rejection::DatabaseUnavailable)
        }
        Err(KeyRefusal::Held(rejection)) => Err(rejection),
    }
}
