//! The non-HTTP functions' handlers: the outbox dispatcher (on its schedule, by hand with `{}`,
//! or woken by the wake queue's SQS event), the scheduled janitor (whatever the event), and the
//! S3 event that ingests presigned skin uploads.

use std::sync::Arc;

use aws_lambda_events::event::s3::S3Event;
use percent_encoding::percent_decode_str;
use serde::Serialize;
use serde_json::Value;

use super::Error;
use crate::ports::callbacks::CallbackSender;
use crate::usecases::callbacks;
use crate::usecases::events::{self as live, PushReport};
use crate::usecases::janitor::{self, JanitorReport};
use crate::usecases::outbox::{self, SweepReport};
use crate::usecases::skins;
use crate::usecases::skins::ingest::{IngestError, IngestOutcome};
use crate::{support::metrics, App};

/// What one `outbox-dispatcher` run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DispatchReport {
    pub events: SweepReport,
    pub callbacks: SweepReport,
    /// Live events pushed to their watchers.
    pub pushes: PushReport,
}

/// `outbox-dispatcher`. On its schedule (or `{}` by hand): one sweep of the render events and
/// one of the callbacks, each run even if the other fails. On the wake queue's messages (an SQS
/// event: `callbacks::wake_dispatcher`): the callbacks' sweep alone. Either way it pushes the
/// changes of watched jobs to their live-event subscribers (usecases/events.rs) and then asks to
/// be woken when the next callback or push falls due. The events it gave up on become the
/// `OutboxFailed` metric, the callbacks it delivered and gave up on `CallbacksDelivered` and
/// `CallbacksFailed`. A failed sweep is the invocation's error (the dispatcher's errors alarm
/// counts those; a wake's messages come back after their visibility timeout). Each scheduled
/// run also prints the render capacity in use (the dashboard's gauge); a failed read of it is
/// only logged. `sender`: the instance's (`wiring::callback_sender`, built once in the
/// function's `main`), so its connections are reused by the next invocations.
pub async fn dispatch_outbox(
    app: App,
    sender: Arc<dyn CallbackSender>,
    event: Value,
) -> Result<DispatchReport, Error> {
    let woken = is_wake(&event);
    let sweep_events = async {
        match woken {
            true => Ok(SweepReport::default()),
            false => outbox::sweep(&app).await,
        }
    };
    let sweep_callbacks = async {
        let (swept, pushed) =
            tokio::join!(callbacks::sweep(&app, &sender), live::sweep_pushes(&app));
        callbacks::wake_after_sweep(&app, swept.as_ref().ok()).await;
        (swept, pushed)
    };
    let (events, (callbacks, pushes)) = tokio::join!(sweep_events, sweep_callbacks);
    let report = DispatchReport {
        events: events?,
        callbacks: callbacks?,
        pushes: pushes?,
    };
    if report.pushes.failed + report.pushes.gone > 0 {
        metrics::event_pushes(report.pushes.failed, report.pushes.gone);
    }
    if report.events.failed > 0 {
        metrics::outbox_failed(report.events.failed);
    }
    if report.callbacks.claimed > 0 {
        metrics::callbacks(report.callbacks.dispatched, report.callbacks.failed);
    }
    if report.events.claimed + report.callbacks.claimed + report.pushes.claimed > 0 {
        tracing::info!(?report, woken, "outbox sweep");
    }
    if !woken {
        match app.admissions.overview().await {
            Ok(overview) => metrics::render_capacity(&metrics::FarmGauges {
                queued: overview.capacity.queued,
                rendering: overview.capacity.rendering,
                slots_in_use: overview.wait.farm.slots_in_use(),
                queue_age_anonymous_secs: overview.queue_age.anonymous.unwrap_or_default(),
                queue_age_keys_secs: overview.queue_age.keys.unwrap_or_default(),
            }),
            Err(error) => tracing::warn!(%error, "reading the render capacity failed"),
        }
    }
    Ok(report)
}

/// Whether the event is the wake queue's (SQS records), not the schedule's.
fn is_wake(event: &Value) -> bool {
    event["Records"]
        .as_array()
        .and_then(|records| records.first())
        .is_some_and(|record| record["eventSource"] == "aws:sqs")
}

/// `janitor`: one run.
pub async fn run_janitor(app: App, _event: Value) -> Result<JanitorReport, Error> {
    Ok(janitor::run(&app).await?)
}

/// `skin-ingest`: ingests every object the event names. An object that is not an incoming
/// upload is skipped; a Postgres or S3 failure fails the invocation after the other records
/// are done, so S3's retries of the event take up what is left (an ingested object is gone by
/// then, and answers `Gone`).
pub async fn ingest_skins(app: App, event: S3Event) -> Result<Value, Error> {
    let mut published = 0;
    let mut failure = None;
    for record in event.records {
        let bucket = record.s3.bucket.name.unwrap_or_default();
        let Some(key) = record.s3.object.key.as_deref().and_then(object_key) else {
            tracing::warn!(%bucket, "S3 record without a readable object key");
            continue;
        };
        match skins::ingest(&app, &bucket, &key).await {
            Ok(IngestOutcome::Published(_)) => published += 1,
            Ok(_) => {}
            Err(error @ IngestError::NotIncoming { .. }) => tracing::warn!(%error, "skipped"),
            Err(error) => {
                tracing::error!(%error, key, "skin ingest failed");
                failure.get_or_insert(error);
            }
        }
    }
    match failure {
        Some(error) => Err(error.into()),
        None => Ok(serde_json::json!({ "published": published })),
    }
}

/// An S3 event's object key as stored: the event form-encodes it (`+` for a space, `%xx` for
/// other bytes). `None` if it does not decode to UTF-8.
pub fn object_key(encoded: &str) -> Option<String> {
    let spaced = encoded.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .ok()
        .map(|key| key.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_are_form_decoded() {
        assert_eq!(
            object_key("incoming/my+skin%2B%C3%A9.osk").as_deref(),
            Some("incoming/my skin+é.osk")
        );
        assert_eq!(
            object_key("incoming/plain.osk").as_deref(),
            Some("incoming/plain.osk")
        );
        assert_eq!(object_key("incoming/%FF.osk"), None);
    }

    #[test]
    fn only_an_sqs_event_is_a_wake() {
        let wake = serde_json::json!({ "Records": [{
            "messageId": "1", "eventSource": "aws:sqs", "body": "{\"wake\":\"callbacks\"}"
        }] });
        assert!(is_wake(&wake));
        let schedule = serde_json::json!({
            "source": "aws.events", "detail-type": "Scheduled Event", "detail": {}
        });
        for event in [
            schedule,
            serde_json::json!({}),
            serde_json::json!({ "Records": [] }),
        ] {
            assert!(!is_wake(&event), "{event}");
        }
    }

    #[test]
    fn s3_events_parse() {
        let event: S3Event =
            serde_json::from_str(include_str!("../../../tests/events/s3_put.json"))
                .expect("a real S3 notification parses");
        let key = event.records[0].s3.object.key.as_deref().unwrap();
        assert_eq!(object_key(key).as_deref(), Some("incoming/My Skin.osk"));
    }
}
