//! What a bot polls besides its job: `GET /v1/status` (the service's load, public and cached)
//! and the artifact links that outlive their presigned URLs (`/v1/jobs/{id}/video`,
//! `/thumbnail`).

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{problem, TestApp};

/// A client that does not follow redirects: the 302 is the answer under test.
fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_status_shows_the_load_and_the_pause_from_one_read_per_interval() {
    let app = TestApp::spawn(&[("POLICY_CACHE_TTL", "1")]).await;
    let status = || async {
        let response = app.get("/v1/status").await;
        assert_eq!(response.status(), StatusCode::OK);
        let cache = response.headers()["cache-control"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(cache, "public, max-age=5");
        response.json::<Value>().await.unwrap()
    };
    let empty = status().await;
    assert_eq!(
        (&empty["intake"], &empty["queued"], &empty["max_queued"]),
        (&json!("open"), &json!(0), &json!(100))
    );
    assert!(empty["estimated_start_secs"].as_u64().is_some(), "{empty}");

    // Within the interval, the same read answers: a new job is not counted yet.
    app.submit("198.51.100.120").await;
    assert_eq!(status().await["queued"], 0);
    tokio::time::sleep(Duration::from_millis(5_100)).await;
    let later = status().await;
    assert_eq!(later["queued"], 1, "{later}");

    app.admin(&["pause", "--anonymous-only", "--reason", "maintenance"])
        .await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let paused = status().await;
    assert_eq!(
        (&paused["intake"], &paused["pause_reason"]),
        (&json!("paused_for_anonymous"), &json!("maintenance"))
    );
}

#[tokio::test]
async fn a_completed_jobs_artifact_links_redirect_to_fresh_presigned_urls() {
    let app = TestApp::spawn(&[]).await;
    let job = app.submit("198.51.100.121").await;
    let http = no_redirects();
    let get = |path: String| {
        let http = http.clone();
        let url = app.url(&path);
        async move {
            http.get(url)
                .header("CF-Connecting-IP", "198.51.100.122")
                .send()
                .await
                .unwrap()
        }
    };
    // Not completed yet: nothing to show.
    let early = get(format!("/v1/jobs/{job}/video")).await;
    let body = problem(early, StatusCode::NOT_FOUND, "not_found").await;
    assert!(
        body["detail"].as_str().unwrap().contains("queued"),
        "{body}"
    );

    let video_key = app.put_rendered_video(&job).await;
    app.report_ok(&job, json!({ "status": "rendering" })).await;
    app.report_ok(
        &job,
        json!({ "status": "completed", "video_key": video_key }),
    )
    .await;

    let links = app.job(&job).await["links"].clone();
    assert_eq!(
        links,
        json!({
            "self": app.url(&format!("/v1/jobs/{job}")),
            "video": app.url(&format!("/v1/jobs/{job}/video")),
            "events": app.events_url(),
        }),
        "a completed job links its video (and no thumbnail it has not)"
    );
    let redirect = get(format!("/v1/jobs/{job}/video")).await;
    assert_eq!(redirect.status(), StatusCode::FOUND);
    assert!(redirect.headers().contains_key("x-ratelimit-remaining"));
    let location = redirect.headers()["location"].to_str().unwrap().to_owned();
    assert!(location.contains("X-Amz-Signature"), "{location}");
    let video = reqwest::get(&location).await.unwrap();
    assert_eq!(video.bytes().await.unwrap().as_ref(), b"rendered video");

    // Rendered without a thumbnail; an unknown job; a malformed id.
    let none = get(format!("/v1/jobs/{job}/thumbnail")).await;
    problem(none, StatusCode::NOT_FOUND, "not_found").await;
    let unknown = get(format!("/v1/jobs/{}/video", uuid::Uuid::new_v4())).await;
    problem(unknown, StatusCode::NOT_FOUND, "not_found").await;
    let malformed = get("/v1/jobs/nope/thumbnail".to_owned()).await;
    problem(malformed, StatusCode::BAD_REQUEST, "invalid_job_id").await;
}
