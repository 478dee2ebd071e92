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
use serde_json::Value;

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

#[tokio::test]
async fn a_browser_follows_a_jobs_progress_over_its_own_websocket() {
    let wakes = wake_queue().await;
    let app = TestApp::spawn(&[
        ("SIMULATE_WORKERS", "1"),
        ("RENDER_SPEED", "40"),
        ("RENDER_OVERHEAD_SECS", "0"),
        ("RELEASE_AHEAD", "0"),
        ("OUTBOX_SWEEP_INTERVAL", "1"),
        ("CALLBACK_WAKE_QUEUE_URL", wakes.as_str()),
    ])
    .await;
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

    let completed = |frames: &[Value]| {
        frames
            .iter()
            .any(|f| f["type"] == "job" && f["job_id"] == job && f["status"] == "completed")
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !completed(&seen.lock().unwrap()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page saw no completion: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(browser);
    let _ = std::fs::remove_dir_all(&profile);

    let frames = seen.lock().unwrap().clone();
    assert_eq!(frames[0]["type"], "subscribed", "{frames:?}");
    let jobs: Vec<&Value> = frames.iter().filter(|f| f["type"] == "job").collect();
    let progress: Vec<f64> = jobs
        .iter()
        .map(|f| f["progress"].as_f64().unwrap())
        .collect();
    assert!(
        progress.windows(2).all(|pair| pair[0] <= pair[1]),
        "{progress:?}"
    );
    assert!(jobs.len() >= 3, "the page saw the job move: {jobs:?}");
    assert_eq!(progress.last(), Some(&100.0));
}
