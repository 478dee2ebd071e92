//! `--simulate-workers`: stands in for the render farm, so a local user sees a job's whole
//! lifecycle and watches positions and estimates move. It is a farm of `RENDER_SLOTS` workers:
//! each takes one message from the render queue when it is free (dropping redelivered events
//! by id) and walks its job through signed webhook reports, downloading → rendering →
//! completed, leaving small placeholder objects under the keys it reports. A job renders for
//! its expected render-seconds (the replay's length plus `RENDER_OVERHEAD_SECS`) divided by
//! `RENDER_SPEED`: the farm renders at the speed the estimates assume before they have
//! measured it (`infra/run-local` sets 20, so a 3-minute replay takes about 10 s).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use osurender_core::domain::farm::RenderCost;
use osurender_core::entry::http::ORIGIN_SECRET_HEADER;
use osurender_core::support::config::SecretSource;
use osurender_core::usecases::lifecycle::{sign, SIGNATURE_HEADER};
use osurender_core::{App, Clients};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Pause after a failed poll.
const STEP: Duration = Duration::from_millis(400);
const RENDER_STEPS: [f64; 4] = [0.0, 25.0, 50.0, 75.0];
/// Long polling keeps an idle simulator from spinning.
const POLL_WAIT_SECS: i32 = 1;

pub struct Simulator {
    pub app: App,
    /// The render queue and the artifact bucket are the workers', not the API's.
    pub clients: Clients,
    pub queue_url: String,
    /// Where the server's webhook listens, e.g. `http://127.0.0.1:3000`.
    pub base_url: String,
    pub secret: String,
}

impl Simulator {
    /// Consumes the queue until the runtime stops, one message per free worker.
    pub fn spawn(self) {
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .default_headers(through_the_edge(&self.app))
                .build()
                .unwrap_or_default();
            let slots = usize::try_from(self.app.config.capacity.render_slots).unwrap_or(1);
            let workers = Arc::new(Semaphore::new(slots.max(1)));
            let mut seen = HashSet::new();
            loop {
                let Ok(worker) = workers.clone().acquire_owned().await else {
                    return;
                };
                if let Err(error) = self.poll(&http, &mut seen, worker).await {
                    tracing::warn!(%error, "simulated worker could not read the queue");
                    tokio::time::sleep(STEP).await;
                }
            }
        });
    }

    /// One free worker takes one message, if there is one.
    async fn poll(
        &self,
        http: &reqwest::Client,
        seen: &mut HashSet<i64>,
        worker: OwnedSemaphorePermit,
    ) -> anyhow::Result<()> {
        let sqs = &self.clients.sqs;
        let received = sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(POLL_WAIT_SECS)
            .send()
            .await?;
        let mut worker = Some(worker);
        for message in received.messages() {
            let event: Value = serde_json::from_str(message.body().unwrap_or_default())?;
            let (Some(event_id), Some(job_id)) =
                (event["event_id"].as_i64(), event["job_id"].as_str())
            else {
                tracing::warn!(%event, "simulated worker skipped a message it does not understand");
                continue;
            };
            if let (true, Some(worker)) = (seen.insert(event_id), worker.take()) {
                let length_ms = event["payload"]["replay"]["length_ms"].as_i64();
                let render = self.render_time(length_ms.unwrap_or_default());
                tokio::spawn(self.walk(http.clone(), job_id.to_owned(), render, worker));
            }
            if let Some(handle) = message.receipt_handle() {
                sqs.delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(handle)
                    .send()
                    .await?;
            }
        }
        Ok(())
    }

    /// How long a job of a replay `length_ms` long renders on this farm.
    fn render_time(&self, length_ms: i64) -> Duration {
        let config = &self.app.config;
        let cost = RenderCost::of(length_ms, config.capacity.render_overhead);
        Duration::from_secs_f64(cost.secs() / config.capacity.render_speed)
    }

    /// One job's reports, in order, spread over its render time; stops at the first one
    /// refused (an expired job, say). The worker is free again when it returns.
    fn walk(
        &self,
        http: reqwest::Client,
        job_id: String,
        render: Duration,
        worker: OwnedSemaphorePermit,
    ) -> impl std::future::Future<Output = ()> {
        let app = self.app.clone();
        let s3 = self.clients.s3.clone();
        let url = format!("{}/v1/jobs/{job_id}/webhook", self.base_url);
        let secret = self.secret.clone();
        async move {
            let _worker = worker;
            let video_key = format!("renders/{job_id}.mp4");
            let thumb_key = format!("renders/{job_id}.jpg");
            if !send(
                &http,
                &url,
                &secret,
                &job_id,
                json!({ "status": "downloading", "progress": 0 }),
            )
            .await
            {
                return;
            }
            let step = render / (RENDER_STEPS.len() as u32 + 1);
            for progress in RENDER_STEPS {
                tokio::time::sleep(step).await;
                let report = json!({ "status": "rendering", "progress": progress });
                if !send(&http, &url, &secret, &job_id, report).await {
                    return;
                }
            }
            tokio::time::sleep(step).await;
            for (key, bytes) in [(&video_key, "not a video"), (&thumb_key, "not a thumbnail")] {
                let put = s3
                    .put_object()
                    .bucket(&app.config.aws.artifact_bucket)
                    .key(key)
                    .body(bytes.as_bytes().to_vec().into())
                    .send()
                    .await;
                if let Err(error) = put {
                    tracing::warn!(%error, key, "simulated worker could not store an artifact");
                }
            }
            let done =
                json!({ "status": "completed", "video_key": video_key, "thumb_key": thumb_key });
            send(&http, &url, &secret, &job_id, done).await;
        }
    }
}

/// What our edge adds to every request it forwards (the origin secret, when the server wants
/// one): real workers reach the webhook through it.
fn through_the_edge(app: &App) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Some(SecretSource::Fixed { current, .. }) = &app.config.secrets.origin {
        if let Ok(value) = HeaderValue::from_str(current) {
            headers.insert(ORIGIN_SECRET_HEADER, value);
        }
    }
    headers
}

/// Signs and posts one report, stamped now with a fresh nonce; whether it was applied.
async fn send(
    http: &reqwest::Client,
    url: &str,
    secret: &str,
    job_id: &str,
    mut report: Value,
) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    report["timestamp"] = json!(now);
    report["nonce"] = json!(uuid::Uuid::new_v4().simple().to_string());
    report["job_id"] = json!(job_id);
    let body = report.to_string();
    let sent = http
        .post(url)
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, sign(secret.as_bytes(), body.as_bytes()))
        .body(body)
        .send()
        .await;
    match sent {
        Ok(response) if response.status().is_success() => true,
        Ok(response) => {
            tracing::info!(job_id, status = %response.status(), "simulated worker's report refused; dropping the job");
            false
        }
        Err(error) => {
            tracing::warn!(job_id, %error, "simulated worker could not reach the webhook");
            false
        }
    }
}
