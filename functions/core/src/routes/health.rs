//! `GET /health`: whether this function can reach what it depends on, as its last probe found
//! (at most `HEALTH_CHECK_INTERVAL` old, health.rs). The body names each dependency with `ok` or
//! `unavailable`; a 503 says when to look again.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::support::problem::RETRY_UNAVAILABLE_SECS;
use crate::usecases::app::App;

pub async fn handler(State(app): State<App>) -> Response {
    let results = app.health.checks().await;
    let healthy = results.iter().all(|(_, ok)| *ok);
    let checks: Map<String, Value> = results
        .iter()
        .map(|&(name, ok)| {
            (
                name.to_owned(),
                json!(if ok { "ok" } else { "unavailable" }),
            )
        })
        .collect();
    let (status, word) = if healthy {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    };
    let mut response = (status, Json(json!({ "status": word, "checks": checks }))).into_response();
    if !healthy {
        // Every 503 says when to look again; an outage hint, as for the API's own 503s.
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(RETRY_UNAVAILABLE_SECS),
        );
    }
    response
}
