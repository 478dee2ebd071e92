//! The admission steps against the in-memory adapters (adapters/memory/): which ports each
//! outcome reaches, in which order, and what is left behind. No Postgres, no stand-in.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderValue;
use bytes::Bytes;
use futures_util::Stream;

use super::*;
use crate::adapters::memory::{AdmitFault, Memory};
use crate::domain::client::ClientKey;
use crate::domain::rate::LimitScope;
use crate::domain::JobStatus;
use crate::support::config::Config;

const VALID_REPLAY: &[u8] = include_bytes!("../../../../../tests/fixtures/replays/valid_0.osr");
const BOUNDARY: &str = "admission-unit-test";

fn config(vars: &[(&str, &str)]) -> Config {
    Config::from_lookup(|name| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    })
    .expect("test config is valid")
}

/// Anonymous client `n`, alone in its network and its wide network.
fn client(n: u8) -> Caller {
    Caller::anonymous_at(&format!("203.{n}.113.9"))
}

/// A render form: the replay under `file_name`, then the text fields.
fn form(
    replay: &[u8],
    file_name: &str,
    fields: &[(&str, &str)],
) -> FormUpload<impl Stream<Item = Result<Bytes, Infallible>>> {
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"replay\"; filename=\"{file_name}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(replay);
    for (name, value) in fields {
        body.extend_from_slice(
            format!("\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}")
                .as_bytes(),
        );
    }
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    FormUpload {
        content_type: Some(format!("multipart/form-data; boundary={BOUNDARY}")),
        content_length: Some(body.len() as u64),
        body: futures_util::stream::iter([Ok(Bytes::from(body))]),
    }
}

fn valid() -> FormUpload<impl Stream<Item = Result<Bytes, Infallible>>> {
    form(VALID_REPLAY, "play.osr", &[])
}

async fn render(app: &App, who: u8, key: Option<&str>) -> Result<Reply<JobId>, Rejection> {
    let key = key.map(HeaderValue::from_str).transpose().unwrap();
    submit_render(app, &client(who), key.as_ref(), valid())
        .await
        .outcome
}

fn admitted(outcome: Result<Reply<JobId>, Rejection>) -> JobId {
    match outcome {
        Ok(Reply::Fresh(job)) => job,
        other => panic!("expected a fresh admission, got {other:?}"),
    }
}

/// What an admitted render with an idempotency key does: one look (with the key's holder), the
/// limits (the anonymous client's, then its network's and its wide network's), the key's claim,
/// the replay, the admission, the fast path.
const ADMITTED: [&str; 9] = [
    "jobs.occupancy",
    "limiter.hit",
    "limiter.hit",
    "limiter.hit",
    "idempotency.claim",
    "replays.put",
    "jobs.admit",
    "queue.publish",
    "outbox.mark_dispatched",
];

/// Refused for the service's state after the rate limit: the three windows' hits given back,
/// each once its given-back window allows it.
const GIVEN_BACK: [&str; 6] = [
    "limiter.hit",
    "limiter.give_back",
    "limiter.hit",
    "limiter.give_back",
    "limiter.hit",
    "limiter.give_back",
];

/// The calls of a render refused for the service's state after the look, the three windows and
/// `before_refusal`: those, then the hits given back.
fn refused_after_rate_limit(before_refusal: &str) -> Vec<&str> {
    let counted = [
        "jobs.occupancy",
        "limiter.hit",
        "limiter.hit",
        "limiter.hit",
    ];
    let mut calls = counted.to_vec();
    calls.push(before_refusal);
    calls.extend(GIVEN_BACK);
    calls
}

#[tokio::test]
async fn an_admitted_render_calls_each_port_once_in_admission_order() {
    let (app, memory) = App::in_memory(config(&[]));
    let job = admitted(render(&app, 1, Some("k-1")).await);
    assert_eq!(memory.calls.take(), ADMITTED);
    assert_eq!(memory.database.job_ids(), [job]);
    assert_eq!(memory.objects.keys(), [job.replay_key()]);
    assert_eq!(memory.queue.sent_jobs(), [job]);
    assert_eq!(memory.database.claims_in_progress(), 0);

    // The retry is answered from the look: no quota, no slot, nothing else touched.
    let retry = render(&app, 1, Some("k-1")).await;
    assert!(matches!(retry, Ok(Reply::Replayed(_))), "{retry:?}");
    assert_eq!(memory.calls.take(), ["jobs.occupancy"]);
}

/// The rate limit shields the database: a keyed request over it has only read its key.
#[tokio::test]
async fn a_keyed_request_over_the_rate_limit_claims_nothing() {
    let (app, memory) = App::in_memory(config(&[("RATE_LIMIT_RENDER", "1/minute")]));
    admitted(render(&app, 2, None).await);
    memory.calls.take();
    let other_replay = form(&with_other_bytes(VALID_REPLAY), "play.osr", &[]);
    let key = HeaderValue::from_static("fresh-key");
    let refused = submit_render(&app, &client(2), Some(&key), other_replay).await;
    assert_eq!(refused.outcome.unwrap_err().code(), "rate_limited");
    assert_eq!(memory.calls.take(), ["jobs.occupancy", "limiter.hit"]);
    assert_eq!(memory.database.claims_in_progress(), 0);
}

#[tokio::test]
async fn steps_one_to_three_refuse_before_any_port() {
    let (app, memory) = App::in_memory(config(&[]));
    let cases = [
        (form(VALID_REPLAY, "play.txt", &[]), "invalid_file"),
        (form(b"", "play.osr", &[]), "invalid_file"),
        (form(b"not a replay", "play.osr", &[]), "invalid_replay"),
        (
            form(VALID_REPLAY, "play.osr", &[("skin", "../etc")]),
            "invalid_field",
        ),
        (
            form(VALID_REPLAY, "play.osr", &[("resolution", "8k")]),
            "invalid_field",
        ),
    ];
    for (upload, code) in cases {
        let refused = submit_render(&app, &client(2), None, upload).await;
        assert_eq!(refused.outcome.unwrap_err().code(), code);
        assert!(refused.rate.is_none(), "{code}: no quota spent");
        assert_eq!(memory.calls.take(), Vec::<&str>::new(), "{code}");
    }
    let bad_key = HeaderValue::from_static("");
    let refused = submit_render(&app, &client(2), Some(&bad_key), valid()).await;
    assert_eq!(
        refused.outcome.unwrap_err().code(),
        "invalid_idempotency_key"
    );
    assert_eq!(memory.calls.take(), Vec::<&str>::new());
}

#[tokio::test]
async fn an_instance_that_never_read_the_policy_admits_nothing() {
    let (app, memory) = App::in_memory(config(&[]));
    memory.policy.set_down(true);
    for _ in 0..2 {
        let refused = render(&app, 3, None).await;
        assert_eq!(refused.unwrap_err(), Rejection::DatabaseUnavailable);
    }
    assert_eq!(memory.calls.take(), Vec::<&str>::new(), "no quota, no read");
    assert_eq!(
        memory.policy.reads(),
        1,
        "retried after a while, not per request"
    );
}

#[tokio::test]
async fn a_cold_instance_refuses_a_bad_upload_without_waiting_for_the_policy() {
    let (app, memory) = App::in_memory(config(&[]));
    memory.policy.stall_reads(true);
    let truncated = form(&VALID_REPLAY[..100], "play.osr", &[]);
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        submit_render(&app, &client(4), None, truncated),
    )
    .await
    .expect("answered while the policy's first read is still out");
    assert_eq!(refused.outcome.unwrap_err().code(), "invalid_replay");
    // A valid upload waits for the read: it fails only after the stall ends, so its 503 shows
    // that it waited (without the read it would have been admitted).
    let release = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        memory.policy.set_down(true);
        memory.policy.stall_reads(false);
    };
    let (waited, ()) = tokio::join!(render(&app, 4, None), release);
    assert_eq!(waited.unwrap_err(), Rejection::DatabaseUnavailable);
    assert_eq!(memory.calls.take(), Vec::<&str>::new(), "no quota, no read");
}

#[tokio::test]
async fn with_the_policy_read_a_banned_caller_is_refused_before_its_form() {
    use crate::domain::policy::{AddressRange, BanTarget};
    use crate::ports::policy::{NewBan, PolicyStore};
    let (app, memory) = App::in_memory(config(&[]));
    let range: AddressRange = "203.6.113.0/24".parse().unwrap();
    let ban = NewBan {
        target: BanTarget::Address(range),
        reason: None,
        until: None,
    };
    memory.policy.add_ban(&ban).await.unwrap();
    // Another client's render reads the policy: the instance has it from now on.
    admitted(render(&app, 5, None).await);
    memory.calls.take();
    let truncated = form(&VALID_REPLAY[..100], "play.osr", &[]);
    let refused = submit_render(&app, &client(6), None, truncated).await;
    assert_eq!(
        refused.outcome.unwrap_err().code(),
        "banned",
        "not invalid_replay"
    );
    assert_eq!(memory.policy.reads(), 1);
}

/// A keyed client (a live key with default limits) at `203.0.{n}.9`.
fn keyed(n: u8) -> Caller {
    use crate::domain::key::{KeyId, KeyKind, KeyLimits};
    let ip = format!("203.0.{n}.9").parse().unwrap();
    Caller::keyed(
        KeyId::new(),
        KeyKind::Live,
        KeyLimits::default(),
        ClientKey::new(ip, 64),
    )
}

/// `CALLBACKS_EGRESS=false`: a `callback_url`, whoever sends it and whatever it holds, is
/// refused with the form's checks (no quota, no port reached); without one, a render is
/// admitted as ever.
#[tokio::test]
async fn without_egress_a_callback_url_is_refused_before_any_port() {
    let (app, memory) = App::in_memory(config(&[("CALLBACKS_EGRESS", "false")]));
    for (caller, url) in [
        (keyed(12), "https://bot.example/hook"),
        (keyed(12), "https://93.184.216.34/hook"),
        (keyed(12), "not a url"),
        (client(12), "https://bot.example/hook"),
    ] {
        let upload = form(VALID_REPLAY, "play.osr", &[("callback_url", url)]);
        let refused = submit_render(&app, &caller, None, upload).await;
        let rejection = refused.outcome.unwrap_err();
        assert_eq!(rejection, Rejection::CallbacksUnavailable, "{url}");
        assert_eq!(rejection.code(), "callbacks_unavailable");
        assert_eq!(rejection.status().as_u16(), 422);
        assert_eq!(rejection.retry_after(), None);
        assert!(rejection.detail().contains("callback_url"), "{url}");
        assert!(refused.rate.is_none(), "{url}: no quota spent");
        assert_eq!(memory.calls.take(), Vec::<&str>::new(), "{url}");
    }
    assert!(memory.database.job_ids().is_empty());
    // A form with an invalid field is refused for that field first (the form fields' order).
    let upload = form(
        VALID_REPLAY,
        "play.osr",
        &[
            ("resolution", "8k"),
            ("callback_url", "https://bot.example/"),
        ],
    );
    let refused = submit_render(&app, &keyed(12), None, upload).await;
    assert_eq!(refused.outcome.unwrap_err().code(), "invalid_field");
    let job = admitted(submit_render(&app, &keyed(12), None, valid()).await.outcome);
    assert_eq!(memory.database.job_ids(), [job]);

    // With egress (the default) the same keyed request is admitted with its callback.
    let (app, memory) = App::in_memory(config(&[]));
    let upload = form(
        VALID_REPLAY,
        "play.osr",
        &[("callback_url", "https://bot.example/hook")],
    );
    let job = admitted(submit_render(&app, &keyed(12), None, upload).await.outcome);
    assert_eq!(memory.database.job_ids(), [job]);
}

#[tokio::test]
async fn a_job_with_a_callback_wakes_the_dispatcher_for_its_first_one() {
    let (app, memory) = App::in_memory(config(&[]));
    admitted(submit_render(&app, &keyed(13), None, valid()).await.outcome);
    assert!(
        memory.wake.asked().is_empty(),
        "a job without a callback wakes nothing"
    );
    // Unless its key is followed live: its push is due from its admission.
    let followed = keyed(14);
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    let topic = crate::domain::events::Topic::Key(followed.client().clone());
    app.pushes.watch(&topic, until).await.unwrap();
    admitted(submit_render(&app, &followed, None, valid()).await.outcome);
    assert_eq!(
        memory.wake.asked(),
        [Duration::ZERO],
        "a followed key's job wakes"
    );
    memory.wake.take_due();
    let with_callback = |replay| {
        form(
            replay,
            "play.osr",
            &[("callback_url", "https://bot.example/hook")],
        )
    };
    admitted(
        submit_render(&app, &keyed(12), None, with_callback(VALID_REPLAY))
            .await
            .outcome,
    );
    assert_eq!(
        memory.wake.asked(),
        [Duration::ZERO],
        "at once, after the commit"
    );
    // A wake that cannot be sent does not fail the admission: the schedule sends the callback.
    memory.wake.set_down(true);
    let other = include_bytes!("../../../../../tests/fixtures/replays/valid_1.osr");
    admitted(
        submit_render(&app, &keyed(15), None, with_callback(other))
            .await
            .outcome,
    );
    assert_eq!(memory.database.job_ids().len(), 4);
}

#[tokio::test]
async fn each_later_step_refuses_in_its_place_and_leaves_nothing() {
    // The duplicate is seen by the look alone, before the limit counts it.
    let (app, memory) = App::in_memory(config(&[]));
    admitted(render(&app, 3, None).await);
    memory.calls.take();
    // An anonymous client is not told the job's id (its address may be shared).
    assert_eq!(
        render(&app, 3, None).await.unwrap_err(),
        Rejection::DuplicateReplay(None)
    );
    assert_eq!(memory.calls.take(), ["jobs.occupancy"]);

    // The rate limit: counted, nothing stored.
    let (app, memory) = App::in_memory(config(&[("RATE_LIMIT_RENDER", "1/minute")]));
    assert_eq!(second_render(&app, &memory, 4).await, "rate_limited");
    // The client's window refused: its network's is not spent for it.
    assert_eq!(memory.calls.take(), ["jobs.occupancy", "limiter.hit"]);

    // Queue depth, render capacity, active jobs: refused from the look, with a Retry-After from the load.
    for (vars, status, code) in [
        (("MAX_QUEUED", "3"), JobStatus::Queued, "queue_full"),
        (
            ("MAX_RENDERING", "3"),
            JobStatus::Rendering,
            "render_capacity",
        ),
    ] {
        let (app, memory) = App::in_memory(config(&[vars]));
        memory.database.occupy(status, 3);
        let refused = render(&app, 5, None).await.unwrap_err();
        assert_eq!(refused.code(), code);
        assert_eq!(
            memory.calls.take(),
            refused_after_rate_limit("jobs.load"),
            "{code}"
        );
        assert!(memory.objects.keys().is_empty(), "{code}: nothing stored");
    }
    let (app, memory) = App::in_memory(config(&[("MAX_ACTIVE_JOBS_PER_IP", "1")]));
    assert_eq!(
        second_render(&app, &memory, 6).await,
        "too_many_active_jobs"
    );
    assert_eq!(memory.calls.take(), refused_after_rate_limit("jobs.load"));
}

/// Client `who`'s render admitted, then its render of another replay refused: that refusal's
/// code, with only the second render's port calls left to take.
async fn second_render(app: &App, memory: &Memory, who: u8) -> &'static str {
    admitted(render(app, who, None).await);
    memory.calls.take();
    let other_replay = form(&with_other_bytes(VALID_REPLAY), "play.osr", &[]);
    let refused = submit_render(app, &client(who), None, other_replay).await;
    refused.outcome.unwrap_err().code()
}

#[tokio::test]
async fn each_network_window_is_counted_only_for_a_request_the_narrower_ones_allowed() {
    let (app, memory) = App::in_memory(config(&[
        ("RATE_LIMIT_RENDER_NETWORK", "1/minute"),
        ("RATE_LIMIT_RENDER_WIDE_NETWORK", "2/minute"),
    ]));
    let submit = |caller: Caller| {
        let app = &app;
        async move { submit_render(app, &caller, None, valid()).await.outcome }
    };
    admitted(submit(Caller::anonymous_at("198.51.1.9")).await);
    memory.calls.take();
    // The network's window refuses: its wide network's is not spent for it.
    let refused = submit(Caller::anonymous_at("198.51.1.10"))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        "rate_limited",
        "the network's window: {refused:?}"
    );
    assert_eq!(
        memory.calls.take(),
        ["jobs.occupancy", "limiter.hit", "limiter.hit"]
    );
    // So the wide network still has its second render, for another of its networks ...
    admitted(submit(Caller::anonymous_at("198.51.2.9")).await);
    // ... and then refuses a third network, naming itself.
    let refused = submit(Caller::anonymous_at("198.51.3.9"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Rejection::RateLimited(_, LimitScope::WideNetwork)),
        "{refused:?}"
    );
    let problem = problem_body(refused).await;
    assert_eq!(problem["scope"], "network", "a documented scope");
    assert!(
        problem["detail"].as_str().unwrap().contains("wide network"),
        "{problem}"
    );
    // Another wide network is not held to it.
    admitted(submit(Caller::anonymous_at("198.52.3.9")).await);
}

/// A refusal's problem+json body, as the client reads it.
async fn problem_body(rejection: Rejection) -> serde_json::Value {
    use axum::response::IntoResponse;
    let body = rejection.into_response().into_body();
    let bytes = axum::body::to_bytes(body, 1 << 16).await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn a_wide_network_is_held_to_its_cap_of_active_jobs() {
    let (app, _) = App::in_memory(config(&[
        ("MAX_ACTIVE_PER_NETWORK", "1"),
        ("MAX_ACTIVE_PER_WIDE_NETWORK", "2"),
    ]));
    let submit = |ip: &'static str| {
        let app = &app;
        async move {
            submit_render(app, &Caller::anonymous_at(ip), None, valid())
                .await
                .outcome
        }
    };
    admitted(submit("198.51.1.9").await);
    admitted(submit("198.51.2.9").await);
    let refused = submit("198.51.3.9").await.unwrap_err();
    match refused {
        Rejection::TooManyActiveJobs { limit, scope, .. } => {
            assert_eq!((limit, scope), (2, LimitScope::WideNetwork));
        }
        other => panic!("the wide network's cap, not {other:?}"),
    }
    admitted(submit("198.52.3.9").await);
}

#[tokio::test]
async fn outages_refuse_with_nothing_half_done() {
    let (app, memory) = App::in_memory(config(&[]));
    memory.limiter.set_down(true);
    let refused = render(&app, 7, Some("k-7")).await.unwrap_err();
    assert_eq!(refused, Rejection::LimiterUnavailable);
    assert!(memory.objects.keys().is_empty());
    assert_eq!(
        memory.database.claims_in_progress(),
        0,
        "the key is free again"
    );
    memory.limiter.set_down(false);
    memory.calls.take();

    memory.objects.set_down(true);
    let refused = render(&app, 7, Some("k-7")).await.unwrap_err();
    assert_eq!(refused, Rejection::ReplayStorageUnavailable);
    assert!(memory.database.job_ids().is_empty());
    assert_eq!(memory.database.claims_in_progress(), 0);
    memory.objects.set_down(false);

    // The queue down: admitted all the same, the outbox keeps the event for the sweep.
    memory.queue.set_down(true);
    admitted(render(&app, 7, Some("k-7")).await);
    assert!(memory.queue.sent_jobs().is_empty());
}

#[tokio::test]
async fn a_late_answer_after_the_commit_is_resolved_to_the_job() {
    let (app, memory) = App::in_memory(config(&[]));
    memory.database.fail_next_admit(AdmitFault::LateAnswer);
    let job = admitted(render(&app, 8, Some("k-8")).await);
    let calls = memory.calls.take();
    // As an admitted render up to the admission, then the resolution of its late answer.
    assert_eq!(&calls[..7], &ADMITTED[..7]);
    assert_eq!(calls[7], "jobs.resolve");
    assert_eq!(memory.database.job_ids(), [job]);
    assert_eq!(
        memory.objects.keys(),
        [job.replay_key()],
        "the replay is kept"
    );
    assert_eq!(memory.queue.sent_jobs(), [job], "and the job is published");
    let retry = render(&app, 8, Some("k-8")).await;
    assert!(matches!(retry, Ok(Reply::Replayed(_))), "{retry:?}");
}

#[tokio::test]
async fn a_statement_arriving_after_its_resolution_admits_nothing() {
    let (app, memory) = App::in_memory(config(&[]));
    memory
        .database
        .fail_next_admit(AdmitFault::ArrivesAfterResolve);
    let refused = render(&app, 9, Some("k-9")).await.unwrap_err();
    assert_eq!(refused, Rejection::DatabaseUnavailable);
    assert!(
        memory.database.job_ids().is_empty(),
        "the fence refused the late statement"
    );
    assert!(
        memory.objects.keys().is_empty(),
        "known not admitted: the replay is deleted"
    );
    assert_eq!(
        memory.database.claims_in_progress(),
        0,
        "and the key released"
    );
    admitted(render(&app, 9, Some("k-9")).await);
}

#[tokio::test]
async fn an_error_admits_nothing_and_an_unresolved_outcome_keeps_everything() {
    let (app, memory) = App::in_memory(config(&[]));
    memory.database.fail_next_admit(AdmitFault::Error);
    assert_eq!(
        render(&app, 10, Some("k-10")).await.unwrap_err(),
        Rejection::DatabaseUnavailable
    );
    assert!(
        !memory.calls.take().contains(&"jobs.resolve"),
        "an error is no unknown"
    );
    assert!(memory.objects.keys().is_empty());
    assert_eq!(memory.database.claims_in_progress(), 0);

    memory.database.fail_next_admit(AdmitFault::LateAnswer);
    memory.database.fail_resolve(true);
    let refused = render(&app, 11, Some("k-11")).await.unwrap_err();
    assert_eq!(refused, Rejection::AdmissionUnknown);
    assert_eq!(
        refused.retry_after(),
        Some(crate::support::problem::RETRY_UNAVAILABLE_SECS)
    );
    let job = memory.database.job_ids()[0];
    assert_eq!(
        memory.objects.keys(),
        [job.replay_key()],
        "the committed job keeps its replay"
    );
    assert_eq!(
        memory.database.claims_in_progress(),
        0,
        "the key answers with the job"
    );
    memory.database.fail_resolve(false);
    let retry = render(&app, 11, Some("k-11")).await;
    assert!(matches!(retry, Ok(Reply::Replayed(_))), "{retry:?}");
}

/// The same play with trailing bytes (which osrparse ignores, as the validator does): another
/// file to the duplicate check.
fn with_other_bytes(replay: &[u8]) -> Vec<u8> {
    [replay, b"another file"].concat()
}

/// An option beyond the caller's entitlements is refused with the form's checks: a 403 naming
/// the field, no quota read, no port reached (the entitlements came with the caller). A key's
/// own replace the anonymous ones, a sandbox key's included.
#[tokio::test]
async fn an_option_beyond_the_entitlements_is_refused_before_any_port() {
    use crate::domain::entitlement::{DeniedOptions, Entitlements};
    use crate::domain::key::{KeyId, KeyKind, KeyLimits};
    use crate::domain::Resolution;

    let (app, memory) = App::in_memory(config(&[
        ("ANONYMOUS_MAX_RESOLUTION", "720p"),
        ("ANONYMOUS_DENY", "motion_blur"),
    ]));
    let limits = KeyLimits::default().with_entitlements(Entitlements {
        max_resolution: Some(Resolution::Qhd1440),
        denied: DeniedOptions::parse("video").unwrap(),
    });
    let address = ClientKey::new("203.0.113.9".parse().unwrap(), 64);
    let sandbox = Caller::keyed(KeyId::new(), KeyKind::Sandbox, limits, address);
    for (caller, fields, field) in [
        (client(20), &[("resolution", "1080p")][..], "resolution"),
        (client(20), &[("motion_blur", "true")][..], "motion_blur"),
        (sandbox.clone(), &[("resolution", "4k")][..], "resolution"),
        (sandbox.clone(), &[("video", "yes")][..], "video"),
    ] {
        let upload = form(VALID_REPLAY, "play.osr", fields);
        let refused = submit_render(&app, &caller, None, upload).await;
        let rejection = refused.outcome.unwrap_err();
        assert_eq!(rejection.code(), "option_not_permitted", "{fields:?}");
        assert_eq!(rejection.status().as_u16(), 403);
        assert!(
            matches!(&rejection, Rejection::OptionNotPermitted { field: f, .. } if *f == field)
        );
        assert!(
            rejection.detail().starts_with(field),
            "{}",
            rejection.detail()
        );
        assert!(refused.rate.is_none(), "{fields:?}: no quota spent");
        assert_eq!(memory.calls.take(), Vec::<&str>::new(), "{fields:?}");
    }
    // Within them: admitted, a form without `resolution` at the highest permitted one.
    admitted(
        submit_render(&app, &client(20), None, valid())
            .await
            .outcome,
    );
    let upload = form(VALID_REPLAY, "play.osr", &[("motion_blur", "true")]);
    admitted(submit_render(&app, &sandbox, None, upload).await.outcome);
}

/// A skin outside the registry is refused after the rate limit, which bounds the registry
/// reads; the built-in skin costs no read.
#[tokio::test]
async fn an_unknown_skin_is_looked_up_after_the_rate_limit() {
    let (app, memory) = App::in_memory(config(&[]));
    let upload = form(VALID_REPLAY, "play.osr", &[("skin", "NoSuchSkin")]);
    let refused = submit_render(&app, &client(21), None, upload).await;
    let rate = refused.rate.expect("the rate limit was counted first");
    assert_eq!(rate.remaining, rate.limit, "and its hit given back");
    assert_eq!(refused.outcome.unwrap_err().code(), "unknown_skin");
    assert_eq!(
        memory.calls.take(),
        refused_after_rate_limit("skin_names.state")
    );
    let upload = form(VALID_REPLAY, "play.osr", &[("skin", "default")]);
    admitted(submit_render(&app, &client(21), None, upload).await.outcome);
    assert!(!memory.calls.take().contains(&"skin_names.state"));
}

/// Every bad option is listed, the first is the detail.
#[tokio::test]
async fn every_bad_option_is_listed() {
    let (app, _memory) = App::in_memory(config(&[]));
    let upload = form(
        VALID_REPLAY,
        "play.osr",
        &[("bg_dim", "2"), ("video", "perhaps"), ("skin", "a/b")],
    );
    let refused = submit_render(&app, &client(22), None, upload).await;
    let Err(Rejection::InvalidParams(invalid)) = refused.outcome else {
        panic!("refused with every bad field")
    };
    let names: Vec<_> = invalid.iter().map(|param| param.name.as_str()).collect();
    assert_eq!(names, ["bg_dim", "video", "skin"]);
}

#[tokio::test]
async fn a_full_farm_keeps_a_job_in_the_queue_of_record_until_a_slot_frees() {
    use crate::ports::jobs::{JobReport, Nonce, Transition};
    let (app, memory) = App::in_memory(config(&[("RENDER_SLOTS", "1"), ("RELEASE_AHEAD", "0")]));
    let first = admitted(render(&app, 10, None).await);
    let second = admitted(render(&app, 11, None).await);
    assert_eq!(memory.queue.sent_jobs(), [first], "the farm's one slot");
    let failed = Transition {
        to: JobStatus::Failed,
        progress: None,
        video_key: None,
        thumb_key: None,
        error: None,
        error_code: None,
        deadline_in: None,
    };
    let nonce = Nonce {
        value: "n-1".into(),
        expires_at: chrono::Utc::now() + chrono::Duration::minutes(5),
    };
    app.transitions
        .transition(&JobReport {
            id: first,
            transition: &failed,
            nonce: &nonce,
        })
        .await
        .unwrap();
    crate::usecases::outbox::release_to_farm(&app).await;
    assert_eq!(
        memory.queue.sent_jobs(),
        [first, second],
        "an ended job frees its slot for the next"
    );
}

#[tokio::test]
async fn a_start_later_than_max_queue_wait_is_refused_with_when_it_would_fit() {
    let vars = [
        ("MAX_QUEUE_WAIT", "60"),
        ("RENDER_SLOTS", "1"),
        ("RELEASE_AHEAD", "0"),
        ("DEFAULT_RENDER_SECS", "120"),
    ];
    let (app, memory) = App::in_memory(config(&vars));
    // One slot, rendering a job of an earlier release (DEFAULT_RENDER_SECS), just begun.
    memory.database.occupy(JobStatus::Rendering, 1);
    let refused = render(&app, 12, None).await.unwrap_err();
    assert_eq!(refused, Rejection::QueueFull { retry_after: 60 });
    assert!(memory.objects.keys().is_empty(), "nothing stored");
    let (app, memory) = App::in_memory(config(&[("MAX_QUEUE_WAIT", "180"), vars[1], vars[2]]));
    memory.database.occupy(JobStatus::Rendering, 1);
    admitted(render(&app, 13, None).await);
}
