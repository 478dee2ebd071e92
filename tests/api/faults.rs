//! Fault injection: the server reaches Postgres and the AWS stand-in through proxies
//! the tests control (the testkit's, testkit/src/proxy), which refuse, cut, slow down or
//! swallow its traffic.
//! For each fault: the answer (503 with `Retry-After`, never a hang past a bound) and the state
//! after it (no active job without its replay, no outbox event without its job, no advisory
//! lock left held, and every event delivered once the service is back).
//!
//! The resource-level outages (bucket, limiter table, render queue deleted) are in render.rs
//! and lifecycle.rs; here the faults are on the wire. The checks are in support/invariants.rs;
//! faults on one statement or request at each step, with unknown outcomes, are in outcomes.rs.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use osurender_core::support::refreshed::RETRY_AFTER_FAILURE;
use osurender_testkit::proxy::Fault;
use reqwest::{Response, StatusCode};

use crate::support::app::{header, problem, Proxies, TestApp};
use crate::support::replays::valid_form;

/// Bounded waits well under the function timeout, so a fault shows within a test's patience.
const TIMEOUTS: &[(&str, &str)] = &[
    ("DB_TIMEOUT_MS", "500"),
    ("AWS_TIMEOUT_MS", "500"),
    ("RATE_LIMIT_RENDER", "1000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "100"),
];

/// The most any request may take under a fault: a few of the bounded waits above in a row
/// (pool wait, connect, statement; SDK attempt and retry), far below a hang.
const ANSWER_BOUND: Duration = Duration::from_secs(6);

/// A delay that is over every timeout above.
const SLOW: Duration = Duration::from_secs(3);

impl TestApp {
    /// A render, which must be answered within `ANSWER_BOUND`.
    async fn bounded_render(&self, client_ip: &str) -> Response {
        let started = Instant::now();
        let response = tokio::time::timeout(ANSWER_BOUND, self.render(client_ip, valid_form()))
            .await
            .unwrap_or_else(|_| panic!("no answer within {ANSWER_BOUND:?}"));
        assert!(started.elapsed() < ANSWER_BOUND);
        response
    }

    /// Healed, the service admits again, and the fault lost or half-did nothing.
    async fn admits_again_with_nothing_lost(&self, client_ip: &str) {
        assert_eq!(
            self.bounded_render(client_ip).await.status(),
            StatusCode::ACCEPTED
        );
        self.assert_nothing_lost().await;
    }
}

async fn unavailable(response: Response, code: &str) {
    assert!(
        header(&response, "retry-after").is_some(),
        "{code} without Retry-After"
    );
    problem(response, StatusCode::SERVICE_UNAVAILABLE, code).await;
}

/// The Postgres proxy starts `fault` with the pool's open connections cut, so new ones meet it.
fn postgres_fault(proxies: &Proxies, fault: Fault) {
    proxies.postgres.set_fault(fault);
    proxies.postgres.cut_connections();
}

#[tokio::test]
async fn postgres_refusing_connections_is_a_bounded_503_then_recovers() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    postgres_fault(&proxies, Fault::Refuse);
    for i in 0..3 {
        let response = app.bounded_render(&format!("203.0.113.{i}")).await;
        unavailable(response, "database_unavailable").await;
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);

    proxies.postgres.set_fault(Fault::None);
    // This server has never read the operator's policy: it answers 503 without a read until
    // its next try, `RETRY_AFTER_FAILURE` after the last failure.
    tokio::time::sleep(RETRY_AFTER_FAILURE).await;
    app.admits_again_with_nothing_lost("203.0.113.9").await;
}

#[tokio::test]
async fn postgres_slower_than_the_timeout_is_a_bounded_503() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    // A warm pool first: the fault must also bound statements on open connections.
    assert_eq!(
        app.bounded_render("203.0.113.20").await.status(),
        StatusCode::ACCEPTED
    );
    proxies.postgres.set_fault(Fault::Delay(SLOW));
    let response = app.bounded_render("203.0.113.21").await;
    unavailable(response, "database_unavailable").await;

    proxies.postgres.set_fault(Fault::None);
    app.admits_again_with_nothing_lost("203.0.113.22").await;
}

#[tokio::test]
async fn postgres_swallowing_traffic_is_a_bounded_503() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    assert_eq!(
        app.bounded_render("203.0.113.30").await.status(),
        StatusCode::ACCEPTED
    );
    proxies.postgres.set_fault(Fault::Blackhole);
    let response = app.bounded_render("203.0.113.31").await;
    unavailable(response, "database_unavailable").await;

    postgres_fault(&proxies, Fault::None);
    app.admits_again_with_nothing_lost("203.0.113.32").await;
}

/// Connections cut after every byte count from 0 up through a whole admission: wherever the
/// cut falls (before, inside or after the admitting statement), the answer is a 202 or a 503,
/// an accepted job is never lost, and nothing is left half done.
#[tokio::test]
async fn postgres_cut_anywhere_in_an_admission_leaves_no_half_state() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    let mut accepted = Vec::new();
    let mut refused = 0;
    for (i, budget) in [0, 1, 5, 20, 60, 120, 250, 400, 600, 900, 1300, 2000, 4000]
        .into_iter()
        .enumerate()
    {
        proxies.postgres.set_fault(Fault::CutAfter(budget));
        let response = app.bounded_render(&format!("198.51.100.{i}")).await;
        match response.status() {
            StatusCode::ACCEPTED => {
                let body: serde_json::Value = response.json().await.unwrap();
                accepted.push(body["job_id"].as_str().unwrap().to_owned());
            }
            _ => {
                unavailable(response, "database_unavailable").await;
                refused += 1;
            }
        }
        proxies.postgres.set_fault(Fault::None);
        proxies.postgres.cut_connections();
    }
    assert!(refused > 0, "some cut must hit the admission");
    for job in &accepted {
        assert_eq!(
            app.count(&format!("SELECT count(*) FROM jobs WHERE id = '{job}'"))
                .await,
            1,
            "accepted job {job} lost"
        );
    }
    app.assert_nothing_lost().await;
}

/// Concurrent admissions while the database connections are cut under them: afterwards the
/// state is consistent and the caps held.
#[tokio::test]
async fn postgres_cut_during_a_storm_leaves_no_half_state() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[
        ("DB_TIMEOUT_MS", "500"),
        ("AWS_TIMEOUT_MS", "500"),
        ("RATE_LIMIT_RENDER", "1000/hour"),
        ("MAX_QUEUED", "10"),
    ])
    .await;
    proxies.postgres.set_fault(Fault::CutAfter(700));
    let statuses: Vec<StatusCode> = join_all((0..30).map(|i| {
        let app = &app;
        async move { app.bounded_render(&format!("192.0.2.{i}")).await.status() }
    }))
    .await;
    assert!(statuses
        .iter()
        .all(|s| matches!(*s, StatusCode::ACCEPTED | StatusCode::SERVICE_UNAVAILABLE)));
    proxies.postgres.set_fault(Fault::None);
    let accepted = statuses
        .iter()
        .filter(|s| **s == StatusCode::ACCEPTED)
        .count() as i64;
    let jobs = app.count("SELECT count(*) FROM jobs").await;
    assert!(
        jobs >= accepted && jobs <= 10,
        "{accepted} accepted, {jobs} jobs"
    );
    app.assert_nothing_lost().await;
}

/// The AWS stand-in refusing, slow or silent: the first AWS call of an admission is the
/// limiter's, so each is a bounded 503 `limiter_unavailable`, with nothing stored.
#[tokio::test]
async fn aws_refused_slow_or_silent_is_a_bounded_503() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    for (i, fault) in [Fault::Refuse, Fault::Delay(SLOW), Fault::Blackhole]
        .into_iter()
        .enumerate()
    {
        proxies.aws.set_fault(fault);
        proxies.aws.cut_connections();
        let response = app.bounded_render(&format!("203.0.113.4{i}")).await;
        unavailable(response, "limiter_unavailable").await;
    }
    proxies.aws.set_fault(Fault::None);
    proxies.aws.cut_connections();
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    app.admits_again_with_nothing_lost("203.0.113.49").await;
}

/// AWS cut after every byte count through an admission (limiter, replay upload, queue publish):
/// a 202, a 503 or the storage 500, never a hang, and every admitted job's event is delivered
/// once the stand-in is back.
#[tokio::test]
async fn aws_cut_anywhere_in_an_admission_loses_no_event() {
    let (app, proxies) = TestApp::spawn_via_proxies(TIMEOUTS).await;
    let mut statuses = Vec::new();
    for (i, budget) in [
        0, 400, 1500, 4000, 9000, 20_000, 40_000, 80_000, 160_000, 320_000,
    ]
    .into_iter()
    .enumerate()
    {
        proxies.aws.set_fault(Fault::CutAfter(budget));
        proxies.aws.cut_connections();
        let response = app.bounded_render(&format!("198.51.100.1{i}")).await;
        statuses.push(response.status());
        assert!(
            matches!(
                response.status(),
                StatusCode::ACCEPTED
                    | StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::INTERNAL_SERVER_ERROR
            ),
            "{:?}",
            response.status()
        );
    }
    proxies.aws.set_fault(Fault::None);
    proxies.aws.cut_connections();
    assert!(statuses.contains(&StatusCode::ACCEPTED), "{statuses:?}");
    assert!(
        statuses.iter().any(|s| *s != StatusCode::ACCEPTED),
        "{statuses:?}"
    );
    app.assert_nothing_lost().await;
}
