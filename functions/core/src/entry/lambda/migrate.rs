//! `migrate`: the migrations, run by CloudFormation on every deploy (the custom resource
//! `Migration`) or by hand (docs/DEPLOY.md, "Migrations on deploy").
//!
//! CloudFormation waits for an answer on the event's `ResponseURL`; one that never comes holds
//! the stack for the resource's `ServiceTimeout`, and then its rollback's Delete waits as long
//! again and fails the stack for good. So nothing may stand between an event and its answer:
//! the runtime loop starts before anything that can fail, configuration, secret and database
//! are read per event inside a task bounded in time (whose panic, where panics unwind, is an
//! answer too), every failure is a `FAILED` answer with a short reason, and Delete is answered
//! at once without touching either (the schema outlives the stack). So is the Update of a
//! rollback (`MigrateVersion` going back): the database may be what failed, and the newer
//! schema runs the older code.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::database::{app_role, own_connection};
use super::{event_loop, Error};
use crate::adapters::postgres::migrations;
use crate::adapters::postgres::migrations::Outcome;
use crate::support::config::Config;
use crate::support::telemetry;

/// Constant: a new one would make CloudFormation send a Delete for the old.
pub const PHYSICAL_RESOURCE_ID: &str = "osurender-migrations";

/// What is kept of the invocation for the answer: at most 3 × 4 s PUTs and 2 s of pauses,
/// and a second to spare. The run (secret, connecting, waiting for the lock, migrating) is
/// given up after `MIGRATE_DEADLINE` or when only this is left, whichever comes first.
const ANSWER_RESERVE: Duration = Duration::from_secs(15);
/// CloudFormation reads at most 4 KB of the response: `Reason` and `Data` are cut within that.
const MAX_REASON_BYTES: usize = 1_000;
const MAX_DATA_BYTES: usize = 1_000;
const RESPONSE_ATTEMPTS: u32 = 3;
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(4);

/// `migrate`'s whole `main`: logging, then straight into the runtime loop.
pub async fn serve_migrations() -> Result<(), Error> {
    telemetry::init();
    event_loop(|event: Value, context| {
        let time_left = context
            .deadline()
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        migrate(event, Some(time_left))
    })
    .await
}

/// A CloudFormation event (it has `RequestType` and `ResponseURL`) is answered on its
/// `ResponseURL`, whatever happens. Any other event (`{}` by hand) migrates, and a failure is
/// the invocation's error. `time_left`: until the invocation's deadline, if there is one.
pub async fn migrate(event: Value, time_left: Option<Duration>) -> Result<Value, Error> {
    let Some(request) = CustomResourceRequest::from_event(&event) else {
        return match run(time_left).await {
            Ok(outcome) => {
                tracing::info!(outcome = outcome.summary(), "migrations");
                Ok(json!({ "applied": outcome.applied() }))
            }
            Err(reason) => Err(reason.into()),
        };
    };
    let answer = match request.request_type.as_str() {
        _ if request.untouched().is_some() => Ok(Outcome::Applied(Vec::new())),
        "Create" | "Update" => run(time_left).await,
        other => Err(format!("unknown RequestType `{other}`")),
    };
    match &answer {
        Ok(outcome) => tracing::info!(outcome = outcome.summary(), "migrations"),
        Err(reason) => tracing::error!(reason, "migrations failed"),
    }
    let response = custom_resource_response(&request, &answer);
    respond(&request.response_url, &response).await?;
    Ok(response)
}

/// Configuration, then secret, connection and migrations in a task of its own, bounded by
/// `run_deadline`; every way it can end is an outcome or a short reason.
async fn run(time_left: Option<Duration>) -> Result<Outcome, String> {
    let config = Config::from_env().map_err(|e| format!("configuration: {e}"))?;
    let deadline = run_deadline(config.database.migrate_deadline, time_left)?;
    let mut task = tokio::spawn(connect_and_migrate(config));
    match tokio::time::timeout(deadline, &mut task).await {
        Ok(Ok(result)) => result,
        // Only where panics unwind (tests); the release profile aborts, so none may happen.
        Ok(Err(error)) => Err(format!("the migration run ended abnormally: {error}")),
        Err(_) => {
            // Dropping the connection ends its session: the lock and any open transaction go.
            task.abort();
            Err(format!(
                "no result within {} s (database or secret unreachable?); nothing was committed \
                 unless the log says so",
                deadline.as_secs_f64()
            ))
        }
    }
}

/// How long a run may take: `configured` (`MIGRATE_DEADLINE`), less if the invocation's
/// `time_left` would otherwise not leave `ANSWER_RESERVE` for answering CloudFormation.
pub fn run_deadline(configured: Duration, time_left: Option<Duration>) -> Result<Duration, String> {
    let Some(left) = time_left else {
        return Ok(configured);
    };
    match left.checked_sub(ANSWER_RESERVE) {
        Some(room) if !room.is_zero() => {
            if room < configured {
                tracing::info!(
                    ?room,
                    ?configured,
                    "MIGRATE_DEADLINE cut to the invocation's"
                );
            }
            Ok(configured.min(room))
        }
        _ => Err(format!(
            "the invocation had {} s left, and {} s are kept for answering: nothing was tried; \
             raise the function's timeout",
            left.as_secs(),
            ANSWER_RESERVE.as_secs()
        )),
    }
}

async fn connect_and_migrate(config: Config) -> Result<Outcome, String> {
    let db = own_connection(&config).await?;
    let app_role = app_role(&config).await?;
    migrations::connect_and_apply(
        db.postgres,
        &db.tls,
        db.timeout,
        config.database.migrate_lock_timeout,
        app_role.as_ref(),
    )
    .await
    .map_err(|e| e.message().to_owned())
}

/// The fields of a CloudFormation custom resource event that its answer needs. Read leniently:
/// a missing or odd field is copied back empty rather than left unanswered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomResourceRequest {
    pub request_type: String,
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    /// `ResourceProperties.MigrateVersion` and `OldResourceProperties.MigrateVersion` (an
    /// Update's), when present.
    pub migrate_version: Option<String>,
    pub old_migrate_version: Option<String>,
}

impl CustomResourceRequest {
    /// `None` unless `event` has a string `RequestType` and `ResponseURL`.
    pub fn from_event(event: &Value) -> Option<Self> {
        let text = |name: &str| event.get(name).and_then(Value::as_str).map(str::to_owned);
        // CloudFormation passes properties as strings; a hand-made event may use a number.
        let version = |properties: &str| match event.get(properties)?.get("MigrateVersion")? {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        };
        Some(Self {
            request_type: text("RequestType")?,
            response_url: text("ResponseURL")?,
            stack_id: text("StackId").unwrap_or_default(),
            request_id: text("RequestId").unwrap_or_default(),
            logical_resource_id: text("LogicalResourceId").unwrap_or_default(),
            migrate_version: version("ResourceProperties"),
            old_migrate_version: version("OldResourceProperties"),
        })
    }

    /// Why this event is answered without reading configuration, secret or database: a
    /// Delete (the schema outlives the stack), or an Update whose `MigrateVersion` is older
    /// than the one it replaces — CloudFormation rolling back, after the newer code's deploy
    /// failed (perhaps on the database itself). `MigrateVersion` is `!Ref` of the function's
    /// published version: its ARN (`arn:aws:lambda:…:function:name:12`), whose number after
    /// the last `:` grows with each code change, so that number is compared (a bare number
    /// too); a value without one is no rollback (the run then finds any newer schema and
    /// keeps it).
    pub fn untouched(&self) -> Option<String> {
        let number = |version: &Option<String>| {
            let version = version.as_deref()?.trim();
            version.rsplit(':').next()?.parse::<u64>().ok()
        };
        match self.request_type.as_str() {
            "Delete" => Some("the schema is kept".into()),
            "Update" => match (
                number(&self.migrate_version),
                number(&self.old_migrate_version),
            ) {
                (Some(new), Some(old)) if new < old => Some(format!(
                    "a rollback (MigrateVersion {old} to {new}): the schema is kept as it is, \
                     nothing applied"
                )),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The answer to CloudFormation for `request`, given how the run went.
pub fn custom_resource_response(
    request: &CustomResourceRequest,
    answer: &Result<Outcome, String>,
) -> Value {
    let (status, reason, applied) = match (answer, request.untouched()) {
        (Ok(_), Some(why)) => ("SUCCESS", why, &[][..]),
        (Ok(outcome), None) => ("SUCCESS", outcome.summary(), outcome.applied()),
        (Err(reason), _) => ("FAILED", reason.clone(), &[][..]),
    };
    json!({
        "Status": status,
        "Reason": clip(&reason, MAX_REASON_BYTES),
        "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_resource_id,
        "Data": { "Applied": clip(&applied.join(","), MAX_DATA_BYTES) },
    })
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// PUTs the response to the presigned URL: an empty `Content-Type`, as it was signed with.
/// Retried briefly, since an answer that never arrives holds the stack for its timeout.
async fn respond(url: &str, response: &Value) -> Result<(), Error> {
    let client = reqwest::Client::builder()
        .timeout(RESPONSE_TIMEOUT)
        .build()?;
    let body = serde_json::to_vec(response)?;
    let mut last_error = String::new();
    for attempt in 1..=RESPONSE_ATTEMPTS {
        let sent = client
            .put(url)
            .header(reqwest::header::CONTENT_TYPE, "")
            .body(body.clone())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status);
        match sent {
            Ok(_) => return Ok(()),
            Err(error) => {
                tracing::warn!(attempt, %error, "answering CloudFormation failed");
                last_error = error.to_string();
            }
        }
        if attempt < RESPONSE_ATTEMPTS {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Err(format!("could not answer CloudFormation: {last_error}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: &str) -> CustomResourceRequest {
        let mut event: Value =
            serde_json::from_str(include_str!("../../../tests/events/cfn_create.json")).unwrap();
        event["RequestType"] = kind.into();
        CustomResourceRequest::from_event(&event).unwrap()
    }

    #[test]
    fn success_names_the_applied_migrations() {
        let applied = Ok(Outcome::Applied(vec![
            "V3__skins".to_owned(),
            "V4__more".to_owned(),
        ]));
        let response = custom_resource_response(&request("Create"), &applied);
        assert_eq!(response["Status"], "SUCCESS");
        assert_eq!(response["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        assert_eq!(
            response["StackId"],
            "arn:aws:cloudformation:us-east-1:123456789012:stack/osurender-dev/5b1e8a90-ce9b-11f0-9d7f-0affd2ab4e01"
        );
        assert_eq!(
            response["RequestId"],
            "0c6a3b1e-4d3f-4a8e-9a43-7b1f5b2d9c11"
        );
        assert_eq!(response["LogicalResourceId"], "Migration");
        assert_eq!(response["Data"]["Applied"], "V3__skins,V4__more");
        let update = custom_resource_response(&request("Update"), &Ok(Outcome::Applied(vec![])));
        assert_eq!(update["Status"], "SUCCESS");
        assert_eq!(update["Data"]["Applied"], "");
    }

    #[test]
    fn a_newer_schema_is_a_success_that_applies_nothing() {
        let newer = Ok(Outcome::SchemaNewer(vec!["V5__later".to_owned()]));
        let response = custom_resource_response(&request("Update"), &newer);
        assert_eq!(response["Status"], "SUCCESS");
        assert_eq!(response["Data"]["Applied"], "");
        assert!(response["Reason"].as_str().unwrap().contains("V5__later"));
    }

    fn update(new: Value, old: Value) -> CustomResourceRequest {
        let mut event: Value =
            serde_json::from_str(include_str!("../../../tests/events/cfn_create.json")).unwrap();
        event["RequestType"] = "Update".into();
        event["ResourceProperties"]["MigrateVersion"] = new;
        event["OldResourceProperties"] = json!({ "MigrateVersion": old });
        CustomResourceRequest::from_event(&event).unwrap()
    }

    #[test]
    fn an_update_to_an_older_version_is_a_rollback_left_untouched() {
        let arn = |n: u32| {
            json!(format!(
                "arn:aws:lambda:us-east-1:123456789012:function:osurender-dev-migrate:{n}"
            ))
        };
        for (new, old) in [
            (json!("3"), json!("12")),
            (json!(9), json!("10")),
            // What `!Ref MigrateFunction.Version` gives on AWS: the version's ARN.
            (arn(9), arn(10)),
            (arn(3), arn(12)),
        ] {
            let request = update(new.clone(), old.clone());
            let why = request.untouched().expect("a rollback");
            assert!(why.contains("rollback"), "{why}");
            let response = custom_resource_response(&request, &Ok(Outcome::Applied(vec![])));
            assert_eq!(response["Status"], "SUCCESS");
            assert_eq!(response["Reason"], why.as_str());
            assert_eq!(response["Data"]["Applied"], "");
        }
        // Numerically: "10" after "9" is forward, as are the same version and odd values.
        for (new, old) in [
            (json!("10"), json!("9")),
            (arn(10), arn(9)),
            (json!("4"), json!("4")),
            (arn(4), arn(4)),
            (
                json!("arn:aws:lambda:us-east-1:123456789012:function:osurender-dev-migrate"),
                arn(7),
            ),
            (json!("$LATEST"), json!("7")),
            (json!("3"), Value::Null),
        ] {
            let request = update(new.clone(), old.clone());
            assert_eq!(request.untouched(), None, "{new} after {old}");
        }
        // Only an Update rolls back: a Create with the same properties runs.
        let mut create = update(json!("3"), json!("12"));
        create.request_type = "Create".into();
        assert_eq!(create.untouched(), None);
    }

    #[test]
    fn the_run_ends_in_time_for_the_answer() {
        let configured = Duration::from_secs(40);
        assert_eq!(run_deadline(configured, None), Ok(configured));
        // The template's 60 s timeout: all of MIGRATE_DEADLINE.
        let minute = Some(Duration::from_secs(60));
        assert_eq!(run_deadline(configured, minute), Ok(configured));
        // A deadline past what the invocation leaves is cut so the answer still fits.
        let cut = run_deadline(Duration::from_secs(300), minute).unwrap();
        assert_eq!(cut + ANSWER_RESERVE, Duration::from_secs(60));
        // No room at all: refused, saying why.
        for left in [ANSWER_RESERVE, Duration::from_secs(3)] {
            let error = run_deadline(configured, Some(left)).unwrap_err();
            assert!(error.contains("timeout"), "{error}");
        }
    }

    #[test]
    fn failure_gives_a_bounded_reason() {
        let error = Err("é".repeat(10_000));
        let response = custom_resource_response(&request("Update"), &error);
        assert_eq!(response["Status"], "FAILED");
        assert_eq!(response["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        assert!(serde_json::to_vec(&response).unwrap().len() < 4096);
    }

    #[test]
    fn odd_events_are_still_answerable() {
        let event = json!({"RequestType": "Delete", "ResponseURL": "http://x/", "StackId": 5});
        let request = CustomResourceRequest::from_event(&event).unwrap();
        assert_eq!(request.stack_id, "");
        assert_eq!(
            CustomResourceRequest::from_event(&json!({"RequestType": "Create"})),
            None
        );
        let response = custom_resource_response(&request, &Ok(Outcome::Applied(vec![])));
        assert_eq!(response["Status"], "SUCCESS");
        assert_eq!(response["Reason"], "the schema is kept");
    }
}
