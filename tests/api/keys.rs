//! `Authorization: Bearer <key>`. With a key the key is the client: its render limit
//! and `max_active`, its idempotency and duplicate scope, its job list, its advisory lock, from
//! whatever address; without one nothing changes. A key that does not count is a 401 before
//! anything else, spending no quota and writing nothing.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use osurender_core::domain::key::{ApiKey, KeyKind};
use osurender_testkit::proxy::Fault;
use reqwest::StatusCode;

use crate::support::app::{accepted_job, header, problem, within_one_minute, TestApp};
use crate::support::jobs::item_ids;
use crate::support::keys::TestKey;
use crate::support::replays::{form_without_replay, render_form, unique_replay, valid_form};
use crate::support::skins::{skin, upload_form, LEGACY, V1};

/// How many jobs a client has, and the address its key's jobs were sent from.
#[derive(Debug, PartialEq)]
struct JobsOfClient {
    client_ip: String,
    client_addr: Option<String>,
    jobs: i64,
}

impl JobsOfClient {
    fn new(client_ip: &str, client_addr: Option<&str>, jobs: i64) -> Self {
        JobsOfClient {
            client_ip: client_ip.to_owned(),
            client_addr: client_addr.map(str::to_owned),
            jobs,
        }
    }

    fn from_row(row: &tokio_postgres::Row) -> Self {
        JobsOfClient {
            client_ip: row.get("client_ip"),
            client_addr: row.get("client_addr"),
            jobs: row.get("jobs"),
        }
    }
}

#[tokio::test]
async fn a_keys_limits_replace_the_address_defaults_and_leave_the_address_alone() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/hour", 20).await;
    within_one_minute().await;
    for n in 0..7u64 {
        let response = app
            .render_with("203.0.113.10", &key.bearer, valid_form())
            .await;
        assert_eq!(header(&response, "x-ratelimit-limit"), Some(60));
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(59 - n));
        accepted_job(response).await;
    }
    // More than RATE_LIMIT_RENDER (5) and MAX_ACTIVE_JOBS_PER_IP (2) went through: the
    // address's own quota is untouched.
    let anonymous = app.render("203.0.113.10", valid_form()).await;
    assert_eq!(header(&anonymous, "x-ratelimit-limit"), Some(5));
    assert_eq!(header(&anonymous, "x-ratelimit-remaining"), Some(4));
    accepted_job(anonymous).await;
    assert_eq!(
        app.job_client_keys().await,
        vec!["203.0.113.10".to_owned(), key.client()]
    );
    // The address is still recorded, for the key's jobs only.
    let addresses: Vec<JobsOfClient> = app
        .db
        .query(
            "SELECT client_ip, client_addr, count(*) AS jobs FROM jobs \
             GROUP BY 1, 2 ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(JobsOfClient::from_row)
        .collect();
    assert_eq!(
        addresses,
        [
            JobsOfClient::new("203.0.113.10", None, 1),
            JobsOfClient::new(&key.client(), Some("203.0.113.10"), 7),
        ]
    );
}

#[tokio::test]
async fn one_key_from_two_addresses_is_one_client_and_two_keys_from_one_are_two() {
    let app = TestApp::spawn(&[]).await;
    let shared = app.create_key("2/hour", 20).await;
    app.submit_with("203.0.113.20", &shared.bearer, valid_form())
        .await;
    app.submit_with("198.51.100.20", &shared.bearer, valid_form())
        .await;
    let third = app
        .render_with("198.51.100.21", &shared.bearer, valid_form())
        .await;
    problem(third, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;

    let single = app.create_key("100/hour", 1).await;
    app.submit_with("203.0.113.21", &single.bearer, valid_form())
        .await;
    let second = app
        .render_with("198.51.100.22", &single.bearer, valid_form())
        .await;
    let body = problem(
        second,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_active_jobs",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("at most 1 "),
        "{body}"
    );

    // Two keys on one address: each its own quota.
    let (a, b) = (
        app.create_key("1/hour", 20).await,
        app.create_key("1/hour", 20).await,
    );
    app.submit_with("203.0.113.22", &a.bearer, valid_form())
        .await;
    app.submit_with("203.0.113.22", &b.bearer, valid_form())
        .await;
    let again = app
        .render_with("203.0.113.22", &a.bearer, valid_form())
        .await;
    problem(again, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
}

#[tokio::test]
async fn a_key_that_does_not_count_is_a_401_that_spends_and_writes_nothing() {
    let app = TestApp::spawn(&[]).await;
    let revoked = app.create_key("60/hour", 20).await;
    app.revoke_key(&revoked).await;
    let unknown = made_up_key();
    let malformed = [
        "Bearer nope".to_owned(),
        "Basic dXNlcjpwYXNz".to_owned(),
        revoked.bearer.trim_start_matches("Bearer ").to_owned(),
        format!("{}x", revoked.bearer),
    ];
    let refused = malformed
        .iter()
        .map(|header| (header.as_str(), "Authorization must be"))
        .chain([
            (unknown.as_str(), "unknown API key"),
            (revoked.bearer.as_str(), "revoked"),
        ]);
    for (authorization, detail) in refused {
        for _ in 0..2 {
            let response = app
                .render_with("203.0.113.30", authorization, valid_form())
                .await;
            let challenge = response.headers()["www-authenticate"].to_str().unwrap();
            assert!(challenge.starts_with("Bearer"), "{challenge}");
            assert!(response.headers().get("x-ratelimit-limit").is_none());
            let body = problem(response, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
            assert!(body["detail"].as_str().unwrap().contains(detail), "{body}");
        }
        let read = app
            .get_with("203.0.113.30", authorization, "/v1/jobs")
            .await;
        problem(read, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
    assert!(app.replay_objects().await.is_empty());
    let anonymous = app.render("203.0.113.30", valid_form()).await;
    assert_eq!(
        header(&anonymous, "x-ratelimit-remaining"),
        Some(4),
        "no render quota spent"
    );
    let job = format!("/v1/jobs/{}", uuid::Uuid::new_v4());
    let read = app.get_as("203.0.113.30", &job).await;
    assert_eq!(
        header(&read, "x-ratelimit-remaining"),
        Some(119),
        "no read quota spent"
    );
}

fn made_up_key() -> String {
    format!(
        "Bearer {}",
        ApiKey::generate(KeyKind::Live).unwrap().expose()
    )
}

/// A burst of made-up keys from one address costs at most `RATE_LIMIT_KEY_LOOKUP`
/// reads (the rest are 429 before any read), and never holds back a real key from that address.
#[tokio::test]
async fn made_up_keys_are_limited_per_address_and_never_hold_back_a_real_key() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[]).await; // RATE_LIMIT_KEY_LOOKUP: 30/minute
    let key = app.create_key("60/hour", 20).await;
    proxies.reset();
    let burst = join_all((0..35).map(|_| async {
        let junk = made_up_key();
        app.render_with("203.0.113.40", &junk, valid_form())
            .await
            .status()
    }))
    .await;
    let count = |status| burst.iter().filter(|s| **s == status).count();
    assert_eq!(count(StatusCode::UNAUTHORIZED), 30, "{burst:?}");
    assert_eq!(count(StatusCode::TOO_MANY_REQUESTS), 5, "{burst:?}");
    let statements = proxies.postgres.counts().pg_statements;
    let reads = |table_read: &str| statements.iter().filter(|s| s.contains(table_read)).count();
    assert_eq!(
        reads("FROM api_keys WHERE key_hash"),
        30,
        "one read per 401"
    );
    assert_eq!(
        reads("FROM api_keys WHERE revoked_at IS NULL"),
        1,
        "one list load"
    );
    let flood = app
        .render_with("203.0.113.40", &made_up_key(), valid_form())
        .await;
    problem(flood, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;

    // The real key is not cached yet, and its address's lookups are spent: it is read anyway,
    // spending nothing, and the junk stays held back.
    app.submit_with("203.0.113.40", &key.bearer, valid_form())
        .await;
    let read = app.get_with("203.0.113.40", &key.bearer, "/v1/jobs").await;
    assert_eq!(read.status(), StatusCode::OK);
    let flood = app
        .render_with("203.0.113.40", &made_up_key(), valid_form())
        .await;
    problem(flood, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // Another address's made-up key is its own address's business.
    let elsewhere = app
        .render_with("198.51.100.40", &made_up_key(), valid_form())
        .await;
    problem(elsewhere, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
}

/// The addresses of one network are cheap identities (an IPv6 /48 holds 65,536 /64s): their
/// made-up keys are also held to `RATE_LIMIT_KEY_LOOKUP_NETWORK` together, refused as the
/// network's, and the network's real keys still pass. Lookups under both limits never list
/// the live keys.
#[tokio::test]
async fn made_up_keys_are_limited_per_network_too_and_never_hold_back_a_real_key() {
    // An hour's window: a minute's could turn between the burst and the third address.
    let overrides = [("RATE_LIMIT_KEY_LOOKUP_NETWORK", "40/hour")];
    let (app, proxies) = TestApp::spawn_via_proxies(&overrides).await;
    let key = app.create_key("60/hour", 20).await;
    let other = app.create_key("60/hour", 20).await;
    proxies.reset();
    let read = app.get_with("192.0.2.44", &key.bearer, "/v1/jobs").await;
    assert_eq!(read.status(), StatusCode::OK);
    let lists = |proxies: &crate::support::app::Proxies| {
        let statements = proxies.postgres.counts().pg_statements;
        let list = "FROM api_keys WHERE revoked_at IS NULL";
        statements.iter().filter(|s| s.contains(list)).count()
    };
    assert_eq!(lists(&proxies), 0, "an open gate lists nothing");

    let app = &app;
    let burst = join_all((0..50).map(|i| async move {
        let address = ["203.0.113.41", "203.0.113.42"][i % 2];
        let response = app.render_with(address, &made_up_key(), valid_form()).await;
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap();
        (
            status,
            body["scope"].as_str().unwrap_or_default().to_owned(),
        )
    }))
    .await;
    let count = |status, scope: &str| {
        let matching = |(s, sc): &&(StatusCode, String)| *s == status && sc == scope;
        burst.iter().filter(matching).count()
    };
    assert_eq!(count(StatusCode::UNAUTHORIZED, ""), 40, "{burst:?}");
    assert_eq!(
        count(StatusCode::TOO_MANY_REQUESTS, "network"),
        10,
        "{burst:?}"
    );
    let statements = proxies.postgres.counts().pg_statements;
    let reads = statements
        .iter()
        .filter(|s| s.contains("FROM api_keys WHERE key_hash"))
        .count();
    assert_eq!(reads, 41, "one read per 401, and the real key's");
    assert_eq!(lists(&proxies), 1, "one list load for the refusals");

    // A third address of the network: its own window is untouched, the network's is spent.
    let refused = problem(
        app.render_with("203.0.113.43", &made_up_key(), valid_form())
            .await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    )
    .await;
    assert_eq!(refused["scope"], "network");
    let read = app
        .get_with("203.0.113.43", &other.bearer, "/v1/jobs")
        .await;
    assert_eq!(read.status(), StatusCode::OK, "a real key passes");
    // Another network's made-up key is its own network's business.
    let elsewhere = app
        .render_with("198.51.100.41", &made_up_key(), valid_form())
        .await;
    problem(elsewhere, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
}

#[tokio::test]
async fn a_revocation_takes_effect_once_the_cache_ttl_has_passed() {
    let app = TestApp::spawn(&[("API_KEY_CACHE_TTL", "1")]).await;
    let key = app.create_key("60/hour", 20).await;
    app.submit_with("203.0.113.50", &key.bearer, valid_form())
        .await;
    app.revoke_key(&key).await;
    let revoked_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let response = app
        .render_with("203.0.113.50", &key.bearer, valid_form())
        .await;
    assert!(revoked_at.elapsed() < Duration::from_secs(60));
    problem(response, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 1);
}

#[tokio::test]
async fn a_key_lists_its_own_jobs_not_its_addresss() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/hour", 20).await;
    let keyed = app
        .submit_with("203.0.113.60", &key.bearer, valid_form())
        .await;
    let elsewhere = app
        .submit_with("198.51.100.60", &key.bearer, valid_form())
        .await;
    let anonymous = app.submit("203.0.113.60").await;

    let response = app.get_with("203.0.113.60", &key.bearer, "/v1/jobs").await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut listed = item_ids(&response.json().await.unwrap());
    listed.sort();
    let mut expected = vec![keyed, elsewhere];
    expected.sort();
    assert_eq!(listed, expected);
    // The address's own job is not the key's; without a key it is followed by its id alone.
    let address = app.get_as("203.0.113.60", "/v1/jobs").await;
    problem(address, StatusCode::UNAUTHORIZED, "api_key_required").await;
    assert_eq!(app.job(&anonymous).await["status"], "queued");
}

#[tokio::test]
async fn idempotency_and_duplicates_are_scoped_to_the_key() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/hour", 20).await;
    let replay = unique_replay();
    let form = || render_form(replay.clone(), "play.osr", &[]);
    let first = app.submit_with("203.0.113.70", &key.bearer, form()).await;
    let duplicate = app.render_with("198.51.100.70", &key.bearer, form()).await;
    let body = problem(duplicate, StatusCode::CONFLICT, "duplicate_replay").await;
    assert_eq!(body["job_id"], first.as_str());
    // The address's own client has no such job.
    let anonymous = accepted_job(app.render("203.0.113.70", form()).await).await;
    assert_ne!(anonymous, first);

    let idem_replay = unique_replay();
    let idem_form = || render_form(idem_replay.clone(), "play.osr", &[]);
    let keyed = [
        ("Authorization", key.bearer.as_str()),
        ("Idempotency-Key", "key-scope-1"),
    ];
    let made = accepted_job(
        app.render_with_headers("203.0.113.71", &keyed, idem_form())
            .await,
    )
    .await;
    let retried = app
        .render_with_headers("198.51.100.71", &keyed, idem_form())
        .await;
    assert_eq!(retried.headers()["idempotent-replayed"], "true");
    assert_eq!(accepted_job(retried).await, made);
    let unkeyed = [("Idempotency-Key", "key-scope-1")];
    let other = app
        .render_with_headers("203.0.113.71", &unkeyed, idem_form())
        .await;
    assert!(other.headers().get("idempotent-replayed").is_none());
    assert_ne!(
        accepted_job(other).await,
        made,
        "the address's own key scope"
    );
}

#[tokio::test]
async fn a_key_clients_lock_is_the_documented_one() {
    let app = TestApp::spawn(&[("DB_TIMEOUT_MS", "20000")]).await;
    let key: TestKey = app.create_key("60/hour", 20).await;
    // docs/API.md's name for a key client, spelled out here rather than taken from the core.
    let holder = app
        .hold_client_lock(&format!("key:{}", key.id.0.hyphenated()))
        .await;
    let blocked = app.spawn_render("203.0.113.80", Some(&key.bearer));
    let same_address = tokio::time::timeout(
        Duration::from_secs(10),
        app.render("203.0.113.80", valid_form()),
    )
    .await
    .expect("the address's own client is not held up");
    assert_eq!(same_address.status(), StatusCode::ACCEPTED);
    app.until_a_request_waits_for_a_lock("the key's request never reached its lock")
        .await;
    assert!(
        !blocked.is_finished(),
        "the key's client waits for its lock"
    );
    holder.batch_execute("COMMIT").await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("the released lock lets the request through")
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_failed_key_lookup_is_a_503_not_a_401() {
    let (app, proxies) = TestApp::spawn_via_proxies(&[("DB_TIMEOUT_MS", "1000")]).await;
    let key = app.create_key("60/hour", 20).await;
    proxies.postgres.set_fault(Fault::Refuse);
    proxies.postgres.cut_connections();
    let response = app
        .render_with("203.0.113.90", &key.bearer, valid_form())
        .await;
    problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
    )
    .await;
    proxies.postgres.set_fault(Fault::None);
    app.submit_with("203.0.113.90", &key.bearer, valid_form())
        .await;
}

#[tokio::test]
async fn the_skin_routes_take_the_key_as_the_client_too() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/minute", 20).await;
    let unknown = made_up_key();
    let upload = |path: &'static str, authorization: String, marker: &str| {
        let form = upload_form(skin(marker), &format!("{marker}.osk"), None);
        let request = app
            .http
            .post(app.url(path))
            .header("CF-Connecting-IP", "203.0.113.60")
            .header("Authorization", authorization)
            .multipart(form);
        async move { request.send().await.unwrap() }
    };
    // A key that does not count is a 401 on every skin route, and writes nothing.
    for response in [
        app.get_with("203.0.113.60", &unknown, "/v1/skins").await,
        upload(V1, unknown.clone(), "a").await,
        upload(LEGACY, unknown.clone(), "b").await,
    ] {
        assert!(response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer"));
        problem(response, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    }
    assert_eq!(
        app.count("SELECT count(*) FROM skins WHERE name <> 'Default'")
            .await,
        0
    );
    // With the key, its uploads and reads are counted by the key, not by the address.
    for (n, marker) in ["c", "d"].into_iter().enumerate() {
        let response = upload(V1, key.bearer.clone(), marker).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            Some(1 - n as u64)
        );
    }
    let spent = upload(V1, key.bearer.clone(), "e").await;
    problem(spent, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    let anonymous = app
        .upload_skin(V1, "203.0.113.60", upload_form(skin("f"), "f.osk", None))
        .await;
    assert_eq!(anonymous.status(), StatusCode::CREATED);
    assert_eq!(header(&anonymous, "x-ratelimit-remaining"), Some(1));
    let listing = app.get_with("203.0.113.60", &key.bearer, "/v1/skins").await;
    assert_eq!(listing.status(), StatusCode::OK);
    assert_eq!(header(&listing, "x-ratelimit-remaining"), Some(119));
    let listing = app.get_as("203.0.113.60", "/v1/skins").await;
    assert_eq!(header(&listing, "x-ratelimit-remaining"), Some(119));
}

#[tokio::test]
async fn the_global_caps_hold_for_key_clients_too() {
    let app = TestApp::spawn(&[("MAX_QUEUED", "1")]).await;
    let key = app.create_key("60/minute", 20).await;
    app.submit_with("203.0.113.95", &key.bearer, valid_form())
        .await;
    problem(
        app.render_with("203.0.113.95", &key.bearer, valid_form())
            .await,
        StatusCode::SERVICE_UNAVAILABLE,
        "queue_full",
    )
    .await;
}

#[tokio::test]
async fn a_bad_key_is_refused_before_the_form_is_looked_at() {
    let app = TestApp::spawn(&[]).await;
    let unknown = made_up_key();
    let no_file = form_without_replay();
    for form in [
        render_form(b"not a replay".to_vec(), "play.osr", &[]),
        render_form(unique_replay(), "play.txt", &[]),
        no_file,
    ] {
        let response = app.render_with("203.0.113.96", &unknown, form).await;
        problem(response, StatusCode::UNAUTHORIZED, "invalid_api_key").await;
    }
}
