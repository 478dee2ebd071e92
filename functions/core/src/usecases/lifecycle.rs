//! `POST /v1/jobs/{id}/webhook`: render workers report progress and results.
//!
//! A report is a JSON body `{job_id, status, progress, video_key, thumb_key, error, timestamp,
//! nonce}` signed with HMAC-SHA256 under the webhook secret (`WEBHOOK_SECRET`, or on AWS the
//! Secrets Manager secret `WEBHOOK_SECRET_ARN`, its current or previous version), hex in
//! `X-Signature`. The checks run cheapest first and nothing is written before the signature, the
//! job, the fields and the timestamp pass; then one statement spends the nonce and applies the
//! transition (`jobs::transition`). So a forged, stale, replayed, re-targeted or illegal report
//! changes no job: the signed `job_id` must be the URL's, so a captured report cannot move
//! another job.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use crate::domain::failure::FailureCode;
use crate::domain::job::{JobId, JobStatus};
use crate::ports::jobs::{JobReport, Nonce, Transition, TransitionOutcome};
use crate::support::problem::Rejection;
use crate::usecases::app::App;
use crate::usecases::callbacks;
use crate::usecases::outbox;
use crate::usecases::request::epoch_secs;
use crate::usecases::secrets::{RotatingSecret, SecretUnavailable};

/// Reports are a few hundred bytes; this leaves room for long keys and error texts.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// How far a report's timestamp may be from our clock, either way.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// Nonces are kept this much past the skew, for clock differences between our instances and
/// the database, whose clock expires them.
const NONCE_SLACK: Duration = Duration::from_secs(60);
const NONCE_LEN: std::ops::RangeInclusive<usize> = 8..=128;
/// The longest S3 key.
const MAX_KEY_BYTES: usize = 1024;
const MAX_ERROR_CHARS: usize = 2000;
const DEFAULT_ERROR: &str = "render failed";

pub const SIGNATURE_HEADER: &str = "x-signature";

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error(
        "neither WEBHOOK_SECRET nor WEBHOOK_SECRET_ARN is set: the job webhook cannot verify \
         reports without one"
    )]
    Missing,
}

/// Checks report signatures under the webhook secret's current and previous values (so a
/// rotation needs no redeploy, and workers still signing with the old key keep working). Only
/// built with a secret, so the webhook cannot run without one.
#[derive(Clone)]
pub struct Verifier {
    secret: RotatingSecret,
}

impl Verifier {
    /// The webhook secret the configuration names; one kept in Secrets Manager is read now (a
    /// failure is logged, and reports answer 503 until a read succeeds).
    pub async fn from_app(app: &App) -> Result<Self, SecretError> {
        let source = app
            .config
            .secrets
            .webhook
            .as_ref()
            .ok_or(SecretError::Missing)?;
        let secret = RotatingSecret::new(
            source,
            app.secrets.clone(),
            app.config.secrets.refresh_interval,
        );
        secret.read().await;
        Ok(Self { secret })
    }

    /// Whether `signature` is the body's HMAC under the current or the previous secret.
    pub async fn verify(&self, body: &[u8], signature: &str) -> Result<bool, SecretUnavailable> {
        self.secret
            .check(|key| signature_matches(key, body, signature))
            .await
    }
}

/// Whether `signature` (hex, either case) is the HMAC of `body` under `key`, compared in
/// constant time.
pub fn signature_matches(key: &[u8], body: &[u8], signature: &str) -> bool {
    let Ok(expected) = hex::decode(signature.trim()) else {
        return false;
    };
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key");
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The `X-Signature` of `body` under `secret`, as a worker computes it.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// A worker's report as sent. Unknown fields are ignored, so workers can send more.
#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    pub status: JobStatus,
    pub progress: Option<f64>,
    pub video_key: Option<String>,
    pub thumb_key: Option<String>,
    pub error: Option<String>,
    /// Why a failed render failed, from the documented set (domain/failure.rs); a code this
    /// service does not know is `render_failed`.
    pub error_code: Option<String>,
    /// Epoch seconds when the worker signed the report.
    pub timestamp: i64,
    pub nonce: String,
    /// The job the worker reports on: required, and it must be the URL's (`check_job`). An
    /// `Option` only so its absence is told apart (400) from a malformed value (422).
    pub job_id: Option<JobId>,
}

/// A report for job `id`: its signature (the `X-Signature` header), then its fields, freshness
/// and nonce, then the transition, in one statement. The new state and progress.
pub async fn receive(
    app: &App,
    verifier: &Verifier,
    id: JobId,
    signature: Option<&str>,
    body: &[u8],
) -> Result<(JobStatus, f32), Rejection> {
    check_signature(verifier, signature, body).await?;
    let report = parse_report(body)?;
    check_job(&report, id)?;
    let transition = check_report(&report, app.config.lifecycle.render_stall_timeout)?;
    let nonce = check_freshness(&report, epoch_secs() as i64)?;
    let outcome = app
        .transitions
        .transition(&JobReport {
            id,
            transition: &transition,
            nonce: &nonce,
        })
        .await
        .map_err(|error| {
            // The job's id as a field of the log line, which `into_rejection` has no room for.
            tracing::error!(%error, %id, "webhook transition failed");
            Rejection::DatabaseUnavailable
        })?;
    match outcome {
        TransitionOutcome::Applied {
            status,
            progress,
            calls_back,
            pushes,
        } => {
            tracing::info!(%id, %status, progress, "job updated by its worker");
            // A job that ended frees its slot: the farm takes the next job in fair order.
            let release = async {
                if !status.is_active() {
                    outbox::release_to_farm(app).await;
                }
            };
            let wake = async {
                // The dispatcher sends callbacks and live-event pushes alike.
                if calls_back || pushes {
                    callbacks::wake_dispatcher(app).await;
                }
            };
            tokio::join!(release, wake);
            Ok((status, progress))
        }
        TransitionOutcome::NonceReused => Err(Rejection::NonceReused),
        TransitionOutcome::UnknownJob => Err(Rejection::NotFound(format!("no job {id}"))),
        TransitionOutcome::Illegal { current } => Err(Rejection::IllegalTransition(format!(
            "the job is {current}; a report cannot move it to {}",
            transition.to
        ))),
    }
}

async fn check_signature(
    verifier: &Verifier,
    signature: Option<&str>,
    body: &[u8],
) -> Result<(), Rejection> {
    let signature = signature.ok_or(Rejection::InvalidSignature)?;
    match verifier.verify(body, signature).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(Rejection::InvalidSignature),
        Err(SecretUnavailable) => Err(Rejection::SecretUnavailable),
    }
}

/// Malformed JSON is a 400; well-formed JSON with a wrong field (an unknown status, a string
/// for a number) is a 422 naming it.
fn parse_report(body: &[u8]) -> Result<Report, Rejection> {
    serde_json::from_slice(body).map_err(|error| match error.classify() {
        serde_json::error::Category::Data => Rejection::InvalidField(error.to_string()),
        _ => Rejection::InvalidBody(format!("the report is not JSON: {error}")),
    })
}

/// The signature covers `job_id`, so a report applies to the job it names and no other: a
/// report without one is malformed (400), one naming another job is refused (403 `wrong_job`).
pub fn check_job(report: &Report, id: JobId) -> Result<(), Rejection> {
    match report.job_id {
        None => Err(Rejection::InvalidBody(
            "the report must name its job: `job_id`, signed with the rest".into(),
        )),
        Some(named) if named != id => Err(Rejection::WrongJob),
        Some(_) => Ok(()),
    }
}

/// The report's fields, as the transition to apply. Keys come only with `completed` (which
/// needs `video_key`), an error only with `failed`; a completed job is at 100 %.
pub fn check_report(report: &Report, stall_timeout: Duration) -> Result<Transition, Rejection> {
    let invalid = |reason: &str| Rejection::InvalidField(reason.to_owned());
    let progress = match report.progress {
        Some(p) if !(0.0..=100.0).contains(&p) => {
            return Err(invalid("progress: must be a number from 0 to 100"))
        }
        p => p.map(|p| p as f32),
    };
    for (name, key) in [
        ("video_key", &report.video_key),
        ("thumb_key", &report.thumb_key),
    ] {
        match key {
            Some(_) if report.status != JobStatus::Completed => {
                return Err(invalid(&format!("{name}: only a completed report has one")))
            }
            Some(key) if key.is_empty() || key.len() > MAX_KEY_BYTES => {
                return Err(invalid(&format!(
                    "{name}: must be an S3 key of 1 to {MAX_KEY_BYTES} bytes"
                )))
            }
            _ => {}
        }
    }
    if report.status == JobStatus::Completed && report.video_key.is_none() {
        return Err(invalid("video_key: a completed report must name the video"));
    }
    let error = match (&report.error, report.status) {
        (Some(_), status) if status != JobStatus::Failed => {
            return Err(invalid("error: only a failed report has one"))
        }
        (Some(error), _) if error.chars().count() > MAX_ERROR_CHARS => {
            return Err(invalid(&format!(
                "error: at most {MAX_ERROR_CHARS} characters"
            )))
        }
        (Some(error), _) => Some(error.clone()),
        (None, JobStatus::Failed) => Some(DEFAULT_ERROR.to_owned()),
        (None, _) => None,
    };
    let error_code = match (&report.error_code, report.status) {
        (Some(_), status) if status != JobStatus::Failed => {
            return Err(invalid("error_code: only a failed report has one"))
        }
        (code, JobStatus::Failed) => Some(
            code.as_deref()
                .map_or(FailureCode::RenderFailed, FailureCode::reported),
        ),
        (_, _) => None,
    };
    Ok(Transition {
        to: report.status,
        progress: if report.status == JobStatus::Completed {
            Some(100.0)
        } else {
            progress
        },
        video_key: report.video_key.clone(),
        thumb_key: report.thumb_key.clone(),
        error,
        error_code,
        deadline_in: report.status.is_active().then_some(stall_timeout),
    })
}

/// The timestamp within `MAX_CLOCK_SKEW` of `now`, and a well-formed nonce, kept for as long
/// as a report with that timestamp could be accepted.
pub fn check_freshness(report: &Report, now: i64) -> Result<Nonce, Rejection> {
    let skew = MAX_CLOCK_SKEW.as_secs() as i64;
    if report.timestamp.abs_diff(now) > skew as u64 {
        return Err(Rejection::StaleTimestamp);
    }
    let nonce = &report.nonce;
    if !NONCE_LEN.contains(&nonce.len()) || !nonce.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Rejection::InvalidField(format!(
            "nonce: must be {} to {} visible ASCII characters",
            NONCE_LEN.start(),
            NONCE_LEN.end()
        )));
    }
    let keep = skew + NONCE_SLACK.as_secs() as i64;
    let expires_at = DateTime::<Utc>::from_timestamp(report.timestamp + keep, 0)
        .ok_or(Rejection::StaleTimestamp)?;
    Ok(Nonce {
        value: nonce.clone(),
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::support::config::Config;

    const SECRET: &str = "a-secret-of-enough-length";

    #[test]
    fn signs_like_rfc_4231() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    async fn verifier(vars: &[(&str, &str)]) -> Result<Verifier, SecretError> {
        let config = Config::from_lookup(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        })
        .unwrap();
        Verifier::from_app(&App::in_memory(config).0).await
    }

    #[tokio::test]
    async fn verifies_only_the_signed_body_under_the_secret() {
        let previous = "the-previous-secret-value";
        let verifier = verifier(&[
            ("WEBHOOK_SECRET", SECRET),
            ("WEBHOOK_SECRET_PREVIOUS", previous),
        ])
        .await
        .unwrap();
        let body = br#"{"status":"rendering"}"#;
        let signature = sign(SECRET.as_bytes(), body);
        let verifies = |signature: String, body: &'static [u8]| {
            let verifier = verifier.clone();
            async move { verifier.verify(body, &signature).await.unwrap() }
        };
        assert!(verifies(signature.clone(), body).await);
        assert!(verifies(signature.to_uppercase(), body).await);
        assert!(verifies(sign(previous.as_bytes(), body), body).await);
        assert!(!verifies(signature.clone(), br#"{"status":"completed"}"#).await);
        assert!(!verifies(sign(b"another-secret-entirely", body), body).await);
        assert!(!verifies(signature[..62].to_owned(), body).await);
        assert!(!verifies("not hex".into(), body).await);
        assert!(!verifies(String::new(), body).await);
    }

    #[tokio::test]
    async fn a_change_that_queues_a_push_wakes_the_dispatcher() {
        use crate::domain::events::Topic;
        use crate::ports::events::CONNECTION_TTL;

        let config =
            Config::from_lookup(|name| (name == "WEBHOOK_SECRET").then(|| SECRET.to_owned()))
                .unwrap();
        let (app, memory) = App::in_memory(config);
        let verifier = Verifier::from_app(&app).await.unwrap();
        memory.database.occupy(JobStatus::Queued, 1);
        let id = memory.database.job_ids()[0];
        let send = |status: &str, progress: f64| {
            let body = json!({
                "status": status, "progress": progress, "job_id": id,
                "timestamp": epoch_secs(), "nonce": uuid::Uuid::new_v4().to_string(),
            })
            .to_string();
            let (app, verifier) = (&app, &verifier);
            async move {
                let signature = sign(SECRET.as_bytes(), body.as_bytes());
                receive(app, verifier, id, Some(&signature), body.as_bytes())
                    .await
                    .unwrap()
            }
        };
        send("downloading", 0.0).await;
        assert!(
            memory.wake.asked().is_empty(),
            "an unwatched job without a callback wakes nothing"
        );
        app.pushes
            .watch(&Topic::Job(id), Utc::now() + CONNECTION_TTL)
            .await
            .unwrap();
        send("rendering", 10.0).await;
        assert_eq!(
            memory.wake.asked(),
            [Duration::ZERO],
            "a watched job's change queued a push: the dispatcher is woken to send it"
        );
        send("rendering", 10.0).await;
        assert_eq!(memory.wake.asked().len(), 1, "no change, no push, no wake");
    }

    #[tokio::test]
    async fn refuses_to_run_without_a_secret() {
        assert_eq!(verifier(&[]).await.err(), Some(SecretError::Missing));
    }

    fn report(value: serde_json::Value) -> Report {
        let mut fields = json!({ "timestamp": 1_000_000, "nonce": "n-0123456789" });
        fields
            .as_object_mut()
            .unwrap()
            .extend(value.as_object().unwrap().clone());
        serde_json::from_value(fields).unwrap()
    }

    const STALL: Duration = Duration::from_secs(900);

    #[test]
    fn reports_become_transitions() {
        let id = JobId::new();
        let rendering = check_report(
            &report(json!({ "status": "rendering", "progress": 42.5 })),
            STALL,
        )
        .unwrap();
        assert_eq!(rendering.to, JobStatus::Rendering);
        assert_eq!(rendering.progress, Some(42.5));
        assert_eq!(rendering.deadline_in, Some(STALL));

        let done = report(json!({ "status": "completed", "video_key": "v.mp4", "job_id": id }));
        let done = check_report(&done, STALL).unwrap();
        assert_eq!(done.progress, Some(100.0));
        assert_eq!(done.video_key.as_deref(), Some("v.mp4"));
        assert_eq!(done.deadline_in, None);

        let failed = check_report(&report(json!({ "status": "failed" })), STALL).unwrap();
        assert_eq!(failed.error.as_deref(), Some(DEFAULT_ERROR));
        assert_eq!(failed.progress, None);
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        for (fields, field) in [
            (
                json!({ "status": "rendering", "progress": 101 }),
                "progress",
            ),
            (json!({ "status": "rendering", "progress": -1 }), "progress"),
            (json!({ "status": "completed" }), "video_key"),
            (
                json!({ "status": "completed", "video_key": "" }),
                "video_key",
            ),
            (
                json!({ "status": "rendering", "video_key": "v" }),
                "video_key",
            ),
            (
                json!({ "status": "completed", "video_key": "v", "thumb_key": "x".repeat(1025) }),
                "thumb_key",
            ),
            (json!({ "status": "rendering", "error": "boom" }), "error"),
            (
                json!({ "status": "failed", "error": "e".repeat(2001) }),
                "error",
            ),
        ] {
            let err = check_report(&report(fields.clone()), STALL).unwrap_err();
            assert_eq!(err.code(), "invalid_field", "{fields}");
            assert!(
                err.detail().starts_with(field),
                "{fields}: {}",
                err.detail()
            );
        }
    }

    #[test]
    fn a_report_applies_only_to_the_job_it_names() {
        let id = JobId::new();
        let naming =
            |job: serde_json::Value| report(json!({ "status": "rendering", "job_id": job }));
        assert_eq!(check_job(&naming(json!(id)), id), Ok(()));
        assert_eq!(
            check_job(&naming(json!(JobId::new())), id),
            Err(Rejection::WrongJob)
        );
        for unnamed in [
            report(json!({ "status": "rendering" })),
            naming(json!(null)),
        ] {
            assert_eq!(check_job(&unnamed, id).unwrap_err().code(), "invalid_body");
        }
        let malformed = br#"{"status":"rendering","timestamp":1,"nonce":"abcdefgh","job_id":"x"}"#;
        assert_eq!(parse_report(malformed).unwrap_err().code(), "invalid_field");
    }

    #[test]
    fn malformed_and_mistyped_bodies_differ() {
        assert_eq!(
            parse_report(b"{not json").unwrap_err().code(),
            "invalid_body"
        );
        assert_eq!(parse_report(b"").unwrap_err().code(), "invalid_body");
        let unknown_status = br#"{"status":"paused","timestamp":1,"nonce":"abcdefgh"}"#;
        assert_eq!(
            parse_report(unknown_status).unwrap_err().code(),
            "invalid_field"
        );
        let no_nonce = br#"{"status":"rendering","timestamp":1}"#;
        assert_eq!(parse_report(no_nonce).unwrap_err().code(), "invalid_field");
    }

    #[test]
    fn timestamps_are_accepted_within_five_minutes_either_way() {
        let at = |timestamp: i64| report(json!({ "status": "rendering", "timestamp": timestamp }));
        let now = 1_000_000;
        for ok in [now, now - 300, now + 300] {
            let nonce = check_freshness(&at(ok), now).unwrap();
            assert_eq!(nonce.expires_at.timestamp(), ok + 360, "kept past the skew");
        }
        for stale in [now - 301, now + 301, 0, i64::MIN, i64::MAX] {
            assert_eq!(
                check_freshness(&at(stale), now).unwrap_err(),
                Rejection::StaleTimestamp
            );
        }
    }

    #[test]
    fn nonces_are_short_visible_ascii() {
        let with = |nonce: &str| report(json!({ "status": "rendering", "nonce": nonce }));
        assert!(check_freshness(&with("abcdefgh"), 1_000_000).is_ok());
        for bad in ["short", "has space", "ünïcode!", &"n".repeat(129)] {
            assert!(check_freshness(&with(bad), 1_000_000).is_err(), "{bad}");
        }
    }
}
