//! `migrate`: the migrations, run by CloudFormation on every deploy (a custom resource) or by
//! hand (README-deploy.md, "Migrations on deploy").

use std::time::Duration;

use aws_lambda_events::event::cloudformation::CloudFormationCustomResourceRequest as Request;
use serde_json::{json, Value};

use super::Error;
use crate::db::{self, DbError};
use crate::App;

/// Constant: a new one would make CloudFormation send a Delete for the old.
pub const PHYSICAL_RESOURCE_ID: &str = "osurender-migrations";

/// CloudFormation reads at most 4 KB of the response; the reason is cut well within that.
const MAX_REASON_CHARS: usize = 1_000;
const RESPONSE_ATTEMPTS: u32 = 3;
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A CloudFormation event (it has `RequestType` and `ResponseURL`) is answered on its
/// `ResponseURL`, also on failure, else the stack would wait for the service timeout. Any
/// other event (`{}` by hand) migrates, and a failure is the invocation's error.
pub async fn migrate(app: App, event: Value) -> Result<Value, Error> {
    if event.get("RequestType").is_none() || event.get("ResponseURL").is_none() {
        let applied = db::migrate(&app.clients.pool).await?;
        tracing::info!(?applied, "migrations applied");
        return Ok(json!({ "applied": applied }));
    }
    let request: Request = serde_json::from_value(event)?;
    let outcome = match &request {
        // Never drop the schema: the data outlives the stack.
        Request::Delete(_) => Ok(Vec::new()),
        _ => db::migrate(&app.clients.pool).await,
    };
    match &outcome {
        Ok(applied) => tracing::info!(?applied, "migrations applied"),
        Err(error) => tracing::error!(%error, "migrations failed"),
    }
    let response = custom_resource_response(&request, &outcome);
    respond(response_url(&request), &response).await?;
    Ok(response)
}

/// The answer to CloudFormation for `request`, given how the migrations went.
pub fn custom_resource_response(
    request: &Request,
    outcome: &Result<Vec<String>, DbError>,
) -> Value {
    let (stack_id, request_id, logical_id) = match request {
        Request::Create(r) => (&r.stack_id, &r.request_id, &r.logical_resource_id),
        Request::Update(r) => (&r.stack_id, &r.request_id, &r.logical_resource_id),
        Request::Delete(r) => (&r.stack_id, &r.request_id, &r.logical_resource_id),
        // The enum is non-exhaustive; nothing else is sent today.
        _ => unreachable!("CloudFormation sends Create, Update or Delete"),
    };
    let (status, reason, applied) = match outcome {
        Ok(applied) if matches!(request, Request::Delete(_)) => {
            ("SUCCESS", "the schema is kept".to_owned(), applied)
        }
        Ok(applied) => (
            "SUCCESS",
            format!("{} migration(s) applied", applied.len()),
            applied,
        ),
        Err(error) => (
            "FAILED",
            error.to_string().chars().take(MAX_REASON_CHARS).collect(),
            &Vec::new(),
        ),
    };
    json!({
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
        "StackId": stack_id,
        "RequestId": request_id,
        "LogicalResourceId": logical_id,
        "Data": { "Applied": applied.join(",") },
    })
}

fn response_url(request: &Request) -> &str {
    match request {
        Request::Create(r) => &r.response_url,
        Request::Update(r) => &r.response_url,
        Request::Delete(r) => &r.response_url,
        _ => unreachable!("CloudFormation sends Create, Update or Delete"),
    }
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
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(format!("could not answer CloudFormation: {last_error}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: &str) -> Request {
        let mut event: Value =
            serde_json::from_str(include_str!("../../tests/events/cfn_create.json")).unwrap();
        event["RequestType"] = kind.into();
        if kind != "Create" {
            event["PhysicalResourceId"] = PHYSICAL_RESOURCE_ID.into();
            event["OldResourceProperties"] = json!({});
        }
        serde_json::from_value(event).unwrap()
    }

    #[test]
    fn success_names_the_applied_migrations() {
        let applied = Ok(vec!["V3__skins".to_owned(), "V4__more".to_owned()]);
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
        let update = custom_resource_response(&request("Update"), &Ok(Vec::new()));
        assert_eq!(update["Status"], "SUCCESS");
        assert_eq!(update["Data"]["Applied"], "");
    }

    #[test]
    fn failure_gives_a_bounded_reason() {
        let error = Err(DbError::new("x".repeat(10_000)));
        let response = custom_resource_response(&request("Update"), &error);
        assert_eq!(response["Status"], "FAILED");
        assert_eq!(response["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
        assert!(serde_json::to_vec(&response).unwrap().len() < 4096);
    }

    #[test]
    fn delete_succeeds() {
        let response = custom_resource_response(&request("Delete"), &Ok(Vec::new()));
        assert_eq!(response["Status"], "SUCCESS");
        assert_eq!(response["PhysicalResourceId"], PHYSICAL_RESOURCE_ID);
    }
}
