//! Storms (issue 5): many requests at once, counted exactly. Every assertion is on counts the
//! caps determine, never on timing: the requests are all in flight together and the server
//! must serialize them itself. (Storms covered elsewhere: 40 from one IP and 40 IPs against
//! the queue cap in render.rs, concurrent webhooks and two dispatchers / two janitors in
//! lifecycle.rs, concurrent uploads of one skin name in skins.rs.)

use futures_util::future::join_all;
use osurender_core::Config;
use reqwest::StatusCode;

use crate::helpers::{valid_form, TestApp};
use crate::skins::{skin, upload_form, V1};

/// Long windows keep the counting clear of a window boundary.
const ROOMY: (&str, &str) = ("RATE_LIMIT_RENDER", "1000/hour");

/// How many of `statuses` are `status`.
fn tally(statuses: &[StatusCode], status: StatusCode) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

impl TestApp {
    /// Another server on this one's database, table, bucket and queue, with `edit` applied to
    /// its configuration: a redeploy with changed caps. Its base URL.
    async fn redeployed(&self, edit: impl FnOnce(&mut Config)) -> String {
        let mut config = self.config.clone();
        edit(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = osurender_local::start(config, listener).await.unwrap();
        let base = format!("http://{}", server.addr);
        tokio::spawn(server.finished());
        base
    }

    /// Submits one fresh replay per entry of `clients` to `base`, all at once.
    async fn storm(&self, base: &str, clients: &[String]) -> Vec<StatusCode> {
        join_all(clients.iter().map(|ip| async move {
            self.http
                .post(format!("{base}/v1/render"))
                .header("CF-Connecting-IP", ip)
                .multipart(valid_form())
                .send()
                .await
                .expect("request completes")
                .status()
        }))
        .await
    }

    async fn jobs_of(&self, client_key: &str) -> i64 {
        self.db
            .query_one(
                "SELECT count(*) FROM jobs WHERE client_ip = $1",
                &[&client_key],
            )
            .await
            .unwrap()
            .get(0)
    }
}

fn distinct_ips(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}.{i}")).collect()
}

#[tokio::test]
async fn global_cap_holds_exactly_as_it_changes_between_runs() {
    let app = TestApp::spawn(&[("MAX_QUEUED", "5"), ROOMY]).await;
    let first = app.storm(&app.url(""), &distinct_ips("192.0.2", 20)).await;
    assert_eq!(tally(&first, StatusCode::ACCEPTED), 5);
    assert_eq!(tally(&first, StatusCode::SERVICE_UNAVAILABLE), 15);

    // Raised: exactly the difference gets in.
    let raised = app.redeployed(|c| c.max_queued = 12).await;
    let second = app.storm(&raised, &distinct_ips("198.51.100", 20)).await;
    assert_eq!(tally(&second, StatusCode::ACCEPTED), 7);

    // Lowered below what is queued: nothing gets in, nothing is evicted.
    let lowered = app.redeployed(|c| c.max_queued = 4).await;
    let third = app.storm(&lowered, &distinct_ips("203.0.113", 20)).await;
    assert_eq!(tally(&third, StatusCode::SERVICE_UNAVAILABLE), 20);
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 12);
    assert_eq!(app.count("SELECT count(*) FROM outbox_events").await, 12);
    assert_eq!(
        app.replay_objects().await.len(),
        12,
        "refused replays removed"
    );
}

#[tokio::test]
async fn per_ip_cap_holds_exactly_as_it_changes_between_runs() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "3"), ROOMY]).await;
    let one_ip = vec!["203.0.113.200".to_owned(); 15];
    let first = app.storm(&app.url(""), &one_ip).await;
    assert_eq!(tally(&first, StatusCode::ACCEPTED), 3);
    assert_eq!(tally(&first, StatusCode::TOO_MANY_REQUESTS), 12);

    let raised = app.redeployed(|c| c.max_active_jobs_per_ip = 5).await;
    let second = app.storm(&raised, &one_ip).await;
    assert_eq!(tally(&second, StatusCode::ACCEPTED), 2);

    let lowered = app.redeployed(|c| c.max_active_jobs_per_ip = 1).await;
    let third = app.storm(&lowered, &one_ip).await;
    assert_eq!(tally(&third, StatusCode::ACCEPTED), 0);
    assert_eq!(app.jobs_of("203.0.113.200").await, 5);
}

/// Ten clients each sending four at once, per-client cap 2, global cap 15: the global cap
/// binds first, and no client gets past its own.
#[tokio::test]
async fn many_ips_many_requests_each_respect_both_caps() {
    let app = TestApp::spawn(&[("MAX_QUEUED", "15"), ("MAX_ACTIVE_JOBS_PER_IP", "2"), ROOMY]).await;
    let clients: Vec<String> = (0..40).map(|i| format!("192.0.2.{}", i % 10)).collect();
    let statuses = app.storm(&app.url(""), &clients).await;
    assert_eq!(tally(&statuses, StatusCode::ACCEPTED), 15);
    let per_client = app
        .db
        .query(
            "SELECT max(n) FROM (SELECT count(*) n FROM jobs GROUP BY client_ip) c",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(per_client[0].get::<_, i64>(0), 2);
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 15);
}

/// The rate limit is exact under concurrency: DynamoDB's conditional increment admits
/// precisely the limit, whatever the interleaving (the property test models the same).
#[tokio::test]
async fn the_rate_limit_admits_exactly_its_limit_at_once() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_RENDER", "7/day"),
        ("MAX_ACTIVE_JOBS_PER_IP", "100"),
    ])
    .await;
    let statuses = app
        .storm(&app.url(""), &vec!["198.51.100.77".to_owned(); 30])
        .await;
    assert_eq!(tally(&statuses, StatusCode::ACCEPTED), 7);
    assert_eq!(tally(&statuses, StatusCode::TOO_MANY_REQUESTS), 23);
    assert_eq!(app.jobs_of("198.51.100.77").await, 7);
}

/// Two IPv6 addresses of one /64 rotating through a storm are one client.
#[tokio::test]
async fn rotating_ipv6_inside_a_64_is_one_client() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "2"), ROOMY]).await;
    let rotating: Vec<String> = (0..20)
        .map(|i| format!("2001:db8:77:1:{i:x}:{:x}::1", (i * 7919) % 0x10000))
        .collect();
    let statuses = app.storm(&app.url(""), &rotating).await;
    assert_eq!(tally(&statuses, StatusCode::ACCEPTED), 2);
    assert_eq!(app.jobs_of("2001:db8:77:1::/64").await, 2);
}

/// Concurrent skin uploads of distinct names by one client: the upload rate limit admits
/// exactly its count, and every admitted skin is stored and listed once.
#[tokio::test]
async fn concurrent_skin_uploads_admit_exactly_the_limit() {
    let app = TestApp::spawn(&[("RATE_LIMIT_SKINS_UPLOAD", "4/day")]).await;
    let app = &app;
    let statuses: Vec<StatusCode> = join_all((0..16).map(|i| async move {
        let form = upload_form(skin(&format!("storm {i}")), &format!("Storm {i}.osk"), None);
        app.upload_skin(V1, "198.51.100.88", form).await.status()
    }))
    .await;
    assert_eq!(tally(&statuses, StatusCode::CREATED), 4, "{statuses:?}");
    assert_eq!(tally(&statuses, StatusCode::TOO_MANY_REQUESTS), 12);
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 4);
}
