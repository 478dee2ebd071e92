//! CloudWatch metrics as Embedded Metric Format: one JSON line on stdout per data point, which
//! CloudWatch Logs turns into the metric. No client, no permission, no call on the request path.
//! The lines stand apart from the tracing events (their shape is CloudWatch's, not ours).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::problem::Rejection;

pub const NAMESPACE: &str = "osurender";

/// One admission decision (`render`, skin uploads): the `Decision` dimension is `admitted`,
/// `replayed` (an Idempotency-Key retry answered with its first response: nothing new was
/// admitted) or the rejection's `code`, a bounded set, so each pair is one CloudWatch metric.
pub fn admission<T: Accepted>(endpoint: &str, outcome: &Result<T, Rejection>, latency: Duration) {
    let decision = match outcome {
        Ok(accepted) => accepted.decision(),
        Err(rejection) => rejection.code(),
    };
    emit(&admission_line(endpoint, decision, latency, now_millis()));
}

/// What an accepted request made, as the `Decision` dimension names it.
pub trait Accepted {
    fn decision(&self) -> &'static str {
        "admitted"
    }
}

/// The events one outbox sweep gave up on (the `OutboxFailedAlarm` watches this), by function.
pub fn outbox_failed(count: u64) {
    emit(&outbox_failed_line(&function_name(), count, now_millis()));
}

/// The callbacks one sweep delivered and gave up on (the `CallbacksFailedAlarm` watches the
/// latter), by function.
pub fn callbacks(delivered: u64, failed: u64) {
    emit(&callbacks_line(
        &function_name(),
        delivered,
        failed,
        now_millis(),
    ));
}

/// Live-event frames one push sweep could not deliver, and connections it found closed
/// (`EventPushesFailedAlarm` and `EventPushesGoneAlarm` watch them), by function.
pub fn event_pushes(failed: u64, gone: u64) {
    let line = function_counts_line(
        &function_name(),
        &[
            ("EventPushesFailed", json!(failed)),
            ("EventPushesGone", json!(gone)),
        ],
        now_millis(),
    );
    emit(&line);
}

/// A wake of the dispatcher that failed (`CallbackWakesFailedAlarm` watches this), by
/// function: callbacks then wait for the scheduled sweep, up to a minute.
pub fn wake_failed() {
    let line = function_counts_line(
        &function_name(),
        &[("CallbackWakesFailed", json!(1))],
        now_millis(),
    );
    emit(&line);
}

/// Jobs holding the render capacity (`downloading` + `rendering`, against `MAX_RENDERING`) and
/// waiting for it (`queued`, against `MAX_QUEUED`), the farm's slots in use (against
/// `RENDER_SLOTS` + `RELEASE_AHEAD`) and the oldest queued job's age of anonymous clients and of
/// keys, by function: the dashboard's gauges, printed by outbox-dispatcher once a minute.
pub fn render_capacity(gauges: &FarmGauges) {
    let line = render_capacity_line(&function_name(), gauges, now_millis());
    emit(&line);
}

/// What `render_capacity` prints.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FarmGauges {
    pub queued: i64,
    pub rendering: i64,
    pub slots_in_use: i64,
    pub queue_age_anonymous_secs: f64,
    pub queue_age_keys_secs: f64,
}

/// Jobs one release handed the farm and how long the release took, by function.
pub fn released(count: usize, latency: Duration) {
    let line = function_counts_line(
        &function_name(),
        &[("JobsReleased", json!(count))],
        now_millis(),
    );
    emit(&line);
    emit(&json!({
        "_aws": metadata(now_millis(), &["FunctionName"], &[("ReleaseLatency", "Milliseconds")]),
        "FunctionName": function_name(),
        "ReleaseLatency": latency.as_secs_f64() * 1000.0,
    }));
}

fn outbox_failed_line(function: &str, count: u64, timestamp: u64) -> Value {
    function_counts_line(function, &[("OutboxFailed", json!(count))], timestamp)
}

fn callbacks_line(function: &str, delivered: u64, failed: u64, timestamp: u64) -> Value {
    let counts = [
        ("CallbacksDelivered", json!(delivered)),
        ("CallbacksFailed", json!(failed)),
    ];
    function_counts_line(function, &counts, timestamp)
}

fn render_capacity_line(function: &str, gauges: &FarmGauges, timestamp: u64) -> Value {
    let counts = [
        ("QueuedJobs", json!(gauges.queued)),
        ("RenderingJobs", json!(gauges.rendering)),
        ("SlotsInUse", json!(gauges.slots_in_use)),
        ("QueueAgeAnonymous", json!(gauges.queue_age_anonymous_secs)),
        ("QueueAgeKeys", json!(gauges.queue_age_keys_secs)),
    ];
    function_counts_line(function, &counts, timestamp)
}

/// Counts by function (the `FunctionName` dimension), as a dashboard or an alarm reads them.
fn function_counts_line(function: &str, counts: &[(&str, Value)], timestamp: u64) -> Value {
    let metrics: Vec<(&str, &str)> = counts.iter().map(|(name, _)| (*name, "Count")).collect();
    let mut line = json!({
        "_aws": metadata(timestamp, &["FunctionName"], &metrics),
        "FunctionName": function,
    });
    for (name, count) in counts {
        line[*name] = count.clone();
    }
    line
}

/// The Lambda function this runs in (empty on the dev server).
fn function_name() -> String {
    std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_default()
}

fn admission_line(endpoint: &str, decision: &str, latency: Duration, timestamp: u64) -> Value {
    json!({
        "_aws": metadata(
            timestamp,
            &["Endpoint", "Decision"],
            &[("AdmissionLatency", "Milliseconds"), ("Admissions", "Count")],
        ),
        "Endpoint": endpoint,
        "Decision": decision,
        "AdmissionLatency": latency.as_secs_f64() * 1000.0,
        "Admissions": 1,
    })
}

fn metadata(timestamp: u64, dimensions: &[&str], metrics: &[(&str, &str)]) -> Value {
    let metrics: Vec<Value> = metrics
        .iter()
        .map(|(name, unit)| json!({ "Name": name, "Unit": unit }))
        .collect();
    json!({
        "Timestamp": timestamp,
        "CloudWatchMetrics": [{
            "Namespace": NAMESPACE,
            "Dimensions": [dimensions],
            "Metrics": metrics,
        }],
    })
}

fn emit(line: &Value) {
    println!("{line}");
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_line_is_emf() {
        let line = admission_line(
            "render",
            "rate_limited",
            Duration::from_micros(12_500),
            1_764_471_660_000,
        );
        assert_eq!(
            line,
            json!({
                "_aws": {
                    "Timestamp": 1_764_471_660_000u64,
                    "CloudWatchMetrics": [{
                        "Namespace": "osurender",
                        "Dimensions": [["Endpoint", "Decision"]],
                        "Metrics": [
                            {"Name": "AdmissionLatency", "Unit": "Milliseconds"},
                            {"Name": "Admissions", "Unit": "Count"},
                        ],
                    }],
                },
                "Endpoint": "render",
                "Decision": "rate_limited",
                "AdmissionLatency": 12.5,
                "Admissions": 1,
            })
        );
        // One line: CloudWatch reads EMF line by line.
        assert!(!line.to_string().contains('\n'));
    }

    /// A line's dimensions, its metrics as (name, unit) and their values, as a dashboard or an
    /// alarm reads them (`admission_line_is_emf` checks a whole line).
    fn reads(line: &Value) -> (Value, Vec<(String, String)>, Value) {
        let meta = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(meta["Namespace"], "osurender");
        let metrics: Vec<(String, String)> = meta["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .map(|m| {
                (
                    m["Name"].as_str().unwrap().into(),
                    m["Unit"].as_str().unwrap().into(),
                )
            })
            .collect();
        let values = metrics.iter().map(|(name, _)| line[name].clone()).collect();
        (meta["Dimensions"].clone(), metrics, values)
    }

    fn counts(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|name| (name.to_string(), "Count".into()))
            .collect()
    }

    #[test]
    fn function_lines_match_the_dashboard_and_the_alarms() {
        let function = "osurender-dev-OutboxDispatcher";
        // template.yaml's dashboard, CallbacksFailedAlarm and OutboxFailedAlarm: namespace
        // osurender, dimension FunctionName.
        let cases = [
            (
                render_capacity_line(
                    function,
                    &FarmGauges {
                        queued: 7,
                        rendering: 20,
                        slots_in_use: 18,
                        queue_age_anonymous_secs: 4.0,
                        queue_age_keys_secs: 0.0,
                    },
                    1,
                ),
                counts(&[
                    "QueuedJobs",
                    "RenderingJobs",
                    "SlotsInUse",
                    "QueueAgeAnonymous",
                    "QueueAgeKeys",
                ]),
                json!([7, 20, 18, 4.0, 0.0]),
            ),
            (
                callbacks_line(function, 40, 2, 1),
                counts(&["CallbacksDelivered", "CallbacksFailed"]),
                json!([40, 2]),
            ),
            (
                outbox_failed_line(function, 3, 1),
                counts(&["OutboxFailed"]),
                json!([3]),
            ),
        ];
        for (line, metrics, values) in cases {
            assert_eq!(reads(&line), (json!([["FunctionName"]]), metrics, values));
            assert_eq!(line["FunctionName"], function);
        }
    }
}
