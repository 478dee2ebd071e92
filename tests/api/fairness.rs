//! Fair share when identities are cheap. An anonymous client is limited as itself, as its
//! network (IPv4 /24, IPv6 /48 by default) and as its wide network (IPv4 /16, IPv6 /32),
//! anonymous clients together hold at most `ANONYMOUS_QUEUE_SHARE` of the queue, a key is its
//! own client, and the capacity counts that every admission reads are kept exact in one row
//! (checked against `count(*)`).

use futures_util::future::join_all;
use osurender_core::usecases::janitor;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::support::app::{header, problem, within_one_minute, TestApp, UNSET};
use crate::support::replays::{fixture, render_form, valid_form};

/// The network limits at their defaults (the test harness raises them elsewhere).
const NETWORK_DEFAULTS: [(&str, &str); 2] = [
    ("MAX_ACTIVE_PER_NETWORK", UNSET),
    ("RATE_LIMIT_RENDER_NETWORK", UNSET),
];

/// What a storm's answers came to: the status and, for a problem, its code and scope.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Answer {
    status: u16,
    code: String,
    scope: String,
}

async fn answer(response: Response) -> Answer {
    let status = response.status().as_u16();
    if status != 202 {
        assert!(
            header(&response, "retry-after").is_some_and(|secs| secs >= 1),
            "every refusal here says when to come back"
        );
    }
    let body: Value = response.json().await.unwrap_or_default();
    let text = |field: &str| body[field].as_str().unwrap_or_default().to_owned();
    Answer {
        status,
        code: text("code"),
        scope: text("scope"),
    }
}

/// How many answers are `(status, code, scope)`.
fn tally(answers: &[Answer], status: u16, code: &str, scope: &str) -> usize {
    answers
        .iter()
        .filter(|a| a.status == status && a.code == code && a.scope == scope)
        .count()
}

impl TestApp {
    /// One fresh replay from each of `clients`, all at once, within one minute's windows: a
    /// storm that straddled two would see the windows it counts start again mid-way.
    async fn storm_from(&self, clients: &[String]) -> Vec<Answer> {
        within_one_minute().await;
        join_all(
            clients
                .iter()
                .map(|ip| async move { answer(self.render(ip, valid_form()).await).await }),
        )
        .await
    }
}

#[tokio::test]
async fn one_ipv6_allocation_is_one_network_and_honest_clients_still_get_in() {
    let app = TestApp::spawn(&NETWORK_DEFAULTS).await;
    // 60 /64s of one /48 (a tunnel broker's free allocation), two replays each, all at once.
    let flood: Vec<String> = (0..60)
        .flat_map(|i| {
            let ip = format!("2001:db8:48:{i:x}::1");
            [ip.clone(), ip]
        })
        .collect();
    let answers = app.storm_from(&flood).await;
    assert_eq!(tally(&answers, 202, "", ""), 8, "MAX_ACTIVE_PER_NETWORK");
    let network_429 = tally(&answers, 429, "too_many_active_jobs", "network")
        + tally(&answers, 429, "rate_limited", "network");
    assert_eq!(network_429, 112, "{answers:?}");
    // Its 20 renders a minute are spent, plus at most as many again given back for cap
    // refusals (the given-back window's limit): which of its window and its cap a request meets
    // depends on the order, but at most 40 of the 120 pass the window.
    let window_429 = tally(&answers, 429, "rate_limited", "network");
    assert!(
        (80..=100).contains(&window_429),
        "{window_429}: {answers:?}"
    );

    // Fifteen honest clients, each of its own network, v4 and v6: all admitted.
    let honest: Vec<String> = (0..15)
        .map(|i| match i % 2 {
            0 => format!("198.51.{i}.7"),
            _ => format!("2001:db8:{:x}::7", 0x100 + i),
        })
        .collect();
    let answers = app.storm_from(&honest).await;
    assert_eq!(tally(&answers, 202, "", ""), 15, "{answers:?}");
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE client_network = '2001:db8:48::/48'")
            .await,
        8
    );
    app.assert_counts_exact().await;
    app.assert_consistent().await;
}

#[tokio::test]
async fn thirteen_48s_of_one_32_are_held_to_its_wide_caps_and_keys_and_others_still_get_in() {
    // Every network limit at its default, and the queue share every deployed stage has.
    let app = TestApp::spawn(&[
        ("MAX_ACTIVE_PER_NETWORK", UNSET),
        ("RATE_LIMIT_RENDER_NETWORK", UNSET),
        ("MAX_ACTIVE_PER_WIDE_NETWORK", UNSET),
        ("RATE_LIMIT_RENDER_WIDE_NETWORK", UNSET),
        ("ANONYMOUS_QUEUE_SHARE", "0.7"),
    ])
    .await;
    // A tunnel broker's free /48s, 13 of its /32, each from 8 of its /64s: 104 renders at once,
    // within every /64's and every /48's own limits, and more than the 100 places of the queue.
    let flood: Vec<String> = (0..13)
        .flat_map(|net| (0..8).map(move |host| format!("2001:db8:{net:x}:{host:x}::1")))
        .collect();
    let answers = app.storm_from(&flood).await;
    // The /32's 24 active jobs, and no more: its 60 renders a minute pass the window, the rest
    // are counted against it; every refusal names the network scope.
    // (A cap refusal gives the window's hit back: which of the two a request meets depends
    // on the order.)
    assert_eq!(tally(&answers, 202, "", ""), 24, "{answers:?}");
    assert_eq!(
        tally(&answers, 429, "rate_limited", "network")
            + tally(&answers, 429, "too_many_active_jobs", "network"),
        104 - 24,
        "{answers:?}"
    );
    let refused = app.render("2001:db8:d::1", valid_form()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["scope"], "network", "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("wide network"),
        "{refused}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE client_wide_network = '2001:db8::/32'")
            .await,
        24
    );

    // The anonymous share is not taken: a client of another /32, and one of an IPv4 /16, get in;
    // and a key does.
    for ip in ["2001:db9:1::7", "198.51.100.7"] {
        let response = app.render(ip, valid_form()).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{ip}");
    }
    let key = app.create_key("1000/hour", 100).await;
    let response = app
        .render_with("2001:db8:e::1", &key.bearer, valid_form())
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    app.assert_counts_exact().await;
    app.assert_consistent().await;
}

#[tokio::test]
async fn the_addresses_of_one_ipv4_24_share_its_window_and_its_cap() {
    let (app, answers) = a_flooded_ipv4_24().await;
    // The cap holds; every refusal is the network's (its window, or its cap: a cap refusal
    // gives the window's hit back, so which of the two a request meets depends on the order).
    assert_eq!(tally(&answers, 202, "", ""), 8, "{answers:?}");
    assert_eq!(
        tally(&answers, 429, "rate_limited", "network")
            + tally(&answers, 429, "too_many_active_jobs", "network"),
        22,
        "{answers:?}"
    );

    // The refusal says whose limit it is, and when a slot should free.
    let refused = app.render("203.0.113.77", valid_form()).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(refused["scope"], "network", "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("network"));
    app.assert_counts_exact().await;
}

/// A server with the network limits' defaults, and the answers to 30 addresses of
/// 203.0.113.0/24 rendering at once.
async fn a_flooded_ipv4_24() -> (TestApp, Vec<Answer>) {
    let app = TestApp::spawn(&NETWORK_DEFAULTS).await;
    let flood: Vec<String> = (1..=30).map(|i| format!("203.0.113.{i}")).collect();
    let answers = app.storm_from(&flood).await;
    (app, answers)
}

/// Beside a flooded /24, another /24 is another network; its client's own cap is named as the
/// client's.
#[tokio::test]
async fn beside_a_flooded_24_another_24s_client_meets_its_own_cap() {
    let (app, _) = a_flooded_ipv4_24().await;
    let ip = "203.0.114.9";
    for _ in 0..2 {
        assert_eq!(
            app.render(ip, valid_form()).await.status(),
            StatusCode::ACCEPTED
        );
    }
    let own = problem(
        app.render(ip, valid_form()).await,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_jobs",
    )
    .await;
    assert_eq!(own["scope"], "client");
    app.assert_counts_exact().await;
}

#[tokio::test]
async fn forty_concurrent_submissions_of_one_network_never_pass_its_cap() {
    // The window out of the way: only the cap, re-checked under admission's locks, decides.
    let app = TestApp::spawn(&[
        ("MAX_ACTIVE_PER_NETWORK", UNSET),
        ("RATE_LIMIT_RENDER_NETWORK", "1000/hour"),
    ])
    .await;
    for round in 0..2 {
        let flood: Vec<String> = (0..40).map(|i| format!("192.0.2.{}", i + 50)).collect();
        let answers = app.storm_from(&flood).await;
        let admitted = tally(&answers, 202, "", "");
        assert_eq!(admitted, if round == 0 { 8 } else { 0 }, "{answers:?}");
        assert_eq!(
            tally(&answers, 429, "too_many_active_jobs", "network"),
            40 - admitted
        );
    }
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE client_network = '192.0.2.0/24'")
            .await,
        8
    );
    app.assert_counts_exact().await;
}

#[tokio::test]
async fn anonymous_clients_hold_their_share_and_keys_get_the_rest() {
    let app = TestApp::spawn(&[
        ("MAX_QUEUED", "40"),
        ("ANONYMOUS_QUEUE_SHARE", "0.5"),
        ("RATE_LIMIT_RENDER", "1000/hour"),
    ])
    .await;
    // 60 anonymous networks at once: 20 places (half of 40) are theirs.
    let flood: Vec<String> = (0..60).map(|i| format!("198.18.{i}.1")).collect();
    let answers = app.storm_from(&flood).await;
    assert_eq!(tally(&answers, 202, "", ""), 20, "{answers:?}");
    // The rest are refused for want of room (on a loaded machine a few may instead wait past
    // the pool's timeout: a 503 all the same, never an admission).
    let refused = answers.iter().filter(|a| a.status == 503).count();
    assert_eq!(refused, 40, "{answers:?}");
    assert!(tally(&answers, 503, "queue_full", "") > 0);

    // A key's client is still admitted, up to MAX_QUEUED.
    let key = app.create_key("1000/hour", 100).await;
    for _ in 0..20 {
        let response = app
            .render_with("198.18.200.1", &key.bearer, valid_form())
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    problem(
        app.render_with("198.18.200.1", &key.bearer, valid_form())
            .await,
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_full",
    )
    .await;
    problem(
        app.render("198.18.201.1", valid_form()).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_full",
    )
    .await;
    app.assert_counts_exact().await;
}

#[tokio::test]
async fn a_duplicate_names_its_job_only_to_a_key() {
    let app = TestApp::spawn(&[]).await;
    let replay = fixture("valid_1.osr");
    let form = || render_form(replay.clone(), "play.osr", &[]);
    // Behind one NAT: the second user must not learn the first one's job id.
    let ip = "203.0.113.60";
    assert_eq!(app.render(ip, form()).await.status(), StatusCode::ACCEPTED);
    let response = app.render(ip, form()).await;
    assert!(response.headers().get("location").is_none());
    let anonymous = problem(response, StatusCode::CONFLICT, "duplicate_replay").await;
    assert!(anonymous.get("job_id").is_none(), "{anonymous}");

    let key = app.create_key("60/minute", 5).await;
    let job = app.submit_with(ip, &key.bearer, form()).await;
    let response = app.render_with(ip, &key.bearer, form()).await;
    assert_eq!(
        response.headers()["location"],
        app.url(&format!("/v1/jobs/{job}")).as_str()
    );
    let keyed = problem(response, StatusCode::CONFLICT, "duplicate_replay").await;
    assert_eq!(keyed["job_id"], job.as_str());
}

#[tokio::test]
async fn the_counts_stay_exact_through_every_path_that_changes_a_job() {
    let app = TestApp::spawn(&[("RATE_LIMIT_RENDER", "1000/hour")]).await;
    let key = app.create_key("1000/hour", 100).await;
    let mut jobs = Vec::new();
    for i in 0..6 {
        jobs.push(app.submit(&format!("198.51.100.{i}")).await);
        jobs.push(
            app.submit_with("198.51.100.99", &key.bearer, valid_form())
                .await,
        );
    }
    app.assert_counts_exact().await;
    // The workers' reports, one statement each.
    let reports = [
        (
            "downloading",
            json!({ "status": "downloading", "progress": 5 }),
        ),
        (
            "rendering",
            json!({ "status": "rendering", "progress": 10 }),
        ),
        (
            "completed",
            json!({ "status": "completed", "video_key": "v.mp4" }),
        ),
        (
            "failed",
            json!({ "status": "failed", "error": "GPU on fire" }),
        ),
    ];
    for (job, (status, report)) in jobs.iter().zip(reports) {
        if status == "completed" || status == "failed" {
            app.report_ok(job, json!({ "status": "rendering", "progress": 10 }))
                .await;
        }
        app.report_ok(job, report).await;
        app.assert_counts_exact().await;
    }
    // A progress report changes no count.
    app.report_ok(&jobs[1], json!({ "status": "rendering", "progress": 60 }))
        .await;
    // The janitor: queued jobs expired, a stalled render failed, ended jobs deleted, in
    // statements of many rows.
    app.db
        .batch_execute(
            "UPDATE jobs SET created_at = now() - interval '1 day', \
                             deadline_at = now() - interval '1 second'",
        )
        .await
        .unwrap();
    let report = janitor::run(&app.instance().await).await.unwrap();
    assert!(report.expired >= 1 && report.timed_out >= 1, "{report:?}");
    app.assert_counts_exact().await;
    assert_eq!(
        app.count("SELECT queued + rendering FROM job_counts").await,
        0
    );
    app.db
        .batch_execute("DELETE FROM jobs WHERE status = 'expired'")
        .await
        .unwrap();
    app.assert_counts_exact().await;
    // A direct insert and a TRUNCATE, as an operator or an older release might.
    app.db
        .batch_execute(
            "INSERT INTO jobs (id, client_ip, skin, config, replay_key) \
             VALUES (gen_random_uuid(), '192.0.2.1', 'Default', '{}', 'r')",
        )
        .await
        .unwrap();
    app.assert_counts_exact().await;
    app.db.batch_execute("TRUNCATE jobs CASCADE").await.unwrap();
    app.assert_counts_exact().await;
}
