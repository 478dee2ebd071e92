//! Jobs as clients and workers see them: submissions, status reads, and the signed reports a
//! render worker sends.

use std::time::{SystemTime, UNIX_EPOCH};

use osurender_core::usecases::lifecycle::sign;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};
use tokio_postgres::Row;

use crate::support::app::{accepted_job, TestApp, WEBHOOK_SECRET};
use crate::support::keys::TestKey;
use crate::support::replays::valid_form;

/// Epoch seconds, as a report's `timestamp`.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A nonce no report has used.
pub fn fresh_nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A report's body as a worker signs it for job `job_id`: `fields` stamped now, naming the job
/// and with a fresh nonce unless they carry their own (a `job_id` of `null` is left out).
pub fn signed_body(job_id: &str, mut fields: Value) -> String {
    fields["timestamp"] = json!(now());
    if fields.get("nonce").is_none() {
        fields["nonce"] = json!(fresh_nonce());
    }
    match fields.get("job_id") {
        None => fields["job_id"] = json!(job_id),
        Some(Value::Null) => drop(fields.as_object_mut().unwrap().remove("job_id")),
        Some(_) => {}
    }
    fields.to_string()
}

/// The client `TestApp::get` reads as.
pub const READER: &str = "198.51.100.200";

/// The job ids of a `GET /v1/jobs` page, in its order.
pub fn item_ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("a page has items")
        .iter()
        .map(|job| job["job_id"].as_str().unwrap().to_owned())
        .collect()
}

/// A job as its row records it.
#[derive(Debug)]
pub struct JobRow {
    pub status: String,
    /// The client key the job counts against (`client_ip` for an address, `key:<id>`).
    pub client_ip: String,
    pub replay_key: String,
    pub skin: String,
}

impl JobRow {
    pub fn from_row(row: &Row) -> Self {
        JobRow {
            status: row.get("status"),
            client_ip: row.get("client_ip"),
            replay_key: row.get("replay_key"),
            skin: row.get("skin"),
        }
    }
}

impl TestApp {
    /// Job `job_id`'s row.
    pub async fn job_row(&self, job_id: &str) -> JobRow {
        let row = self
            .db
            .query_one(
                "SELECT status::text AS status, client_ip, replay_key, skin FROM jobs \
                 WHERE id = $1::text::uuid",
                &[&job_id],
            )
            .await
            .unwrap();
        JobRow::from_row(&row)
    }

    /// Submits a valid replay for `client_ip`; the new job's id.
    pub async fn submit(&self, client_ip: &str) -> String {
        accepted_job(self.render(client_ip, valid_form()).await).await
    }

    /// `GET path` from a client of its own (`READER`, which submits nothing: its read quota
    /// is the tests' to spend).
    pub async fn get(&self, path: &str) -> Response {
        self.get_as(READER, path).await
    }

    /// `GET path` as if Cloudflare forwarded it for `client_ip`.
    pub async fn get_as(&self, client_ip: &str, path: &str) -> Response {
        self.http
            .get(self.url(path))
            .header("CF-Connecting-IP", client_ip)
            .send()
            .await
            .unwrap()
    }

    /// `key`'s `GET /v1/jobs{query}` page (a listing needs a key), which must be a 200.
    pub async fn list_as(&self, key: &TestKey, query: &str) -> Value {
        let response = self
            .get_with(READER, &key.bearer, &format!("/v1/jobs{query}"))
            .await;
        assert_eq!(response.status(), StatusCode::OK, "{query}");
        response.json().await.unwrap()
    }

    pub async fn job(&self, job_id: &str) -> Value {
        let response = self.get(&format!("/v1/jobs/{job_id}")).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    pub async fn post_webhook(
        &self,
        job_id: &str,
        body: &str,
        signature: Option<&str>,
    ) -> Response {
        let mut request = self
            .http
            .post(self.url(&format!("/v1/jobs/{job_id}/webhook")))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(signature) = signature {
            request = request.header("X-Signature", signature);
        }
        request.send().await.unwrap()
    }

    /// A report on `job_id` as a worker sends it (`signed_body`), signed.
    pub async fn report(&self, job_id: &str, fields: Value) -> Response {
        let body = signed_body(job_id, fields);
        let signature = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
        self.post_webhook(job_id, &body, Some(&signature)).await
    }

    /// What a worker stores before it reports `completed`: `renders/{job}.mp4` in the artifact
    /// bucket, holding "rendered video". Its key.
    pub async fn put_rendered_video(&self, job_id: &str) -> String {
        let video_key = format!("renders/{job_id}.mp4");
        self.s3
            .put_object()
            .bucket(&self.config.aws.artifact_bucket)
            .key(&video_key)
            .body(b"rendered video".to_vec().into())
            .send()
            .await
            .unwrap();
        video_key
    }

    pub async fn report_ok(&self, job_id: &str, fields: Value) {
        let response = self.report(job_id, fields.clone()).await;
        assert_eq!(response.status(), StatusCode::OK, "{fields}");
    }
}
