//! Running the core's routes as a Lambda function behind API Gateway.

use std::net::IpAddr;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use lambda_http::request::RequestContext;
use lambda_http::RequestExt;

use crate::http::PeerAddr;

/// Serves `router` on the Lambda Runtime API, with API Gateway's source IP as the peer.
pub async fn run(router: Router) -> Result<(), lambda_http::Error> {
    lambda_http::run(router.layer(middleware::from_fn(peer_from_request_context))).await
}

async fn peer_from_request_context(mut request: Request, next: Next) -> Response {
    if let Some(ip) = source_ip(&request) {
        request.extensions_mut().insert(PeerAddr(ip));
    }
    next.run(request).await
}

/// `requestContext.identity.sourceIp` (REST API) or `requestContext.http.sourceIp` (HTTP API).
fn source_ip(request: &Request) -> Option<IpAddr> {
    let source = match request.request_context_ref()? {
        RequestContext::ApiGatewayV1(ctx) => ctx.identity.source_ip.as_deref(),
        RequestContext::ApiGatewayV2(ctx) => ctx.http.source_ip.as_deref(),
        _ => None,
    }?;
    source.parse().ok()
}
