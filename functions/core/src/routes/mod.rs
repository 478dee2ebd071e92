//! HTTP mapping: each route's handlers, turning requests into use-case calls and their
//! outcomes into responses (problem+json for refusals). `http` serves them with the middleware.

pub mod health;
pub mod jobs;
pub mod render;
pub mod skins;
pub mod webhook;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use axum::body::{Body, BodyDataStream};
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::domain::caller::Caller;
use crate::domain::client::CF_CONNECTING_IP;
use crate::domain::client::{resolve_client_ip, ClientKey};
use crate::support::problem::{rate_limit_headers, InvalidParam, Rejection};
use crate::usecases::app::App;
use crate::usecases::idempotency::Reply;
use crate::usecases::keys::caller::identify;
use crate::usecases::request::{FormUpload, Submission};

/// The TCP peer of the request: the socket's remote address locally, API Gateway's
/// `sourceIp` on Lambda (inserted by the Lambda adapter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddr {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(peer) = parts.extensions.get::<PeerAddr>() {
            return Ok(*peer);
        }
        if let Some(ConnectInfo(addr)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            return Ok(PeerAddr(addr.ip()));
        }
        tracing::error!("request without a peer address");
        Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
    }
}

/// Who the request is from (`App::caller`), as a handler's argument: resolved where it stands
/// in the arguments, so a path's or a query's checks before it come first, and a body after it
/// is not read for a refused key. `render` resolves it itself, on purpose: a refused caller's
/// render is still logged and counted in the admission metrics.
impl FromRequestParts<App> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let PeerAddr(peer) = PeerAddr::from_request_parts(parts, app).await?;
        app.caller(peer, &parts.headers)
            .await
            .map_err(IntoResponse::into_response)
    }
}

/// `Sec-Fetch-Site`: whose page a browser sent the request for (Fetch Metadata).
const SEC_FETCH_SITE: &str = "sec-fetch-site";

/// A state-changing request's check that no web page of another site sent it (DESIGN.md §2, "No
/// borrowed browsers"): an `Origin`, when present, must be the allowed CORS origin
/// (`CORS_ALLOW_ORIGIN`, exactly; `*` allows any origin but the opaque `null`); without one,
/// `Sec-Fetch-Site: cross-site` is refused. Programs (bots, curl) send neither header, and
/// `same-origin`, `same-site` or `none` alone refuse nothing. It costs no I/O: a refusal comes
/// before the caller is identified, the body read or any quota spent.
pub fn check_request_site(allowed: Option<&str>, headers: &HeaderMap) -> Result<(), Rejection> {
    let allows = |origin: &[u8]| match allowed {
        Some("*") => origin != b"null",
        Some(allowed) => origin == allowed.as_bytes(),
        None => false,
    };
    let refused = match headers.get(header::ORIGIN) {
        Some(origin) => !allows(origin.as_bytes()),
        None => headers
            .get(SEC_FETCH_SITE)
            .is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site")),
    };
    if refused {
        return Err(Rejection::CrossSiteRequest);
    }
    Ok(())
}

/// A request that passed `check_request_site`: a handler's argument, first among them.
pub struct AllowedSite;

impl FromRequestParts<App> for AllowedSite {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        check_request_site(app.config.http.cors_allow_origin.as_deref(), &parts.headers)?;
        Ok(AllowedSite)
    }
}

/// A route's query parameters, and the check that makes them what its use case takes.
pub trait QueryParams: serde::de::DeserializeOwned {
    type Checked;
    fn check(self) -> Result<Self::Checked, Rejection>;
}

/// A query string parsed and checked (`QueryParams`), or a 400 problem saying what is wrong
/// with it: before the caller, so a malformed read costs no key lookup.
pub struct ValidQuery<T: QueryParams>(pub T::Checked);

impl<T: QueryParams, S: Send + Sync> FromRequestParts<S> for ValidQuery<T> {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let repeated = repeated_params::<T>(query);
        // The other parameters are checked as well, so that every bad one is named.
        let others: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                url::form_urlencoded::parse(query.as_bytes())
                    .filter(|(name, _)| !repeated.iter().any(|r| r.name == *name)),
            )
            .finish();
        let checked = deserialize::<T>(&others)
            .map_err(|rejection| Rejection::InvalidField(rejection.body_text()))
            .and_then(T::check);
        match (checked, repeated.is_empty()) {
            (Ok(checked), true) => Ok(ValidQuery(checked)),
            (Ok(_), false) => Err(Rejection::InvalidParams(repeated)),
            (Err(Rejection::InvalidParams(more)), false) => {
                Err(Rejection::InvalidParams([repeated, more].concat()))
            }
            (Err(rejection), _) => Err(rejection),
        }
    }
}

/// The parameters of `query` sent more than once that `T` reads (it ignores the others), in
/// the order they first appear: a read takes each parameter once, and which of two values was
/// meant is not ours to guess.
fn repeated_params<T: QueryParams>(query: &str) -> Vec<InvalidParam> {
    let mut seen = HashSet::new();
    let mut repeated: Vec<String> = Vec::new();
    for (name, _) in url::form_urlencoded::parse(query.as_bytes()) {
        if !seen.insert(name.clone()) && !repeated.iter().any(|r| *r == name) {
            repeated.push(name.into_owned());
        }
    }
    // `T` reads a parameter if a query sending it twice does not deserialize: serde refuses a
    // field it reads twice and ignores the ones it does not read.
    repeated.retain(|name| {
        let twice = url::form_urlencoded::Serializer::new(String::new())
            .append_pair(name, "")
            .append_pair(name, "")
            .finish();
        deserialize::<T>(&twice).is_err()
    });
    repeated
        .into_iter()
        .map(|name| InvalidParam {
            name,
            reason: "sent more than once: send it once".into(),
        })
        .collect()
}

/// `query` as `T`, as axum's query extractor reads it.
fn deserialize<T: QueryParams>(query: &str) -> Result<T, QueryRejection> {
    let uri = format!("/?{query}")
        .parse::<axum::http::Uri>()
        .unwrap_or_default();
    axum::extract::Query::<T>::try_from_uri(&uri).map(|axum::extract::Query(params)| params)
}

impl App {
    /// Who this request is from: its API key's client (`Authorization: Bearer`), or the
    /// anonymous client of its address (and of its network, DESIGN.md §3); a 401 for a key that
    /// does not count (usecases/keys/caller.rs).
    pub async fn caller(&self, peer: IpAddr, headers: &HeaderMap) -> Result<Caller, Rejection> {
        let (address, network, wide_network) = self.addresses(peer, headers);
        let authorization = headers.get(header::AUTHORIZATION);
        identify(self, address, (network, wide_network), authorization).await
    }

    /// The anonymous client a request from `peer` with these headers is from (its
    /// `CF-Connecting-IP` believed only from a trusted proxy), whatever key it may carry.
    pub fn anonymous_caller(&self, peer: IpAddr, headers: &HeaderMap) -> Caller {
        let (address, network, wide_network) = self.addresses(peer, headers);
        Caller::anonymous(address, network, wide_network)
    }

    /// The request's client address, network and wide network.
    fn addresses(&self, peer: IpAddr, headers: &HeaderMap) -> (ClientKey, ClientKey, ClientKey) {
        let forwarded = headers
            .get(CF_CONNECTING_IP)
            .and_then(|value| value.to_str().ok());
        let ip = resolve_client_ip(peer, forwarded, &self.config.clients.trusted_proxies);
        (
            ClientKey::new(ip, self.config.clients.ipv6_client_prefix),
            ClientKey::network(ip, self.config.clients.network_prefixes),
            ClientKey::network(ip, self.config.clients.wide_network_prefixes),
        )
    }
}

/// A multipart form body, streamed, with the headers that describe it.
pub fn form_upload(headers: &HeaderMap, body: Body) -> FormUpload<BodyDataStream> {
    let header_str = |name| headers.get(name).and_then(|v| v.to_str().ok());
    FormUpload {
        content_type: header_str(header::CONTENT_TYPE).map(str::to_owned),
        content_length: header_str(header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
        body: body.into_data_stream(),
    }
}

impl<T> Submission<T> {
    /// `accepted`'s response for what the submission made, or the rejection's problem; with the
    /// `X-RateLimit-*` headers once the limit has counted the request.
    pub(crate) fn respond(self, accepted: impl FnOnce(T) -> Response) -> Response {
        let mut response = match self.outcome {
            Ok(made) => accepted(made),
            Err(rejection) => rejection.into_response(),
        };
        if let Some(rate) = &self.rate {
            rate_limit_headers(rate, response.headers_mut());
        }
        response
    }
}

impl<T> Submission<Reply<T>> {
    /// As `respond`, but a retry of an idempotent request gets the first one's response.
    pub(crate) fn respond_replayable(self, accepted: impl FnOnce(T) -> Response) -> Response {
        self.respond(|reply| match reply {
            Reply::Fresh(made) => accepted(made),
            Reply::Replayed(response) => response.respond(true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    const PAGE: &str = "https://osurender.example";

    /// The allowed origin, the headers sent, and whether the request passes.
    type Case = (
        Option<&'static str>,
        &'static [(&'static str, &'static str)],
        bool,
    );

    #[test]
    fn only_another_sites_page_is_refused() {
        let cases: &[Case] = &[
            // A program: neither header.
            (None, &[], true),
            (Some(PAGE), &[], true),
            // Fetch Metadata alone refuses only cross-site.
            (None, &[("sec-fetch-site", "same-origin")], true),
            (None, &[("sec-fetch-site", "same-site")], true),
            (None, &[("sec-fetch-site", "none")], true),
            (None, &[("sec-fetch-site", "cross-site")], false),
            (None, &[("sec-fetch-site", "Cross-Site")], false),
            // The allowed origin's page, usually of another site than the API.
            (
                Some(PAGE),
                &[("origin", PAGE), ("sec-fetch-site", "cross-site")],
                true,
            ),
            (Some(PAGE), &[("origin", PAGE)], true),
            // Any other origin, whatever Fetch Metadata says, and an opaque one.
            (
                Some(PAGE),
                &[
                    ("origin", "https://evil.example"),
                    ("sec-fetch-site", "cross-site"),
                ],
                false,
            ),
            (Some(PAGE), &[("origin", "https://evil.example")], false),
            (
                Some(PAGE),
                &[
                    ("origin", "https://a.osurender.example"),
                    ("sec-fetch-site", "same-site"),
                ],
                false,
            ),
            (Some(PAGE), &[("origin", "null")], false),
            (
                Some(PAGE),
                &[("origin", "https://osurender.example.evil")],
                false,
            ),
            (None, &[("origin", PAGE)], false),
            // `*`: any page, but no opaque origin.
            (
                Some("*"),
                &[
                    ("origin", "https://evil.example"),
                    ("sec-fetch-site", "cross-site"),
                ],
                true,
            ),
            (Some("*"), &[("origin", "null")], false),
        ];
        for (allowed, sent, passes) in cases {
            let checked = check_request_site(*allowed, &headers(sent));
            assert_eq!(checked.is_ok(), *passes, "{allowed:?} {sent:?}");
            if let Err(rejection) = checked {
                assert_eq!(rejection.code(), "cross_site_request");
                assert_eq!(rejection.status(), StatusCode::FORBIDDEN);
            }
        }
    }
}
