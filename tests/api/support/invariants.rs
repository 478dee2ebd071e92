//! The state invariants that every fault, crash and storm must leave intact,
//! in one place for faults.rs, outcomes.rs and storms.rs:
//!
//! - every live job (queued, downloading, rendering) has its replay object in the bucket;
//! - every job a client was told about (202) exists;
//! - every outbox event has its job and every job its event;
//! - an `Idempotency-Key` is `completed` only with the job (or skin) it answers with;
//! - no advisory lock is left held, and no idempotency claim outlives its request (unless its
//!   outcome stayed unknown; then a retry takes it over once stale);
//! - once the services are back, the outbox sweep gets every live job to the render queue;
//! - a retry with the same `Idempotency-Key` tells the truth.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use osurender_core::usecases::outbox;
use reqwest::{Response, StatusCode};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::app::{header, TestApp};
use crate::support::queue::{counts, exactly_once};
use crate::support::replays::render_form;
use crate::support::skins::{upload_form, V1};

/// How long a backend whose client vanished may take to finish its statement and let go.
const SETTLE: Duration = Duration::from_secs(5);

impl TestApp {
    /// After any fault: the state invariants hold, and every event is delivered exactly once
    /// once the services are back.
    pub(crate) async fn assert_nothing_lost(&self) {
        self.assert_consistent().await;
        self.assert_every_event_delivered().await;
    }

    /// The state invariants that must hold after any fault.
    pub(crate) async fn assert_consistent(&self) {
        let objects: HashSet<String> = self.replay_objects().await.into_iter().collect();
        let active: Vec<String> = self
            .column_with(
                "SELECT replay_key FROM jobs WHERE status IN ('queued', 'downloading', 'rendering')",
                &[],
            )
            .await;
        for key in active {
            assert!(
                objects.contains(&key),
                "active job without its replay {key}"
            );
        }
        assert_eq!(
            self.count(
                "SELECT count(*) FROM outbox_events o WHERE NOT EXISTS \
                 (SELECT FROM jobs j WHERE j.id = o.job_id)"
            )
            .await,
            0,
            "outbox event without its job"
        );
        assert_eq!(
            self.count(
                "SELECT count(*) FROM jobs j WHERE NOT EXISTS \
                 (SELECT FROM outbox_events o WHERE o.job_id = j.id)"
            )
            .await,
            0,
            "job without its event"
        );
        self.assert_keys_match_jobs().await;
        self.assert_no_advisory_locks().await;
        self.assert_counts_exact().await;
    }

    /// `job_counts` agrees with counting the jobs.
    pub(crate) async fn assert_counts_exact(&self) {
        let kept = self
            .job_counts("SELECT queued, rendering, anonymous_queued FROM job_counts")
            .await;
        let counted = self
            .job_counts(
                "SELECT count(*) FILTER (WHERE status = 'queued') AS queued, \
                        count(*) FILTER (WHERE status IN ('downloading', 'rendering')) \
                            AS rendering, \
                        count(*) FILTER (WHERE status = 'queued' AND client_ip NOT LIKE 'key:%') \
                            AS anonymous_queued \
                   FROM jobs",
            )
            .await;
        assert_eq!(kept, counted, "job_counts vs count(*)");
    }

    /// The one row of job counts `sql` selects.
    async fn job_counts(&self, sql: &str) -> JobCounts {
        let row = self.db.query_one(sql, &[]).await.unwrap();
        JobCounts {
            queued: row.get("queued"),
            rendering: row.get("rendering"),
            anonymous_queued: row.get("anonymous_queued"),
        }
    }

    /// A completed render key answers with a job that exists, and the very one it records.
    pub(crate) async fn assert_keys_match_jobs(&self) {
        let keys: Vec<String> = self
            .column_with(
                "SELECT key FROM idempotency_keys k
                  WHERE endpoint = 'render' AND status = 'completed'
                    AND (k.job_id IS NULL
                         OR NOT EXISTS (SELECT FROM jobs j WHERE j.id = k.job_id)
                         OR (k.response -> 'body' ->> 'job_id') IS DISTINCT FROM k.job_id::text)",
                &[],
            )
            .await;
        assert!(
            keys.is_empty(),
            "completed keys without their job: {keys:?}"
        );
    }

    /// A backend whose client vanished mid-statement finishes it and ends its transaction:
    /// give it a bounded moment, then no advisory lock of this database may be held.
    pub(crate) async fn assert_no_advisory_locks(&self) {
        let sql = "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                   WHERE l.locktype = 'advisory' AND d.datname = current_database()";
        let deadline = Instant::now() + SETTLE;
        while self.count(sql).await > 0 {
            assert!(Instant::now() < deadline, "an advisory lock is still held");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// No idempotency claim is still `in_progress`: every request that made one has been
    /// answered, and completed or released it.
    pub(crate) async fn assert_no_claim_left(&self) {
        let left: Vec<String> = self
            .column_with(
                "SELECT endpoint || ' ' || key FROM idempotency_keys WHERE status = 'in_progress'",
                &[],
            )
            .await;
        assert!(left.is_empty(), "claims left in progress: {left:?}");
    }

    /// Every job a client was told about (a 202's `job_id`) exists.
    pub(crate) async fn assert_told_jobs_exist(&self, told: &[String]) {
        for job in told {
            let found: i64 = self
                .scalar_with(
                    "SELECT count(*) FROM jobs WHERE id = $1::text::uuid",
                    &[job],
                )
                .await;
            assert_eq!(found, 1, "job {job} was answered 202 but does not exist");
        }
    }

    /// Once the services are back, the outbox sweep delivers every event exactly once.
    pub(crate) async fn assert_every_event_delivered(&self) {
        self.age_outbox().await;
        outbox::sweep(&self.instance().await).await.unwrap();
        assert_eq!(
            self.count("SELECT count(*) FROM outbox_events WHERE status <> 'dispatched'")
                .await,
            0
        );
        let delivered = self.drain_queue().await;
        assert_eq!(counts(&delivered), exactly_once(&self.event_ids().await));
    }

    /// Once the services are back (and whatever was killed mid-publish), the outbox sweep gets
    /// every live job to the render queue at least once (drained now or earlier: `drain_queue`
    /// records them): a publish whose outcome was lost is repeated, which the workers' event-id
    /// check absorbs.
    pub(crate) async fn assert_every_live_job_queued(&self) {
        self.age_outbox().await;
        outbox::sweep(&self.instance().await).await.unwrap();
        self.drain_queue().await;
        let delivered = self.delivered_jobs.lock().unwrap().clone();
        let live: Vec<String> = self
            .column_with(
                "SELECT id::text FROM jobs WHERE status IN ('queued', 'downloading', 'rendering')",
                &[],
            )
            .await;
        let missing: Vec<String> = live
            .into_iter()
            .filter(|id| !delivered.contains(id))
            .collect();
        assert!(missing.is_empty(), "live jobs never queued: {missing:?}");
    }

    /// The job this client made of this replay, if any (each test replay is unique).
    pub(crate) async fn job_of_replay(&self, client_key: &str, replay: &[u8]) -> Option<String> {
        let sha = Sha256::digest(replay).to_vec();
        self.db
            .query_opt(
                "SELECT id::text FROM jobs WHERE client_ip = $1 AND replay_sha256 = $2",
                &[&client_key, &sha],
            )
            .await
            .unwrap()
            .map(|row| row.get(0))
    }

    pub(crate) async fn replay_stored(&self, job_id: &str) -> bool {
        let key: String = self
            .scalar_with(
                "SELECT replay_key FROM jobs WHERE id = $1::text::uuid",
                &[&job_id],
            )
            .await;
        self.replay_objects().await.contains(&key)
    }

    /// `POST /v1/render` of `replay` with an `Idempotency-Key`.
    pub(crate) async fn render_with_key(
        &self,
        client_ip: &str,
        key: &str,
        replay: &[u8],
    ) -> Response {
        self.render_with_key_at(&self.url(""), client_ip, key, replay)
            .await
    }

    /// `render_with_key`, to the server at `base` (another one on this app's resources).
    pub(crate) async fn render_with_key_at(
        &self,
        base: &str,
        client_ip: &str,
        key: &str,
        replay: &[u8],
    ) -> Response {
        self.http
            .post(format!("{base}/v1/render"))
            .header("CF-Connecting-IP", client_ip)
            .header("Idempotency-Key", key)
            .multipart(render_form(replay.to_vec(), "play.osr", &[]))
            .send()
            .await
            .expect("request completes")
    }

    /// A retry of a keyed render (the first attempt's answer was `first`, a `job_id` if 202)
    /// tells the truth: the job the key's first request made, replayed with its id, if it
    /// exists; otherwise a fresh run (a new job, or a refusal with `Retry-After`). Never a 202
    /// for a job without its replay, never a 409 `duplicate_replay` naming the key's own job.
    /// A claim left `in_progress` (an unknown outcome, a killed process) is answered 409
    /// `idempotency_in_progress` with `Retry-After` until it is stale: within `patience` the
    /// retry must get through. Returns the job the retry answered with, if any.
    pub(crate) async fn assert_retry_tells_the_truth(
        &self,
        client_ip: &str,
        client_key: &str,
        key: &str,
        replay: &[u8],
        first: Option<&str>,
        patience: Duration,
    ) -> Option<String> {
        let base = self.url("");
        self.assert_retry_at_tells_the_truth(
            &base, client_ip, client_key, key, replay, first, patience,
        )
        .await
    }

    /// `assert_retry_tells_the_truth`, retrying at the server at `base`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn assert_retry_at_tells_the_truth(
        &self,
        base: &str,
        client_ip: &str,
        client_key: &str,
        key: &str,
        replay: &[u8],
        first: Option<&str>,
        patience: Duration,
    ) -> Option<String> {
        let give_up = Instant::now() + patience;
        loop {
            // The key's own job, if its first request made one: known before the retry runs.
            let own = self.job_of_replay(client_key, replay).await;
            if let Some(first) = first {
                assert_eq!(own.as_deref(), Some(first), "the 202'd job of key {key}");
            }
            let response = self.render_with_key_at(base, client_ip, key, replay).await;
            let status = response.status();
            let replayed = response.headers().get("idempotent-replayed").is_some();
            let retry_after = header(&response, "retry-after");
            let body: Value = response.json().await.unwrap_or(Value::Null);
            match status {
                StatusCode::ACCEPTED => {
                    let job = body["job_id"].as_str().expect("a job id").to_owned();
                    if replayed {
                        assert_eq!(
                            own.as_deref(),
                            Some(job.as_str()),
                            "key {key} replayed a job that is not its own: {body}"
                        );
                    } else {
                        assert_eq!(own, None, "key {key} ran afresh though its job exists");
                    }
                    assert!(
                        self.replay_stored(&job).await,
                        "key {key} answered 202 with job {job}, whose replay is missing"
                    );
                    return Some(job);
                }
                StatusCode::CONFLICT if body["code"] == "idempotency_in_progress" => {
                    let wait = retry_after.expect("409 idempotency_in_progress with Retry-After");
                    assert!(
                        Instant::now() < give_up,
                        "key {key} still in progress after {patience:?}"
                    );
                    tokio::time::sleep(Duration::from_secs(wait.clamp(1, 2))).await;
                }
                StatusCode::CONFLICT if body["code"] == "duplicate_replay" => {
                    let named = self.job_of_replay(client_key, replay).await;
                    assert_ne!(
                        body["job_id"].as_str(),
                        named.as_deref(),
                        "key {key}: a retry was told its own job is a duplicate: {body}"
                    );
                    panic!("key {key}: duplicate_replay naming another job: {body}");
                }
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                    assert!(
                        retry_after.is_some(),
                        "{status} without Retry-After: {body}"
                    );
                    assert_eq!(
                        own, None,
                        "key {key}: refused though its job exists: {body}"
                    );
                    return None;
                }
                other => panic!("key {key}: a retry answered {other}: {body}"),
            }
        }
    }

    /// A retry of a keyed skin upload tells the truth: 201 if the skin is (or now gets)
    /// stored; never 409 `skin_exists` for the skin the key's first request stored, never a
    /// 201 without the object. In-progress claims as for renders.
    pub(crate) async fn assert_skin_retry_tells_the_truth(
        &self,
        client_ip: &str,
        key: &str,
        name: &str,
        bytes: &[u8],
        patience: Duration,
    ) {
        let give_up = Instant::now() + patience;
        loop {
            let stored_before = self.skin_stored(name).await;
            let response = self
                .http
                .post(self.url(V1))
                .header("CF-Connecting-IP", client_ip)
                .header("Idempotency-Key", key)
                .multipart(upload_form(bytes.to_vec(), &format!("{name}.osk"), None))
                .send()
                .await
                .expect("request completes");
            let status = response.status();
            let retry_after = header(&response, "retry-after");
            let body: Value = response.json().await.unwrap_or(Value::Null);
            match status {
                StatusCode::CREATED => {
                    assert_eq!(body["skin"], name);
                    assert!(
                        self.skin_stored(name).await,
                        "201 for {name} without its object"
                    );
                    return;
                }
                StatusCode::CONFLICT if body["code"] == "idempotency_in_progress" => {
                    let wait = retry_after.expect("409 idempotency_in_progress with Retry-After");
                    assert!(
                        Instant::now() < give_up,
                        "key {key} still in progress after {patience:?}"
                    );
                    tokio::time::sleep(Duration::from_secs(wait.clamp(1, 2))).await;
                }
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert!(retry_after.is_some(), "503 without Retry-After: {body}");
                    assert!(!stored_before, "key {key}: refused though {name} is stored");
                    return;
                }
                // Nothing stored, but the name held by a claim whose statement arrived after
                // its request gave up: no upload owns it, and it answers `skin_exists` until it
                // goes stale (docs/RELIABILITY.md). Not this key's skin, so not a lie about it.
                StatusCode::CONFLICT
                    if body["code"] == "skin_exists"
                        && !stored_before
                        && !self.skin_stored(name).await =>
                {
                    return;
                }
                other => panic!(
                    "key {key}: a retry of the upload of {name} answered {other} \
                     (stored before the retry: {stored_before}): {body}"
                ),
            }
        }
    }

    pub(crate) async fn skin_stored(&self, name: &str) -> bool {
        self.replay_objects()
            .await
            .contains(&format!("skins/{name}.osk"))
    }

    /// Skins: every name the registry holds as stored has its object; every completed skin key
    /// answers with a stored skin.
    pub(crate) async fn assert_skins_consistent(&self) {
        let objects: HashSet<String> = self.replay_objects().await.into_iter().collect();
        let stored: Vec<String> = self
            .column_with("SELECT name FROM skins WHERE stored_at IS NOT NULL", &[])
            .await;
        for name in stored {
            assert!(
                objects.contains(&format!("skins/{name}.osk")),
                "skin {name} registered as stored without its object"
            );
        }
        let completed = self
            .db
            .query(
                "SELECT key, response -> 'body' ->> 'skin' AS skin FROM idempotency_keys
                  WHERE endpoint <> 'render' AND status = 'completed'",
                &[],
            )
            .await
            .unwrap();
        for row in completed {
            let key: String = row.get("key");
            let name: String = row.get::<_, Option<String>>("skin").unwrap_or_default();
            assert!(
                objects.contains(&format!("skins/{name}.osk")),
                "key {key} answers with skin {name}, which is not stored"
            );
        }
        self.assert_no_advisory_locks().await;
    }
}

/// The jobs counted queued, rendering (or downloading), and queued for anonymous clients.
#[derive(Debug, PartialEq)]
struct JobCounts {
    queued: i64,
    rendering: i64,
    anonymous_queued: i64,
}
