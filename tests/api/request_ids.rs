//! Every answer names its request: `X-Request-Id` (a UUID made up per request on the dev
//! server; API Gateway's id on Lambda, tests in core's lambda_events.rs), and a problem's
//! `request_id` is the same; a client's own `X-Request-Id` is not taken. The request's log
//! lines carry that id, and Cloudflare's `CF-Ray` as `cf_ray` when the request has one.

use std::collections::HashSet;

use reqwest::{Method, Response, StatusCode};
use serde_json::Value;

use crate::support::app::{problem, within_one_minute, TestApp, LOGS};
use crate::support::replays::valid_form;

fn request_id(response: &Response) -> String {
    let id = response
        .headers()
        .get("x-request-id")
        .unwrap_or_else(|| panic!("{} without X-Request-Id", response.status()))
        .to_str()
        .unwrap()
        .to_owned();
    uuid::Uuid::parse_str(&id).unwrap_or_else(|e| panic!("`{id}` is no UUID: {e}"));
    id
}

/// The log lines (support/app.rs `LOGS`) of the request `id`, parsed; none when `RUST_LOG` sent
/// them to stdout.
fn log_lines_of(id: &str) -> Vec<Value> {
    let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
    logs.lines()
        .filter(|line| line.contains(id))
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// A server whose renders are limited to one a minute a client.
async fn one_render_a_minute() -> TestApp {
    TestApp::spawn(&[("RATE_LIMIT_RENDER", "1/minute")]).await
}

#[tokio::test]
async fn an_admission_and_a_read_each_name_their_own_request() {
    let app = one_render_a_minute().await;
    let mut seen = HashSet::new();
    let admitted = app.render("203.0.113.80", valid_form()).await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    let job: Value = {
        let id = request_id(&admitted);
        assert!(seen.insert(id));
        admitted.json().await.unwrap()
    };
    let job = job["job_id"].as_str().unwrap().to_owned();
    let read = app
        .http
        .get(app.url(&format!("/v1/jobs/{job}")))
        .header("CF-Connecting-IP", "203.0.113.80")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), StatusCode::OK);
    assert!(seen.insert(request_id(&read)));
}

/// Refusals of every kind, the middleware's and the fallbacks' among them.
#[tokio::test]
async fn every_refusal_names_its_own_request_in_its_problem_too() {
    let app = one_render_a_minute().await;
    // The second render counts in the first one's window.
    within_one_minute().await;
    let admitted = app.render("203.0.113.80", valid_form()).await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    let mut seen = HashSet::from([request_id(&admitted)]);
    let refusals: Vec<(Response, StatusCode, &str)> = vec![
        (
            app.render("203.0.113.80", valid_form()).await,
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
        ),
        (
            app.http
                .get(app.url("/v1/jobs/not-a-uuid"))
                .send()
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_job_id",
        ),
        (
            app.http.get(app.url("/nowhere")).send().await.unwrap(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            app.http
                .request(Method::DELETE, app.url("/v1/render"))
                .send()
                .await
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ];
    for (response, status, code) in refusals {
        let id = request_id(&response);
        let body = problem(response, status, code).await;
        assert_eq!(body["request_id"], id.as_str(), "{code}: {body}");
        assert!(seen.insert(id), "{code}: a fresh id per request");
    }
}

/// It could pose as another request in the logs.
#[tokio::test]
async fn a_clients_own_request_id_is_not_taken() {
    let app = one_render_a_minute().await;
    let earlier = app.http.get(app.url("/health")).send().await.unwrap();
    let mut seen = HashSet::from([request_id(&earlier)]);
    let forged = "00000000-0000-4000-8000-000000000000";
    let health = app
        .http
        .get(app.url("/health"))
        .header("X-Request-Id", forged)
        .send()
        .await
        .unwrap();
    let id = request_id(&health);
    assert_ne!(id, forged);
    assert!(seen.insert(id));
}

/// HEAD answers with the GET's headers, the request's own id among them.
#[tokio::test]
async fn a_head_answer_names_its_own_request_too() {
    let app = one_render_a_minute().await;
    let get = app.http.get(app.url("/health")).send().await.unwrap();
    let mut seen = HashSet::from([request_id(&get)]);
    let head = app.http.head(app.url("/health")).send().await.unwrap();
    assert!(seen.insert(request_id(&head)));
}

/// Cloudflare's `CF-Ray` is logged as the request's `cf_ray`, on every line of its span; a
/// header that is no ray (too long, other characters) is not.
#[tokio::test]
async fn the_request_id_and_cloudflares_ray_are_in_the_requests_log_lines() {
    let app = TestApp::spawn(&[]).await;
    let ray = "8f1c2d3e4a5b6c7d-AMS";
    let refused = app
        .http
        .get(app.url("/v1/jobs/not-a-uuid"))
        .header("CF-Ray", ray)
        .send()
        .await
        .unwrap();
    let id = request_id(&refused);
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let junk = format!("{}\"}}{{", "a".repeat(70));
    let mut plain_ids = Vec::new();
    for value in [junk.as_str(), "ray with spaces"] {
        let response = app
            .http
            .get(app.url("/health"))
            .header("CF-Ray", value)
            .send()
            .await
            .unwrap();
        plain_ids.push(request_id(&response));
    }
    let without = app.http.get(app.url("/health")).send().await.unwrap();
    plain_ids.push(request_id(&without));

    if std::env::var_os("RUST_LOG").is_some() {
        return; // the logs went to stdout: nothing to check here
    }
    let lines = log_lines_of(&id);
    let answered: Vec<&Value> = lines
        .iter()
        .filter(|line| line["fields"]["message"] == "request answered")
        .collect();
    assert_eq!(answered.len(), 1, "{lines:?}");
    let span = &answered[0]["span"];
    assert_eq!(span["request_id"], id.as_str(), "{span}");
    assert_eq!(span["cf_ray"], ray, "{span}");
    assert_eq!(span["route"], "/v1/jobs/{id}", "{span}");
    for id in plain_ids {
        let lines = log_lines_of(&id);
        assert!(!lines.is_empty(), "{id} is logged");
        for line in lines {
            assert!(line["span"].get("cf_ray").is_none(), "{line}");
        }
    }
}
