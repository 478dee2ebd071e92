//! Storms: many requests at once, counted exactly. Every assertion is on counts the
//! caps determine, never on timing: the requests are all in flight together and the server
//! must serialize them itself. (Storms covered elsewhere: 40 from one IP and 40 IPs against
//! the queue cap in render.rs, concurrent webhooks and two dispatchers / two janitors in
//! lifecycle.rs, concurrent uploads of one skin name in skins.rs.)

use std::time::Duration;

use futures_util::future::join_all;
use osurender_core::Config;
use reqwest::StatusCode;

use crate::support::app::{TestApp, WEBHOOK_SECRET};
use crate::support::replays::{render_form, unique_replay, valid_form};
use crate::support::skins::{skin, upload_form, V1};

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
        self.scalar_with(
            "SELECT count(*) FROM jobs WHERE client_ip = $1",
            &[&client_key],
        )
        .await
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
    let raised = app.redeployed(|c| c.capacity.max_queued = 12).await;
    let second = app.storm(&raised, &distinct_ips("198.51.100", 20)).await;
    assert_eq!(tally(&second, StatusCode::ACCEPTED), 7);

    // Lowered below what is queued: nothing gets in, nothing is evicted.
    let lowered = app.redeployed(|c| c.capacity.max_queued = 4).await;
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

    let raised = app
        .redeployed(|c| c.capacity.max_active_per_client = 5)
        .await;
    let second = app.storm(&raised, &one_ip).await;
    assert_eq!(tally(&second, StatusCode::ACCEPTED), 2);

    let lowered = app
        .redeployed(|c| c.capacity.max_active_per_client = 1)
        .await;
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

/// The server process killed (SIGKILL) in the middle of a storm of admissions, then
/// started again on the same database, bucket and queue. Each round kills at another point (once
/// a random number of jobs is in); afterwards a client that got 202 has its job, every live job
/// has its replay, no lock or claim outlives its request but for the killed ones (taken over
/// once stale), every live job reaches the render queue once the sweep has run, and a retry
/// with each key tells the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_storm_loses_no_admission() {
    const STORM: usize = 60;
    let env: &[(&str, &str)] = &[
        ("REQUEST_DEADLINE_MS", "2000"),
        ("DB_TIMEOUT_MS", "1000"),
        ("AWS_TIMEOUT_MS", "1000"),
        ("RATE_LIMIT_RENDER", "1000/hour"),
        ("MAX_ACTIVE_JOBS_PER_IP", "100"),
        ("MAX_ACTIVE_PER_NETWORK", "1000"),
        ("RATE_LIMIT_RENDER_NETWORK", "1000/hour"),
        ("MAX_ACTIVE_PER_WIDE_NETWORK", "1000"),
        ("RATE_LIMIT_RENDER_WIDE_NETWORK", "1000/hour"),
        ("MAX_QUEUED", "1000"),
    ];
    let app = TestApp::spawn(env).await;
    let mut told = Vec::new();
    let mut unanswered = 0;
    for round in 0..3u8 {
        let mut server = ChildServer::start(&app, env).await;
        let kill_after = 1 + (uuid::Uuid::new_v4().as_u128() % 40) as i64;
        // On a slow machine many requests end in 503 (deadline) and fewer than `kill_after` jobs
        // may ever be in: the kill then comes once half the storm is answered at the latest, so
        // every round kills with requests in flight.
        let answered = std::sync::atomic::AtomicUsize::new(0);
        let before = app.count("SELECT count(*) FROM jobs").await;
        let requests: Vec<(String, Option<String>, Vec<u8>)> = (0..STORM)
            .map(|i| {
                let ip = format!("198.51.{}.{i}", 100 + round);
                let key = (i % 2 == 0).then(|| format!("storm-{round}-{i}"));
                (ip, key, unique_replay())
            })
            .collect();
        let base = server.base.clone();
        let storm = join_all(requests.iter().map(|(ip, key, replay)| {
            let mut request = app
                .http
                .post(format!("{base}/v1/render"))
                .header("CF-Connecting-IP", ip)
                .multipart(render_form(replay.clone(), "play.osr", &[]));
            if let Some(key) = key {
                request = request.header("Idempotency-Key", key);
            }
            let answered = &answered;
            async move {
                let response = request.send().await.ok()?;
                let status = response.status();
                let body: serde_json::Value = response.json().await.ok()?;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Some((status, body))
            }
        }));
        let over = std::sync::atomic::AtomicBool::new(false);
        let storm = async {
            let answers = storm.await;
            over.store(true, std::sync::atomic::Ordering::SeqCst);
            answers
        };
        let killer = async {
            // Killed once `kill_after` of this round's jobs are in, or half the storm is answered.
            while !over.load(std::sync::atomic::Ordering::SeqCst)
                && answered.load(std::sync::atomic::Ordering::SeqCst) < STORM / 2
                && app.count("SELECT count(*) FROM jobs").await < before + kill_after
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            server.kill();
        };
        let (answers, ()) = tokio::join!(storm, killer);
        for answer in &answers {
            match answer {
                Some((StatusCode::ACCEPTED, body)) => {
                    told.push(body["job_id"].as_str().unwrap().to_owned())
                }
                Some((status, body)) => assert!(
                    matches!(
                        *status,
                        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
                    ),
                    "{status}: {body}"
                ),
                None => unanswered += 1,
            }
        }
        println!(
            "storm round {round}: killed at {kill_after} jobs in or {} answers; {} answered 202, {} unanswered",
            STORM / 2,
            answers
                .iter()
                .filter(|a| matches!(a, Some((StatusCode::ACCEPTED, _))))
                .count(),
            answers.iter().filter(|a| a.is_none()).count(),
        );

        // Started again: it serves, and the invariants hold.
        let restarted = ChildServer::start(&app, env).await;
        let after = app
            .http
            .post(format!("{}/v1/render", restarted.base))
            .header("CF-Connecting-IP", format!("198.51.{}.250", 100 + round))
            .multipart(valid_form())
            .send()
            .await
            .unwrap();
        assert_eq!(after.status(), StatusCode::ACCEPTED);
        app.assert_told_jobs_exist(&told).await;
        app.assert_consistent().await;
        for (ip, key, replay) in &requests {
            let Some(key) = key else { continue };
            let answered = answers_job(&answers, requests.iter().position(|r| &r.0 == ip));
            app.assert_retry_at_tells_the_truth(
                &restarted.base,
                ip,
                ip,
                key,
                replay,
                answered.as_deref(),
                Duration::from_secs(2 * 2 + 4),
            )
            .await;
        }
        app.assert_consistent().await;
        app.assert_no_claim_left().await;
        app.assert_every_live_job_queued().await;
        drop(restarted);
    }
    assert!(
        unanswered > 0,
        "no request was in flight when the server was killed"
    );
}

/// The job id of a 202 among `answers`, by index.
fn answers_job(
    answers: &[Option<(StatusCode, serde_json::Value)>],
    index: Option<usize>,
) -> Option<String> {
    match answers.get(index?)? {
        Some((StatusCode::ACCEPTED, body)) => body["job_id"].as_str().map(str::to_owned),
        _ => None,
    }
}

/// The environment variable that makes `child_server` serve.
const CHILD_SERVER: &str = "OSURENDER_TEST_CHILD_SERVER";
const CHILD_LISTENING: &str = "osurender-test-child listening on ";

/// The dev server in a process of its own, to be killed: this test binary run again with
/// `child_server` as its only test (the same `osurender_local::start` the `osurender-local`
/// binary runs, always of this build: a binary in the target directory could be stale, and
/// `cargo test -p osurender-tests` does not build it).
struct ChildServer {
    process: std::process::Child,
    base: String,
}

impl ChildServer {
    /// Starts it on `app`'s database, limiter table, bucket and queue, with `overrides`.
    async fn start(app: &TestApp, overrides: &[(&str, &str)]) -> ChildServer {
        use std::io::BufRead;
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "storms::child_server",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_SERVER, "1")
            .env("DATABASE_URL", &app.database_url)
            .env("DB_SSLMODE", "disable")
            .env("REPLAY_BUCKET", &app.bucket)
            .env("RATE_LIMIT_TABLE", &app.table)
            .env("RENDER_QUEUE_NAME", &app.queue)
            .env("TRUSTED_PROXY_CIDRS", "127.0.0.0/8, ::1/128")
            .env("WEBHOOK_SECRET", WEBHOOK_SECRET)
            .env("DB_POOL_SIZE", "8")
            .env("OUTBOX_SWEEP_INTERVAL", "0")
            .env("JANITOR_INTERVAL", "0")
            .env("SKIN_INGEST_INTERVAL", "0")
            .env("OSURENDER_LISTEN", "127.0.0.1:0")
            .envs(overrides.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut process = command.spawn().expect("the test binary runs again");
        let stdout = process.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.split(CHILD_LISTENING).nth(1) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_owned());
                    }
                }
            }
        });
        let addr = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .expect("the child server starts within a minute")
            .expect("the child server says where it listens");
        ChildServer {
            process,
            base: format!("http://{addr}"),
        }
    }

    /// SIGKILL: no answer, no cleanup, connections dropped by the kernel.
    fn kill(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Not a test of its own: the dev server of `ChildServer`, when run with `CHILD_SERVER` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the crash storm runs it as a child process"]
async fn child_server() {
    if std::env::var_os(CHILD_SERVER).is_none() {
        return;
    }
    let config = Config::from_env().expect("the child's configuration is valid");
    let listener = tokio::net::TcpListener::bind(config.dev_server.listen)
        .await
        .unwrap();
    let server = osurender_local::start(config, listener).await.unwrap();
    println!("{CHILD_LISTENING}{}", server.addr);
    server.finished().await.unwrap();
}
