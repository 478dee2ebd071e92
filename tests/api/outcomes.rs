//! Unknown outcomes at every step boundary, and the request deadline.
//!
//! Each step of a render admission and of a skin upload meets each fault on its own statement
//! or request only (the testkit proxy's `Fault::On`): cut before it is sent, swallowed (a timeout
//! before send), held past its caller's timeout and then sent (it runs after the caller gave
//! up), cut right after it was sent (it may or may not commit), answered late after it
//! committed, and its answer lost after it committed; admit_job also meets a server-side
//! error. After each case the invariants of support/invariants.rs hold and a retry with the
//! same `Idempotency-Key` tells the truth.
//!
//! Then the deadline: with each backing service slowed in turn (Postgres, or one AWS
//! operation), every answer comes within `REQUEST_DEADLINE_MS` (plus a little slack), and is
//! the right success or a 503 with `Retry-After`.

use std::time::{Duration, Instant};

use osurender_core::adapters::postgres::jobs::PgJobStore;
use osurender_core::ports::contracts::{fresh_caller, jobs::new_job};
use osurender_core::ports::jobs::{JobAdmission, Resolved};
use osurender_core::Clients;
use osurender_testkit::proxy::{Action, Fault, Proxy, Target};
use reqwest::{Response, StatusCode};
use serde_json::Value;

use crate::support::app::{header, python_lock_id, Proxies, TestApp};
use crate::support::replays::unique_replay;
use crate::support::skins::{skin, upload_form, V1};

/// Short bounds, so each case takes a second or two.
const ENV: &[(&str, &str)] = &[
    ("DB_TIMEOUT_MS", "500"),
    ("AWS_TIMEOUT_MS", "500"),
    ("REQUEST_DEADLINE_MS", "3000"),
    ("RATE_LIMIT_RENDER", "1000/hour"),
    ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "100"),
];
const DEADLINE: Duration = Duration::from_millis(3000);
/// What an answer may take past the deadline: the response's own way back.
const SLACK: Duration = Duration::from_millis(300);
/// Past every per-call timeout above: a held statement or answer arrives after its caller
/// gave up on it.
const LATE: Duration = Duration::from_millis(1500);
/// A claim left in progress is taken over once 2 × `REQUEST_DEADLINE_MS` old; a retry waits
/// that long at most, and a little more.
const TAKEOVER: Duration = Duration::from_millis(2 * 3000 + 3000);

/// The faults each step meets, by name.
fn faults() -> [(&'static str, Action); 6] {
    [
        ("cut before it is sent", Action::CutBefore),
        ("swallowed (timeout before send)", Action::Swallow),
        ("sent after its caller gave up", Action::Hold(LATE)),
        ("connection cut right after it was sent", Action::CutAfter),
        ("late answer after commit", Action::DelayAnswer(LATE)),
        ("answer lost after commit", Action::CutAnswer),
    ]
}

fn proxy_for(proxies: &Proxies, target: Target) -> &Proxy {
    match target {
        Target::Statement(_) => &proxies.postgres,
        Target::Request(_) => &proxies.aws,
    }
}

/// Whether the key's claim itself may commit after the request was answered: held, or cut
/// right after it was sent (the server still runs it, and may finish after the release the
/// unknown outcome sent, on a busy machine). It is then taken over once stale, as the retry
/// checks; until then it may be left.
fn claim_may_land_late(target: Target, action: Action) -> bool {
    matches!(
        (target, action),
        (Target::Statement(CLAIM), Action::Hold(_) | Action::CutAfter)
    )
}

/// Waits until no fault holds anything any more: a held statement has been answered, a held
/// answer forwarded.
async fn settle(proxies: &Proxies) {
    let give_up = Instant::now() + Duration::from_secs(15);
    while proxies.postgres.counts().faults_holding + proxies.aws.counts().faults_holding > 0 {
        assert!(Instant::now() < give_up, "a held statement never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends `request` and checks it was answered within the deadline.
async fn within_deadline(
    deadline: Duration,
    request: impl std::future::Future<Output = Response>,
) -> Response {
    let started = Instant::now();
    let bound = deadline + SLACK;
    let response = tokio::time::timeout(bound, request)
        .await
        .unwrap_or_else(|_| panic!("no answer within {bound:?}"));
    let took = started.elapsed();
    assert!(took <= bound, "answered after {took:?}, over {bound:?}");
    response
}

/// The answer of a refusal: a 503 with `Retry-After` and a problem body. Its code.
async fn unavailable(response: Response, context: &str) -> String {
    let status = response.status();
    let retry_after = header(&response, "retry-after");
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{context}: expected 202 or 503, got {status}: {body}"
    );
    assert!(
        retry_after.is_some(),
        "{context}: 503 without Retry-After: {body}"
    );
    body["code"].as_str().unwrap_or_default().to_owned()
}

/// One keyed render under `fault` at `target`, then the invariants and a truthful retry.
/// Returns the jobs a client was told about.
async fn render_case(
    app: &TestApp,
    proxies: &Proxies,
    target: Target,
    (label, action): (&str, Action),
    ip: &str,
) -> Vec<String> {
    let context = format!("{target:?} {label}");
    println!("case: {context}, client {ip}");
    let key = format!("case-{ip}");
    let replay = unique_replay();
    let proxy = proxy_for(proxies, target);
    proxy.reset();
    proxy.set_fault(Fault::On(target, action));
    let response = within_deadline(DEADLINE, app.render_with_key(ip, &key, &replay)).await;
    proxy.set_fault(Fault::None);
    assert!(
        proxy.counts().faults_applied > 0,
        "{context}: the fault never met its target"
    );
    settle(proxies).await;
    let mut told = Vec::new();
    let first = if response.status() == StatusCode::ACCEPTED {
        let body: Value = response.json().await.unwrap();
        let job = body["job_id"].as_str().unwrap().to_owned();
        told.push(job.clone());
        Some(job)
    } else {
        let code = unavailable(response, &context).await;
        // Refused with a known outcome: nothing holds a slot for it.
        if !matches!(code.as_str(), "admission_unknown" | "deadline_exceeded") {
            assert_eq!(
                app.job_of_replay(ip, &replay).await,
                None,
                "{context}: answered {code}, but its job exists"
            );
        }
        None
    };
    app.assert_told_jobs_exist(&told).await;
    app.assert_consistent().await;
    if !claim_may_land_late(target, action) {
        app.assert_no_claim_left().await;
    }
    let retried = app
        .assert_retry_tells_the_truth(ip, ip, &key, &replay, first.as_deref(), TAKEOVER)
        .await;
    told.extend(retried);
    app.assert_consistent().await;
    app.assert_no_claim_left().await;
    told
}

/// The claim of an `Idempotency-Key` (idempotency.rs CLAIM_SQL).
const CLAIM: &str = "INSERT INTO idempotency_keys";

/// Every fault at `target` of a render admission, each case from its own client.
async fn render_step(target: Target, subnet: u8) {
    let (app, proxies) = TestApp::spawn_via_proxies(ENV).await;
    let mut told = Vec::new();
    for (i, fault) in faults().into_iter().enumerate() {
        let ip = format!("198.18.{subnet}.{}", i + 1);
        told.extend(render_case(&app, &proxies, target, fault, &ip).await);
    }
    app.assert_told_jobs_exist(&told).await;
    app.assert_every_live_job_queued().await;
}

/// The idempotency claim of the key, pipelined with the look's occupancy read.
#[tokio::test]
async fn render_claim_meets_every_fault() {
    render_step(Target::Statement(CLAIM), 1).await;
}

/// The rate limit: its DynamoDB call.
#[tokio::test]
async fn render_rate_limit_meets_every_fault() {
    render_step(Target::Request("DynamoDB.UpdateItem"), 2).await;
}

/// The replay stored: its upload.
#[tokio::test]
async fn render_replay_upload_meets_every_fault() {
    render_step(Target::Request("S3.PutObject"), 3).await;
}

/// The admission: the statement that writes the job. After a late or lost answer to its
/// commit the job exists, so the client must hear 202 (or a 503 that keeps the replay), and a
/// retry must find the job.
#[tokio::test]
async fn render_admission_meets_every_fault() {
    render_step(Target::Statement("admit_job("), 4).await;
}

/// The fast-path publish after the commit: whatever happens to it, the client hears 202 and
/// the sweep delivers the event.
#[tokio::test]
async fn render_publish_meets_every_fault() {
    render_step(Target::Request("SQS.SendMessageBatch"), 5).await;
}

/// The mark that the fast path published the event.
#[tokio::test]
async fn render_dispatched_mark_meets_every_fault() {
    render_step(Target::Statement("status = 'dispatched'"), 6).await;
}

/// admit_job commits and its answer comes after `DB_TIMEOUT_MS`, alone: the client hears 202
/// with the job, whose replay is kept, and a retry with its key finds that job.
#[tokio::test]
async fn a_late_answer_after_admit_job_committed_is_a_202_with_the_job() {
    let (app, proxies) = TestApp::spawn_via_proxies(ENV).await;
    let (ip, key, replay) = ("198.18.7.1", "late-answer", unique_replay());
    proxies
        .postgres
        .set_fault(Fault::delay_answer_to("admit_job(", LATE));
    let response = within_deadline(DEADLINE, app.render_with_key(ip, key, &replay)).await;
    proxies.postgres.set_fault(Fault::None);
    settle(&proxies).await;
    let job = app
        .job_of_replay(ip, &replay)
        .await
        .expect("admit_job committed");
    assert_eq!(response.status(), StatusCode::ACCEPTED, "the job exists");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["job_id"], job.as_str());
    assert_eq!(body["status"], "queued");
    assert!(
        app.replay_stored(&job).await,
        "the job's replay was deleted"
    );
    app.assert_consistent().await;
    app.assert_no_claim_left().await;
    let retried = app
        .assert_retry_tells_the_truth(ip, ip, key, &replay, Some(&job), TAKEOVER)
        .await;
    assert_eq!(retried.as_deref(), Some(job.as_str()));
    app.assert_every_live_job_queued().await;
}

/// A server-side error from admit_job (a trigger refuses the insert): the outcome is known,
/// nothing was admitted: 503, the replay and the claim are let go, and the retry runs afresh.
#[tokio::test]
async fn an_error_from_admit_job_admits_nothing_and_frees_the_key() {
    let (app, _proxies) = TestApp::spawn_via_proxies(ENV).await;
    let (ip, key, replay) = ("198.18.8.1", "server-error", unique_replay());
    app.db
        .batch_execute(&format!(
            "CREATE FUNCTION test_refuse_job() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
             CREATE TRIGGER test_refuse_job BEFORE INSERT ON jobs FOR EACH ROW
               WHEN (NEW.client_ip = '{ip}') EXECUTE FUNCTION test_refuse_job();"
        ))
        .await
        .unwrap();
    let response = within_deadline(DEADLINE, app.render_with_key(ip, key, &replay)).await;
    unavailable(response, "admit_job error").await;
    assert_eq!(app.job_of_replay(ip, &replay).await, None);
    assert!(
        app.replay_objects().await.is_empty(),
        "a replay refused for sure is deleted"
    );
    app.assert_consistent().await;
    app.assert_no_claim_left().await;
    app.db
        .batch_execute("DROP TRIGGER test_refuse_job ON jobs")
        .await
        .unwrap();
    let retried = app
        .assert_retry_tells_the_truth(ip, ip, key, &replay, None, TAKEOVER)
        .await;
    assert!(retried.is_some(), "the retry ran afresh and was admitted");
    app.assert_every_live_job_queued().await;
}

/// A server-side error inside admit_job's own wait: the client's advisory lock is held (by the
/// test), so admit_job's lock wait runs into its lock timeout, and so does a resolution that
/// tries the lock. Whatever the order of the two timeouts, nothing is admitted, the answer is a
/// bounded 503, and the retry (once the claim is free or stale) is admitted afresh.
#[tokio::test]
async fn a_lock_timeout_in_admit_job_admits_nothing() {
    let (app, _proxies) = TestApp::spawn_via_proxies(ENV).await;
    let (ip, key, replay) = ("198.18.10.1", "lock-timeout", unique_replay());
    let (holder, connection) = tokio_postgres::connect(&app.database_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&python_lock_id(ip)])
        .await
        .unwrap();
    let response = within_deadline(DEADLINE, app.render_with_key(ip, key, &replay)).await;
    unavailable(response, "lock timeout").await;
    // Every waiter on the lock has given up before it is let go.
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
    let give_up = Instant::now() + Duration::from_secs(5);
    while app.count(waiting).await > 0 {
        assert!(
            Instant::now() < give_up,
            "admit_job still waits for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&python_lock_id(ip)])
        .await
        .unwrap();
    assert_eq!(app.job_of_replay(ip, &replay).await, None);
    app.assert_consistent().await;
    let retried = app
        .assert_retry_tells_the_truth(ip, ip, key, &replay, None, TAKEOVER)
        .await;
    assert!(retried.is_some(), "the retry ran afresh and was admitted");
    app.assert_consistent().await;
    app.assert_no_claim_left().await;
    app.assert_every_live_job_queued().await;
}

/// The outcome cannot be learned in time: admit_job is held on the way, and the resolution
/// cannot take the client's lock (the test holds it). The answer is a 503 that keeps the
/// replay and the claim, for admit_job may still arrive — and here it does, once the lock is
/// free: the job then exists with its replay, and the retry answers with it.
#[tokio::test]
async fn an_unresolvable_outcome_keeps_the_replay_and_the_claim() {
    let (app, proxies) = TestApp::spawn_via_proxies(ENV).await;
    let (ip, key, replay) = ("198.18.9.1", "unresolvable", unique_replay());
    let (holder, connection) = tokio_postgres::connect(&app.database_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&python_lock_id(ip)])
        .await
        .unwrap();
    // Held past the request's whole deadline, so it arrives after the answer.
    proxies.postgres.set_fault(Fault::hold_statement(
        "admit_job(",
        DEADLINE + Duration::from_millis(1000),
    ));
    let response = within_deadline(DEADLINE, app.render_with_key(ip, key, &replay)).await;
    proxies.postgres.set_fault(Fault::None);
    unavailable(response, "unresolvable admission").await;
    assert_eq!(
        app.replay_objects().await.len(),
        1,
        "the replay is kept while the outcome is unknown"
    );
    holder
        .execute("SELECT pg_advisory_unlock($1)", &[&python_lock_id(ip)])
        .await
        .unwrap();
    settle(&proxies).await;
    app.assert_consistent().await;
    let job = app.job_of_replay(ip, &replay).await;
    let retried = app
        .assert_retry_tells_the_truth(ip, ip, key, &replay, None, TAKEOVER)
        .await;
    if job.is_some() {
        assert_eq!(
            retried, job,
            "the retry answers with the job that arrived late"
        );
    }
    app.assert_consistent().await;
    app.assert_no_claim_left().await;
    app.assert_every_live_job_queued().await;
}

/// The resolution of an admission still in flight: another session holds the client's lock and
/// has inserted the job, uncommitted, as `admit_job` does until its commit. The resolution waits
/// for the lock, then reads in a snapshot taken after it, so it finds the committed job
/// (`admitted`), never a fence for a job that exists.
#[tokio::test]
async fn a_resolution_waits_for_an_admission_in_flight_and_finds_its_job() {
    let app = TestApp::spawn(&[]).await;
    let clients = Clients::new(&app.config).await.unwrap();
    let store = PgJobStore::new(
        clients.pool.clone(),
        Duration::from_secs(10),
        Duration::from_secs(30),
    );
    let job = new_job(&fresh_caller(), "admitted while resolved");
    let (admission, connection) = tokio_postgres::connect(&app.database_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    admission.batch_execute("BEGIN").await.unwrap();
    admission
        .execute("SELECT pg_advisory_xact_lock($1)", &[&job.client.lock_id()])
        .await
        .unwrap();
    admission
        .execute(
            "INSERT INTO jobs (id, status, client_ip, skin, config, replay_key)
             VALUES ($1::text::uuid, 'queued', $2, 'Default', '{}', $3)",
            &[&job.id.to_string(), &job.client.as_str(), &job.replay_key],
        )
        .await
        .unwrap();

    let resolving = {
        let job = job.clone();
        tokio::spawn(async move { store.resolve(&job).await })
    };
    app.until_a_request_waits_for_a_lock("the resolution never waited for the client's lock")
        .await;
    admission.batch_execute("COMMIT").await.unwrap();
    let resolved = tokio::time::timeout(Duration::from_secs(10), resolving)
        .await
        .expect("the resolution ends once the admission commits")
        .unwrap()
        .expect("answered");
    assert_eq!(resolved, Resolved::Admitted);
    let fences = app
        .count(&format!(
            "SELECT count(*) FROM admission_fences WHERE job_id = '{}'",
            job.id
        ))
        .await;
    assert_eq!(fences, 0, "no fence for a job that exists");
}

/// One keyed skin upload under `fault` at `target`, then the invariants and a truthful retry.
async fn skin_case(
    app: &TestApp,
    proxies: &Proxies,
    target: Target,
    (label, action): (&str, Action),
    ip: &str,
    name: &str,
) {
    let context = format!("{target:?} {label}");
    println!("case: {context}, skin {name}");
    let key = format!("skin-case-{name}");
    let bytes = skin(name);
    let proxy = proxy_for(proxies, target);
    proxy.reset();
    proxy.set_fault(Fault::On(target, action));
    let upload = app
        .http
        .post(app.url(V1))
        .header("CF-Connecting-IP", ip)
        .header("Idempotency-Key", &key)
        .multipart(upload_form(bytes.clone(), &format!("{name}.osk"), None))
        .send();
    let response = within_deadline(DEADLINE, async { upload.await.expect("answered") }).await;
    proxy.set_fault(Fault::None);
    assert!(
        proxy.counts().faults_applied > 0,
        "{context}: the fault never met its target"
    );
    settle(proxies).await;
    if response.status() == StatusCode::CREATED {
        assert!(
            app.skin_stored(name).await,
            "{context}: 201 without the object"
        );
    } else {
        unavailable(response, &context).await;
    }
    app.assert_skins_consistent().await;
    if !claim_may_land_late(target, action) {
        app.assert_no_claim_left().await;
    }
    app.assert_skin_retry_tells_the_truth(ip, &key, name, &bytes, TAKEOVER)
        .await;
    app.assert_skins_consistent().await;
    app.assert_no_claim_left().await;
}

/// Every fault at `target` of a skin upload, each case a skin of its own.
async fn skin_step(target: Target, subnet: u8) {
    let (app, proxies) = TestApp::spawn_via_proxies(ENV).await;
    for (i, fault) in faults().into_iter().enumerate() {
        let ip = format!("198.19.{subnet}.{}", i + 1);
        let name = format!("fault {subnet} {i}");
        skin_case(&app, &proxies, target, fault, &ip, &name).await;
    }
}

#[tokio::test]
async fn skin_claim_of_the_key_meets_every_fault() {
    skin_step(Target::Statement(CLAIM), 1).await;
}

#[tokio::test]
async fn skin_rate_limit_meets_every_fault() {
    skin_step(Target::Request("DynamoDB.UpdateItem"), 2).await;
}

/// The registry row's claim of the name (skins/store.rs CLAIM_SQL).
#[tokio::test]
async fn skin_name_claim_meets_every_fault() {
    skin_step(Target::Statement("INSERT INTO skins"), 3).await;
}

/// The object's write: a lost answer after S3 stored it must not make the name's own retry
/// a 409 `skin_exists`.
#[tokio::test]
async fn skin_object_upload_meets_every_fault() {
    skin_step(Target::Request("S3.PutObject"), 4).await;
}

/// The registry row's confirmation (skins/store.rs CONFIRM_SQL).
#[tokio::test]
async fn skin_name_confirmation_meets_every_fault() {
    skin_step(Target::Statement("UPDATE skins SET stored_at"), 5).await;
}

/// The key's completion with the 201.
#[tokio::test]
async fn skin_key_completion_meets_every_fault() {
    skin_step(Target::Statement("SET status = 'completed'"), 6).await;
}

/// The deadline's settings: several calls each just under their own timeout add up past it.
const DEADLINE_ENV: &[(&str, &str)] = &[
    ("REQUEST_DEADLINE_MS", "2000"),
    ("DB_TIMEOUT_MS", "1500"),
    ("AWS_TIMEOUT_MS", "1500"),
    ("RATE_LIMIT_RENDER", "1000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "100"),
];
const SHORT_DEADLINE: Duration = Duration::from_millis(2000);

/// With each backing service slowed in turn, every answer to `POST /v1/render` (and to a
/// keyed retry that waits on the first request's claim) comes within the deadline and is the
/// right success or a 503 with `Retry-After` (409 `idempotency_in_progress` with `Retry-After`
/// for the waiting retry).
#[tokio::test]
async fn every_render_is_answered_within_the_request_deadline() {
    let (app, proxies) = TestApp::spawn_via_proxies(DEADLINE_ENV).await;
    let warm = app
        .render_with_key("198.18.20.1", "warm", &unique_replay())
        .await;
    assert_eq!(warm.status(), StatusCode::ACCEPTED);
    let every_statement = Target::Statement("");
    let cases = [
        (every_statement, Duration::from_millis(700)),
        (every_statement, Duration::from_millis(1800)),
        (
            Target::Request("DynamoDB.UpdateItem"),
            Duration::from_millis(1400),
        ),
        (
            Target::Request("DynamoDB.UpdateItem"),
            Duration::from_millis(1800),
        ),
        (Target::Request("S3.PutObject"), Duration::from_millis(1400)),
        (Target::Request("S3.PutObject"), Duration::from_millis(1800)),
        (
            Target::Request("SQS.SendMessageBatch"),
            Duration::from_millis(1400),
        ),
        (
            Target::Request("SQS.SendMessageBatch"),
            Duration::from_millis(1800),
        ),
    ];
    let mut told = Vec::new();
    for (i, (target, delay)) in cases.into_iter().enumerate() {
        let context = format!("{target:?} answered {delay:?} late");
        let (ip, key, replay) = (
            format!("198.18.21.{i}"),
            format!("slow-{i}"),
            unique_replay(),
        );
        let proxy = proxy_for(&proxies, target);
        proxy.set_fault(Fault::On(target, Action::DelayAnswer(delay)));
        let first = within_deadline(SHORT_DEADLINE, app.render_with_key(&ip, &key, &replay));
        let retry = async {
            // The retry comes while the first request holds the key (or once it is done).
            let claimed = format!(
                "SELECT count(*) FROM idempotency_keys WHERE key = '{key}' AND status = 'in_progress'"
            );
            let give_up = Instant::now() + SHORT_DEADLINE;
            while app.count(&claimed).await == 0 && Instant::now() < give_up {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            within_deadline(SHORT_DEADLINE, app.render_with_key(&ip, &key, &replay)).await
        };
        let (first, retry) = tokio::join!(first, retry);
        proxy.set_fault(Fault::None);
        let first_job = match first.status() {
            StatusCode::ACCEPTED => {
                let body: Value = first.json().await.unwrap();
                Some(body["job_id"].as_str().unwrap().to_owned())
            }
            _ => {
                assert!(
                    !matches!(target, Target::Request("SQS.SendMessageBatch")),
                    "{context}: the job was committed before the publish: 202"
                );
                unavailable(first, &context).await;
                None
            }
        };
        told.extend(first_job.clone());
        match retry.status() {
            StatusCode::ACCEPTED => {
                let replayed = retry.headers().get("idempotent-replayed").is_some();
                let body: Value = retry.json().await.unwrap();
                let job = body["job_id"].as_str().unwrap().to_owned();
                if replayed && first_job.is_some() {
                    assert_eq!(Some(&job), first_job.as_ref(), "{context}: the retry's job");
                }
                told.push(job);
            }
            StatusCode::CONFLICT => {
                assert!(
                    header(&retry, "retry-after").is_some(),
                    "{context}: 409 without Retry-After"
                );
                let body: Value = retry.json().await.unwrap();
                assert_eq!(body["code"], "idempotency_in_progress", "{context}: {body}");
            }
            _ => {
                unavailable(retry, &format!("{context} (the retry)")).await;
            }
        }
        settle(&proxies).await;
    }
    app.assert_told_jobs_exist(&told).await;
    app.assert_consistent().await;
    app.assert_every_live_job_queued().await;
}
