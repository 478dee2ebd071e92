//! `events` on Lambda: API Gateway's WebSocket routes (`$connect`, `$disconnect`, `subscribe`,
//! `unsubscribe`, `$default`) through the live events' use case. Every event is answered, a
//! malformed one with a 400: nothing here fails the invocation.

use std::collections::HashMap;
use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::IntoResponse;
use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use super::Error;
use crate::domain::events::ConnectionId;
use crate::entry::http::ORIGIN_SECRET_HEADER;
use crate::support::problem::Rejection;
use crate::usecases::events;
use crate::App;

/// What API Gateway is answered: on `$connect`, a status other than 200 refuses the
/// connection with it (and its headers); on other routes it is only logged by the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayAnswer {
    #[serde(rename = "statusCode")]
    pub status: u16,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub headers: HashMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub body: String,
}

impl GatewayAnswer {
    fn ok() -> Self {
        Self::status(200)
    }

    fn status(status: u16) -> Self {
        Self {
            status,
            headers: HashMap::new(),
            body: String::new(),
        }
    }

    /// A refusal's problem+json, as an HTTP route answers it.
    async fn refused(rejection: Rejection) -> Self {
        let response = rejection.into_response();
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect();
        let body = axum::body::to_bytes(response.into_body(), 16 * 1024)
            .await
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default();
        Self {
            status,
            headers,
            body,
        }
    }
}

/// One WebSocket event.
pub async fn websocket_event(app: App, event: Value) -> Result<GatewayAnswer, Error> {
    let context = &event["requestContext"];
    let Some(id) = context["connectionId"]
        .as_str()
        .and_then(|id| ConnectionId::parse(id).ok())
    else {
        tracing::warn!("a WebSocket event without a connection id");
        return Ok(GatewayAnswer::status(400));
    };
    Ok(match context["routeKey"].as_str().unwrap_or_default() {
        "$connect" => match connect(&app, &id, &event).await {
            Ok(()) => GatewayAnswer::ok(),
            Err(rejection) => GatewayAnswer::refused(rejection).await,
        },
        "$disconnect" => {
            events::disconnect(&app, &id).await;
            GatewayAnswer::ok()
        }
        _ => {
            events::receive(&app, &id, &body(&event)).await;
            GatewayAnswer::ok()
        }
    })
}

/// `$connect`: only from our edge when the origin is closed (`CF_ORIGIN_SECRET`, as every HTTP
/// route), then counted in the caller's connect windows.
async fn connect(app: &App, id: &ConnectionId, event: &Value) -> Result<(), Rejection> {
    let headers = headers(event);
    if let Some(secret) = &app.origin_secret {
        let presented = headers
            .get(ORIGIN_SECRET_HEADER)
            .ok_or(Rejection::OriginForbidden)?;
        match secret.matches(presented.as_bytes()).await {
            Ok(true) => {}
            Ok(false) => return Err(Rejection::OriginForbidden),
            Err(_) => return Err(Rejection::SecretUnavailable),
        }
    }
    let peer = event["requestContext"]["identity"]["sourceIp"]
        .as_str()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
        .ok_or_else(|| Rejection::InvalidBody("the connection has no source address".into()))?;
    events::connect(app, id, &app.anonymous_caller(peer, &headers)).await
}

/// The upgrade request's headers (`$connect` only carries them), names lowercased.
fn headers(event: &Value) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(given) = event["headers"].as_object() else {
        return headers;
    };
    for (name, value) in given {
        let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes());
        let value = value.as_str().map(HeaderValue::from_str);
        if let (Ok(name), Some(Ok(value))) = (name, value) {
            headers.insert(name, value);
        }
    }
    headers
}

/// A frame's bytes: the event's body, decoded when the gateway sent it base64 (a binary frame).
fn body(event: &Value) -> Vec<u8> {
    let text = event["body"].as_str().unwrap_or_default();
    match event["isBase64Encoded"].as_bool() {
        Some(true) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default(),
        _ => text.as_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::config::Config;
    use serde_json::json;

    fn event(route: &str, body: &str) -> Value {
        json!({
            "requestContext": {
                "routeKey": route,
                "eventType": "MESSAGE",
                "connectionId": "L0SM9cOFvHcCIhw=",
                "identity": {"sourceIp": "203.0.113.9"}
            },
            "headers": {"Host": "x.execute-api.us-east-1.amazonaws.com"},
            "body": body,
            "isBase64Encoded": false
        })
    }

    #[tokio::test]
    async fn every_event_is_answered_without_failing() {
        let (app, _memory) = App::in_memory(Config::from_lookup(|_| None).unwrap());
        for junk in [
            json!({}),
            json!({"requestContext": {"connectionId": ""}}),
            json!(7),
        ] {
            let answer = websocket_event(app.clone(), junk).await.unwrap();
            assert_eq!(answer.status, 400);
        }
        let answer = websocket_event(app.clone(), event("$connect", "")).await;
        assert_eq!(answer.unwrap().status, 200);
        let answer = websocket_event(app.clone(), event("$default", "not json")).await;
        assert_eq!(answer.unwrap().status, 200);
        let answer = websocket_event(app.clone(), event("$disconnect", "")).await;
        assert_eq!(answer.unwrap().status, 200);
    }

    #[tokio::test]
    async fn a_connect_over_the_limit_is_refused_with_429() {
        let config = Config::from_lookup(|name| {
            (name == "RATE_LIMIT_EVENTS_CONNECT").then(|| "1/minute".to_owned())
        });
        let (app, _memory) = App::in_memory(config.unwrap());
        let first = websocket_event(app.clone(), event("$connect", "")).await;
        assert_eq!(first.unwrap().status, 200);
        let second = websocket_event(app, event("$connect", "")).await.unwrap();
        assert_eq!(second.status, 429);
        assert!(second.headers.contains_key("retry-after"), "{second:?}");
        assert!(second.body.contains("rate_limited"), "{second:?}");
    }

    #[test]
    fn a_binary_frame_is_decoded() {
        let mut event = event("$default", "eyJhIjoxfQ==");
        event["isBase64Encoded"] = json!(true);
        assert_eq!(body(&event), br#"{"a":1}"#);
    }
}
