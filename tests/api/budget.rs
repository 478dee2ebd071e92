//! The round-trip budget of `POST /v1/render` (DESIGN.md §5), counted by proxies between the
//! server and its backing services: an admitted request costs 3 DynamoDB calls (an anonymous
//! client's window, its network's and its wide network's; a key's, 1), at most 3 Postgres
//! round trips (the dispatched mark included), 1 S3 PUT and 1 SQS send; each rejection touches
//! only what its step needs. Steady state is asserted (after a warm-up request has
//! opened the connections); a fresh instance's first request is counted separately.
//!
//! New connections to Postgres are asserted away in steady state; to the AWS stand-in they are
//! only reported: moto answers `Connection: close`, so every call there opens one (on AWS the
//! SDK's pool keeps them alive).
//!
//! Every measurement prints a `budget:` line: `cargo test -p osurender-tests --test api budget
//! -- --nocapture` shows them (bench/run copies them into docs/PERFORMANCE.md).

use std::net::IpAddr;

use osurender_core::domain::caller::Caller;
use osurender_core::domain::client::ClientKey;
use osurender_core::usecases::admission::submit_render;
use osurender_core::usecases::request::FormUpload;
use osurender_core::Clients;
use osurender_testkit::proxy::{Counts, Fault};
use reqwest::StatusCode;

use crate::support::app::{problem, Proxies, TestApp};
use crate::support::replays::{fixture, form_without_replay, multipart, render_form, valid_form};

/// What one request may cost: Postgres round trips at most, and exactly these AWS calls.
struct Budget {
    pg_round_trips: u64,
    aws: &'static [(&'static str, u64)],
}

/// An anonymous client's render counts three windows: its own, its network's and its wide
/// network's.
const ADMITTED: Budget = Budget {
    pg_round_trips: 3,
    aws: &[
        ("DynamoDB.UpdateItem", 3),
        ("S3.PutObject", 1),
        ("SQS.SendMessageBatch", 1),
    ],
};

/// The replay file, its structure and rules, and the form fields refuse before any state is
/// touched.
const NOTHING: Budget = Budget {
    pg_round_trips: 0,
    aws: &[],
};

/// The rate limit's refusal by the client's own window: the limiter's one call (the networks'
/// windows are not spent for it), after the one read that looks for a duplicate of the replay
/// (the look, which a duplicate must pass without spending quota) and takes the occupancy
/// counts.
const RATE_LIMITED: Budget = Budget {
    pg_round_trips: 1,
    aws: &[("DynamoDB.UpdateItem", 1)],
};

/// The queue depth's, render capacity's and active jobs' early refusal: that read, the limiter, and the load read the refusal's
/// `Retry-After` is estimated from; then, a refusal for the service's state, each window's hit
/// given back (its given-back window counted, then the hit taken back: two writes per window).
/// Nothing is stored or locked.
const CAPACITY_REFUSED: Budget = Budget {
    pg_round_trips: 2,
    aws: &[("DynamoDB.UpdateItem", 9)],
};

/// The skin registry's refusal of a skin outside it: the occupancy read, the three windows, and
/// the registry's point read; the hits given back as for a capacity refusal. Nothing is stored
/// or locked.
const UNKNOWN_SKIN: Budget = Budget {
    pg_round_trips: 2,
    aws: &[("DynamoDB.UpdateItem", 9)],
};

/// Long windows and room for every request: only the case under test refuses.
const ROOMY: &[(&str, &str)] = &[
    ("RATE_LIMIT_RENDER", "1000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "1000"),
];

/// Prints what crossed the proxies since the last reset and returns the counts.
fn measure(label: &str, proxies: &Proxies) -> (Counts, Counts) {
    let (pg, aws) = (proxies.postgres.counts(), proxies.aws.counts());
    let calls: Vec<String> = aws.http.iter().map(|(op, n)| format!("{op} {n}")).collect();
    println!(
        "budget: {label}: postgres {} round trips ({} statements), {} new connections; \
         AWS {} calls [{}], {} new connections",
        pg.pg_round_trips,
        pg.pg_syncs,
        pg.connections,
        aws.http_requests(),
        calls.join(", "),
        aws.connections,
    );
    assert_eq!(pg.unparsed_connections + aws.unparsed_connections, 0);
    (pg, aws)
}

/// Asserts a steady-state request kept to `budget` and opened no Postgres connection.
fn assert_within(label: &str, proxies: &Proxies, budget: &Budget) {
    let (pg, aws) = measure(label, proxies);
    assert!(
        pg.pg_round_trips <= budget.pg_round_trips,
        "{label}: {} Postgres round trips, budget {}",
        pg.pg_round_trips,
        budget.pg_round_trips
    );
    let expected: Vec<(String, u64)> = budget
        .aws
        .iter()
        .map(|(op, n)| (op.to_string(), *n))
        .collect();
    let actual: Vec<(String, u64)> = aws.http.into_iter().collect();
    assert_eq!(actual, expected, "{label}: AWS calls");
    assert_eq!(
        pg.connections, 0,
        "{label}: the pooled connection is reused"
    );
}

#[tokio::test]
async fn an_admitted_request_stays_within_budget() {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    proxies.reset();
    let warm_up = app.render("203.0.113.1", valid_form()).await;
    assert_eq!(warm_up.status(), StatusCode::ACCEPTED);
    // The dev server's start (migrations) left its pooled connection open.
    measure("admitted, first request of the dev server", &proxies);
    for ip in ["203.0.113.2", "203.0.113.3"] {
        proxies.reset();
        assert_eq!(
            app.render(ip, valid_form()).await.status(),
            StatusCode::ACCEPTED
        );
        assert_within("admitted (steady state)", &proxies, &ADMITTED);
    }
    let dispatched = "SELECT count(*) FROM outbox_events WHERE status = 'dispatched'";
    assert_eq!(app.count(dispatched).await, 3, "the fast path marked each");
}

/// The first request of a new instance (as a Lambda cold start: clients built, nothing
/// connected), with the queue URL configured as `template.yaml` does, and with only its name.
#[tokio::test]
async fn a_fresh_instance_pays_only_connections_and_the_queue_lookup() {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    let queue_url = app
        .sqs
        .get_queue_url()
        .queue_name(&app.queue)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let mut by_url = app.config.clone();
    by_url.aws.render_queue_url = Some(queue_url);
    for (label, config, lookups, ip) in [
        (
            "admitted, fresh instance, RENDER_QUEUE_URL set",
            by_url,
            0,
            "203.0.113.20",
        ),
        (
            "admitted, fresh instance, queue by name",
            app.config.clone(),
            1,
            "203.0.113.21",
        ),
    ] {
        let clients = Clients::new(&config).await.unwrap();
        let instance = clients.app(config);
        proxies.reset();
        let (content_type, body) = multipart(&fixture("valid_0.osr"));
        let ip: IpAddr = ip.parse().unwrap();
        let upload = FormUpload {
            content_type: Some(content_type),
            content_length: Some(body.len() as u64),
            body: futures_util::stream::iter([Ok::<_, std::io::Error>(body)]),
        };
        let submission = submit_render(
            &instance,
            &Caller::anonymous(
                ClientKey::new(ip, 64),
                ClientKey::new(ip, 64),
                ClientKey::new(ip, 64),
            ),
            None,
            upload,
        )
        .await;
        assert!(submission.outcome.is_ok(), "{:?}", submission.outcome);

        let (pg, aws) = measure(label, &proxies);
        // And the instance's first read of the operator's policy (then one per
        // POLICY_CACHE_TTL, whatever the traffic).
        assert!(pg.pg_round_trips <= ADMITTED.pg_round_trips + 1);
        assert_eq!(
            pg.connections, 1,
            "one pooled connection, opened on first use"
        );
        assert_eq!(aws.op("SQS.GetQueueUrl"), lookups);
        assert_eq!(aws.http_requests(), 5 + lookups);
    }
}

/// The instance's first read of the operator's policy (bans, pause), which it then keeps for
/// `POLICY_CACHE_TTL`: made by `GET /v1/status`, which waits for it (a render refused at the
/// replay file, its structure or rules, or the form fields does not: its answer does not wait
/// for the instance's first read).
async fn warm_policy(app: &TestApp) {
    let response = app.get("/v1/status").await;
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn refusals_before_the_limiter_touch_nothing() {
    let (app, proxies) =
        TestApp::spawn_via_proxies(&[("MAX_REPLAY_BYTES", "30000"), ("ANONYMOUS_DENY", "video")])
            .await;
    let ip = "198.51.100.30";
    warm_policy(&app).await;
    let cases = [
        (
            "400 invalid_file",
            form_without_replay(),
            StatusCode::BAD_REQUEST,
            "invalid_file",
        ),
        (
            "413 file_too_large",
            render_form(fixture("valid_long.osr"), "long.osr", &[]),
            StatusCode::PAYLOAD_TOO_LARGE,
            "file_too_large",
        ),
        (
            "415 invalid_replay",
            render_form(fixture("corrupt_garbage_lzma.osr"), "bad.osr", &[]),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_replay",
        ),
        (
            "422 invalid_field",
            render_form(fixture("valid_0.osr"), "play.osr", &[("skin", "../etc")]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        ),
        (
            "403 option_not_permitted",
            render_form(fixture("valid_0.osr"), "play.osr", &[("video", "true")]),
            StatusCode::FORBIDDEN,
            "option_not_permitted",
        ),
    ];
    for (label, form, status, code) in cases {
        proxies.reset();
        problem(app.render(ip, form).await, status, code).await;
        assert_within(label, &proxies, &NOTHING);
    }
}

#[tokio::test]
async fn an_unknown_skin_costs_one_registry_read_after_the_limiter() {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    let ip = "198.51.100.32";
    let warm_up = app.render(ip, valid_form()).await;
    assert_eq!(warm_up.status(), StatusCode::ACCEPTED);
    proxies.reset();
    let form = render_form(
        fixture("valid_1.osr"),
        "play.osr",
        &[("skin", "NoSuchSkin")],
    );
    problem(
        app.render(ip, form).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "unknown_skin",
    )
    .await;
    assert_within("422 unknown_skin", &proxies, &UNKNOWN_SKIN);
}

/// Whether a statement only reads: a plain `SELECT` that takes no row lock and calls nothing
/// that writes or locks (the admission functions, advisory locks, sequences, settings). Words
/// are compared whole: `updated_at` is no `UPDATE`.
fn only_reads(sql: &str) -> bool {
    let sql = sql.to_ascii_uppercase();
    let words: Vec<&str> = sql
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .collect();
    let writes_or_locks = [
        "INSERT",
        "UPDATE",
        "DELETE",
        "MERGE",
        "LOCK",
        "ADMIT_JOB",
        "RESOLVE_ADMISSION",
        "NEXTVAL",
        "SET_CONFIG",
    ];
    let row_locks = [
        "FOR SHARE",
        "FOR KEY SHARE",
        "FOR NO KEY UPDATE",
        "FOR UPDATE",
    ];
    words.first() == Some(&"SELECT")
        && !words
            .iter()
            .any(|word| writes_or_locks.contains(word) || word.starts_with("PG_ADVISORY"))
        && !row_locks.iter().any(|lock| sql.contains(lock))
}

/// A client whose render window is already spent, sending no `Idempotency-Key`: at most one
/// Postgres statement, a read (the occupancy look), and no write or lock, before its 429.
#[tokio::test]
async fn a_rate_limited_request_touches_only_the_limiter() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[("RATE_LIMIT_RENDER", "1/hour")]).await;
    let ip = "198.51.100.31";
    assert_eq!(
        app.render(ip, valid_form()).await.status(),
        StatusCode::ACCEPTED
    );
    proxies.reset();
    // Another replay: the same one would be answered as a duplicate of the first job.
    let other = render_form(fixture("valid_1.osr"), "other.osr", &[]);
    problem(
        app.render(ip, other).await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    )
    .await;
    let statements = proxies.postgres.counts().pg_statements;
    assert_within("429 rate_limited", &proxies, &RATE_LIMITED);
    assert!(statements.len() <= 1, "{statements:#?}");
    assert!(
        statements.iter().all(|sql| only_reads(sql)),
        "{statements:#?}"
    );
}

#[test]
fn only_reads_tells_reads_from_writes_and_locks() {
    assert!(only_reads(
        "SELECT count(*) FROM jobs WHERE status = 'queued'"
    ));
    assert!(only_reads(
        "SELECT max(updated_at) FROM jobs WHERE status = 'failed'"
    ));
    for sql in [
        "INSERT INTO idempotency_keys VALUES (1)",
        "SELECT verdict FROM admit_job($1::jsonb)",
        "SELECT id FROM outbox_events FOR UPDATE SKIP LOCKED",
        "SELECT pg_advisory_xact_lock(1)",
        "SELECT id FROM jobs FOR KEY SHARE",
        "SELECT id FROM jobs FOR NO KEY UPDATE",
        "WITH x AS (DELETE FROM jobs RETURNING 1) SELECT count(*) FROM x",
    ] {
        assert!(!only_reads(sql), "{sql}");
    }
}

/// The capacity refusals end at the unlocked pre-check: nothing is uploaded or locked.
#[tokio::test]
async fn capacity_refusals_cost_the_limiter_and_two_reads() {
    let cases = [
        ("MAX_QUEUED", StatusCode::SERVICE_UNAVAILABLE, "queue_full"),
        (
            "MAX_RENDERING",
            StatusCode::SERVICE_UNAVAILABLE,
            "render_capacity",
        ),
        (
            "MAX_ACTIVE_JOBS_PER_IP",
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_active_jobs",
        ),
    ];
    for (cap, status, code) in cases {
        let overrides = [("RATE_LIMIT_RENDER", "1000/hour"), (cap, "0")];
        let (app, proxies) = TestApp::spawn_via_proxies(&overrides).await;
        let ip = "198.51.100.32";
        // Warm-up: the same refusal, opening the connections.
        problem(app.render(ip, valid_form()).await, status, code).await;
        proxies.reset();
        problem(app.render(ip, valid_form()).await, status, code).await;
        let label = format!("{} {code}", status.as_u16());
        assert_within(&label, &proxies, &CAPACITY_REFUSED);
        assert!(
            app.replay_objects().await.is_empty(),
            "{code}: nothing stored"
        );
    }
}

/// With DynamoDB unreachable the request is refused (503) after the duplicate read, without
/// storing anything or touching Postgres again.
#[tokio::test]
async fn a_limiter_outage_touches_nothing_else() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[("AWS_TIMEOUT_MS", "2000")]).await;
    warm_policy(&app).await;
    proxies.aws.set_fault(Fault::Refuse);
    proxies.aws.cut_connections();
    proxies.reset();
    problem(
        app.render("198.51.100.33", valid_form()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "limiter_unavailable",
    )
    .await;
    let (pg, aws) = measure("503 limiter_unavailable (AWS refused)", &proxies);
    assert!(pg.pg_round_trips <= RATE_LIMITED.pg_round_trips);
    assert_eq!(pg.connections, 0);
    assert_eq!(aws.http_requests(), 0);
    assert!(aws.connections >= 1, "the SDK tried");
}

/// Health checks cost the dependencies one probe per `HEALTH_CHECK_INTERVAL` per
/// instance, however many arrive at once: one Postgres round trip and one call of each probe
/// (`DescribeTable`, `HeadBucket`, `GetQueueAttributes`; the dev server also looks up its
/// queue's URL once) for 50 requests (well within the interval, so all share the first probe).
#[tokio::test]
async fn fifty_health_checks_at_once_cost_one_probe() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[
        ("OUTBOX_SWEEP_INTERVAL", "0"),
        ("JANITOR_INTERVAL", "0"),
        ("SKIN_INGEST_INTERVAL", "0"),
        ("HEALTH_CHECK_INTERVAL", "5"),
    ])
    .await;
    proxies.reset();
    let answers = futures_util::future::join_all((0..50).map(|_| async {
        let response = app.http.get(app.url("/health")).send().await.unwrap();
        response.status()
    }))
    .await;
    assert!(
        answers.iter().all(|status| *status == StatusCode::OK),
        "{answers:?}"
    );
    let (pg, aws) = measure("50 health checks", &proxies);
    assert!(pg.pg_round_trips <= 1, "{pg:?}");
    for op in [
        "DynamoDB.DescribeTable",
        "S3.HeadBucket",
        "SQS.GetQueueAttributes",
    ] {
        assert_eq!(aws.op(op), 1, "{op}: {:?}", aws.http);
    }
    assert!(aws.http.values().all(|calls| *calls == 1), "{:?}", aws.http);
}
