//! A real browser follows a job: headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs; `CHROMIUM` names another binary) opens a page this test serves, subscribes with
//! the browser's own `WebSocket`, and reports each frame it shows back to the test.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::Html;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::support::app::{accepted_job, wake_queue, TestApp};
use crate::support::replays::valid_form;

/// The page: it opens `events`, subscribes to `job`, shows each frame and posts it to `/seen`.
fn page(events: &str, job: &str) -> String {
    format!(
        r#"<!doctype html><meta charset="utf-8"><title>render</title><pre id="log"></pre>
<script>
const log = document.getElementById("log");
const report = (text) => fetch("/seen", {{ method: "POST", body: text }});
const socket = new WebSocket("{events}");
socket.onopen = () => socket.send(JSON.stringify({{ action: "subscribe", job_id: "{job}" }}));
socket.onmessage = (message) => {{
  const frame = JSON.parse(message.data);
  if (frame.type === "job") log.textContent += `${{frame.status}} ${{frame.progress}}%\n`;
  report(message.data);
}};
socket.onclose = () => report(JSON.stringify({{ type: "closed" }}));
</script>"#
    )
}

type Seen = Arc<Mutex<Vec<Value>>>;

/// The browser's process, killed however the test ends.
struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn serve_page(html: String, seen: Seen) -> String {
    let app = Router::new()
        .route("/", get(move || async move { Html(html) }))
        .route(
            "/seen",
            post(|State(seen): State<Seen>, body: String| async move {
                if let Ok(frame) = serde_json::from_str(&body) {
                    seen.lock().unwrap().push(frame);
                }
            }),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// Waits until the page has reported a frame that `done` accepts.
async fn until_seen(seen: &Seen, what: &str, done: impl Fn(&Value) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !seen.lock().unwrap().iter().any(&done) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page never showed {what}: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_browser_follows_a_jobs_progress_over_its_own_websocket() {
    let wakes = wake_queue().await;
    // The test plays the worker, after the page has subscribed: the page sees every step.
    let app = TestApp::spawn(&[("CALLBACK_WAKE_QUEUE_URL", wakes.as_str())]).await;
    let job = accepted_job(app.render("198.51.100.40", valid_form()).await).await;
    let seen = Seen::default();
    let url = serve_page(page(&app.events_url(), &job), seen.clone()).await;

    let profile = std::env::temp_dir().join(format!("osurender-chromium-{}", uuid::Uuid::new_v4()));
    let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".to_owned());
    let browser = Command::new(&binary)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(&url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Browser)
        .unwrap_or_else(|error| panic!("starting {binary} (apt-get install chromium): {error}"));

    let state = |status: &'static str| {
        let job = job.clone();
        move |frame: &Value| {
            frame["type"] == "job" && frame["job_id"] == job && frame["status"] == status
        }
    };
    until_seen(&seen, "its queued state", state("queued")).await;
    app.report_ok(&job, json!({ "status": "downloading", "progress": 40 }))
        .await;
    until_seen(&seen, "downloading", state("downloading")).await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 50 }))
        .await;
    until_seen(&seen, "rendering", state("rendering")).await;
    let video_key = app.put_rendered_video(&job).await;
    app.report_ok(
        &job,
        json!({ "status": "completed", "video_key": video_key, "thumb_key": "renders/t.jpg" }),
    )
    .await;
    until_seen(&seen, "completed", state("completed")).await;
    drop(browser);
    let _ = std::fs::remove_dir_all(&profile);

    let frames = seen.lock().unwrap().clone();
    assert_eq!(frames[0]["type"], "subscribed", "{frames:?}");
    let jobs: Vec<&Value> = frames.iter().filter(|f| f["type"] == "job").collect();
    let statuses: Vec<&str> = jobs.iter().map(|f| f["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["queued", "downloading", "rendering", "completed"]
    );
    let sequences: Vec<i64> = jobs
        .iter()
        .map(|f| f["sequence"].as_i64().unwrap())
        .collect();
    assert!(
        sequences.windows(2).all(|pair| pair[0] < pair[1]),
        "{sequences:?}"
    );
    assert_eq!(jobs[2]["progress"], 50.0);
    assert!(
        jobs[3]["links"]["video"].as_str().is_some(),
        "{:?}",
        jobs[3]
    );
}
