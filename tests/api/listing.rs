//! `GET /v1/jobs` is a key's own jobs (without a key, a 401), a cursor page at a time, read by
//! index however many jobs others have; `GET /v1/jobs/{id}` is a capability; and the janitor
//! deletes what has ended past `JOB_RETENTION`, in bounded batches, never an active job.

use std::collections::HashSet;

use osurender_core::adapters::postgres::jobs::PageStatement;
use osurender_core::domain::hash::Md5;
use osurender_core::domain::JobStatus;
use osurender_core::ports::jobs::{JobQuery, PageCursor};
use osurender_core::usecases::janitor;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{header, problem, TestApp};
use crate::support::jobs::{item_ids, READER};
use crate::support::keys::TestKey;
use crate::support::replays::{fixture, render_form, valid_form};

const ROOMY: &[(&str, &str)] = &[
    ("RATE_LIMIT_RENDER", "1000/hour"),
    ("RATE_LIMIT_READ", "100000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "1000"),
];

/// A key with room for everything a listing test submits.
async fn key(app: &TestApp) -> TestKey {
    app.create_key("1000/hour", 1000).await
}

impl TestApp {
    /// Inserts `count` jobs of `client_ip` in `status`, the n-th created (and last updated)
    /// `ago_secs + n * spacing_secs` seconds ago; `every` clients take turns when it is more
    /// than 1 (`{client_ip}.{n % every}`). Their ids.
    async fn insert_jobs(
        &self,
        client_ip: &str,
        every: i64,
        count: i64,
        status: &str,
        ago_secs: f64,
        spacing_secs: f64,
    ) -> Vec<String> {
        self.column_with(
            "INSERT INTO jobs (id, status, client_ip, skin, config, replay_key, created_at, \
                                   updated_at)
                 SELECT gen_random_uuid(), $2::text::job_status,
                        CASE WHEN $3::int8 > 1 THEN $1::text || '.' || (g % $3::int8)
                             ELSE $1::text END,
                        'Default', '{\"skin\": \"Default\"}', 'replays/inserted.osr',
                        now() - ($5::float8 + g * $6::float8) * interval '1 second',
                        now() - ($5::float8 + g * $6::float8) * interval '1 second'
                   FROM generate_series(1, $4::int8) g
                 RETURNING id::text",
            &[
                &client_ip,
                &status,
                &every,
                &count,
                &ago_secs,
                &spacing_secs,
            ],
        )
        .await
    }

    /// `key`'s whole listing, `limit` at a time, following each page's `next`.
    async fn follow_pages(&self, key: &TestKey, first: &str) -> (Vec<String>, Vec<usize>) {
        let (mut ids, mut sizes) = (Vec::new(), Vec::new());
        let mut path = first.to_owned();
        let mut total = None;
        loop {
            let response = self.get_with(READER, &key.bearer, &path).await;
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let page: Value = response.json().await.unwrap();
            assert!(page.get("offset").is_none());
            // The first page counts every match; the later ones count nothing.
            let counted = (page["total"].as_u64(), page["total_capped"].as_bool());
            match total {
                None => total = Some(counted),
                Some(_) => assert_eq!(counted, (None, None), "{path}"),
            }
            sizes.push(item_ids(&page).len());
            ids.extend(item_ids(&page));
            match page.get("next") {
                Some(next) => {
                    let next = next.as_str().unwrap();
                    let cursor = page["next_cursor"].as_str().unwrap();
                    assert!(next.ends_with(&format!("cursor={cursor}")), "{next}");
                    path = next.to_owned();
                }
                None => {
                    assert!(page.get("next_cursor").is_none());
                    assert_eq!(
                        total,
                        Some((Some(ids.len() as u64), Some(false))),
                        "the total is every page's items"
                    );
                    return (ids, sizes);
                }
            }
            assert!(sizes.len() < 1000, "the pages end");
        }
    }

    /// The ids of `client`'s jobs in listing order, as the database has them.
    async fn listing_order(&self, client: &str, status: Option<&str>) -> Vec<String> {
        self.column_with(
            "SELECT id::text FROM jobs WHERE client_ip = $1
                AND ($2::text IS NULL OR status::text = $2)
              ORDER BY created_at DESC, id DESC",
            &[&client, &status],
        )
        .await
    }
}

/// Three keys: Alice's completed job (`done`) and queued one, Bob's queued job, nothing of
/// Carol's.
struct ThreeClients {
    app: TestApp,
    alice: TestKey,
    bob: TestKey,
    carol: TestKey,
    /// Alice's completed job, with a video and a thumbnail.
    done: String,
    /// Alice's queued job, younger than `done`.
    queued: String,
    bobs: String,
}

const ALICES_ADDRESS: &str = "198.51.100.71";
const CAROLS_ADDRESS: &str = "198.51.100.73";

async fn three_clients() -> ThreeClients {
    let app = TestApp::spawn(ROOMY).await;
    let (alice, bob, carol) = (key(&app).await, key(&app).await, key(&app).await);
    let done = app
        .submit_with(ALICES_ADDRESS, &alice.bearer, valid_form())
        .await;
    let response = app
        .render_with(
            ALICES_ADDRESS,
            &alice.bearer,
            render_form(fixture("valid_1.osr"), "b.osr", &[]),
        )
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let queued = response.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bobs = app
        .submit_with("198.51.100.72", &bob.bearer, valid_form())
        .await;
    app.report_ok(&done, json!({ "status": "rendering" })).await;
    app.report_ok(
        &done,
        json!({ "status": "completed", "video_key": "renders/v.mp4", "thumb_key": "renders/t.jpg" }),
    )
    .await;
    ThreeClients {
        app,
        alice,
        bob,
        carol,
        done,
        queued,
        bobs,
    }
}

#[tokio::test]
async fn a_client_lists_only_its_own_jobs() {
    let ThreeClients {
        app,
        alice,
        bob,
        carol,
        done,
        queued,
        bobs,
    } = three_clients().await;
    let page = app.list_as(&alice, "").await;
    assert_eq!(item_ids(&page), [queued.clone(), done.clone()]);
    assert!(page.get("next").is_none());
    assert_eq!(item_ids(&app.list_as(&bob, "").await), [bobs.as_str()]);
    assert!(item_ids(&app.list_as(&carol, "").await).is_empty());
}

/// Not even those sent from it: 401, no quota.
#[tokio::test]
async fn an_address_lists_no_ones_jobs() {
    let ThreeClients { app, .. } = three_clients().await;
    let anonymous = app.get_as(ALICES_ADDRESS, "/v1/jobs").await;
    assert_eq!(anonymous.headers()["www-authenticate"], "Bearer");
    assert!(anonymous.headers().get("x-ratelimit-limit").is_none());
    let body = problem(anonymous, StatusCode::UNAUTHORIZED, "api_key_required").await;
    assert!(
        body["detail"].as_str().unwrap().contains("job_id"),
        "{body}"
    );
}

#[tokio::test]
async fn a_listing_carries_no_artifact_links_even_for_the_callers_completed_job() {
    let ThreeClients { app, alice, .. } = three_clients().await;
    let page = app.list_as(&alice, "").await;
    let listed = &page["items"][1];
    assert_eq!(
        (&listed["status"], &listed["artifacts"]),
        (&json!("completed"), &Value::Null)
    );
    assert!(!page.to_string().contains("renders/"), "{page}");
}

#[tokio::test]
async fn a_status_filter_narrows_the_callers_own_jobs_and_never_widens_them() {
    let ThreeClients {
        app,
        alice,
        bob,
        carol,
        done,
        bobs,
        ..
    } = three_clients().await;
    for status in ["queued", "completed", "failed"] {
        let query = format!("?status={status}");
        let mine: HashSet<String> = item_ids(&app.list_as(&bob, &query).await)
            .into_iter()
            .collect();
        assert!(
            mine.is_subset(&HashSet::from([bobs.clone()])),
            "{status}: {mine:?}"
        );
        assert!(item_ids(&app.list_as(&carol, &query).await).is_empty());
    }
    assert_eq!(
        item_ids(&app.list_as(&alice, "?status=completed").await),
        [done.as_str()]
    );
}

/// Another client's cursor is only a place in time: it pages through the caller's own jobs.
#[tokio::test]
async fn another_clients_cursor_pages_through_the_callers_own_jobs() {
    let ThreeClients {
        app,
        alice,
        bob,
        carol,
        bobs,
        ..
    } = three_clients().await;
    let first = app.list_as(&alice, "?limit=1").await;
    let cursor = first["next_cursor"].as_str().unwrap();
    for (client, own) in [(&bob, vec![bobs.clone()]), (&carol, vec![])] {
        let page = app.list_as(client, &format!("?cursor={cursor}")).await;
        let listed: HashSet<String> = item_ids(&page).into_iter().collect();
        assert!(listed.is_subset(&own.into_iter().collect()), "{listed:?}");
    }
}

#[tokio::test]
async fn whoever_holds_a_job_id_reads_the_job_links_included() {
    let ThreeClients { app, done, .. } = three_clients().await;
    let response = app
        .get_as(CAROLS_ADDRESS, &format!("/v1/jobs/{done}"))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let job: Value = response.json().await.unwrap();
    assert!(job["artifacts"]["video_url"].as_str().is_some(), "{job}");
}

#[tokio::test]
async fn pages_follow_next_to_the_end_newest_first() {
    let app = TestApp::spawn(ROOMY).await;
    let me = key(&app).await;
    let mine = &me.client();
    app.insert_jobs(mine, 1, 6, "completed", 0.0, 60.0).await;
    app.insert_jobs(mine, 1, 4, "failed", 30.0, 60.0).await;
    // Two of one instant: the id breaks the tie, so no page repeats or skips either.
    app.insert_jobs(mine, 1, 2, "failed", 1000.0, 0.0).await;
    app.insert_jobs("198.51.100.81", 1, 50, "completed", 0.0, 7.0)
        .await;
    let all = app.listing_order(mine, None).await;
    assert_eq!(all.len(), 12);

    for (limit, sizes) in [
        (5, vec![5, 5, 2]),
        (6, vec![6, 6]),
        (12, vec![12]),
        (100, vec![12]),
    ] {
        let (ids, pages) = app
            .follow_pages(&me, &format!("/v1/jobs?limit={limit}"))
            .await;
        assert_eq!(ids, all, "limit {limit}");
        assert_eq!(
            pages, sizes,
            "limit {limit}: `next` only while there is more"
        );
    }
    let failed = app.listing_order(mine, Some("failed")).await;
    assert_eq!(failed.len(), 6);
    let (ids, pages) = app
        .follow_pages(&me, "/v1/jobs?status=failed&limit=4")
        .await;
    assert_eq!((ids, pages), (failed, vec![4, 2]));

    let page = app.list_as(&me, "?limit=1").await;
    assert_eq!(item_ids(&page), all[..1]);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let decoded = PageCursor::decode(&cursor).unwrap();
    assert_eq!(decoded.id.to_string(), all[0]);
    let past_the_end = PageCursor {
        created_at: decoded.created_at - chrono::Duration::days(365),
        ..decoded
    };
    let page = app
        .list_as(&me, &format!("?cursor={}", past_the_end.encode()))
        .await;
    assert!(item_ids(&page).is_empty() && page.get("next").is_none());

    let truncated = &cursor[..cursor.len() - 2];
    let padded = format!("{cursor}==");
    let longer = format!("{cursor}AAAA");
    for bad in [
        "",
        "x",
        truncated,
        &padded,
        &longer,
        "%00",
        "not%20a%20cursor",
    ] {
        let response = app
            .get_with(READER, &me.bearer, &format!("/v1/jobs?cursor={bad}"))
            .await;
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            None,
            "{bad}: no quota"
        );
        let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
        assert!(
            body["detail"].as_str().unwrap().starts_with("cursor"),
            "{body}"
        );
    }
    let body = problem(
        app.get_with(READER, &me.bearer, "/v1/jobs?offset=10").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
    )
    .await;
    assert!(
        body["detail"].as_str().unwrap().contains("cursor"),
        "{body}"
    );
}

/// Every bad query parameter of a listing is in `invalid_params`, an unparsable one as much as
/// one out of range or one sent twice, the first also in `detail`, and none spends quota; a
/// parameter the listing does not read may come twice.
#[tokio::test]
async fn every_bad_listing_parameter_is_named_in_invalid_params() {
    let app = TestApp::spawn(ROOMY).await;
    let me = key(&app).await;
    for (path, names) in [
        ("/v1/jobs?limit=ten&status=paused", &["limit", "status"][..]),
        ("/v1/jobs?limit=&cursor=x", &["limit", "cursor"]),
        ("/v1/jobs?limit=1.5", &["limit"]),
        ("/v1/skins?limit=ten&cursor=%25%25", &["limit", "cursor"]),
        ("/v1/skins?limit=-1", &["limit"]),
        // A parameter sent twice is named, and the others are checked too.
        ("/v1/jobs?limit=1&limit=2", &["limit"]),
        (
            "/v1/jobs?status=queued&limit=ten&status=failed",
            &["status", "limit"],
        ),
        ("/v1/skins?cursor=a&limit=5&cursor=b", &["cursor"]),
    ] {
        let response = app.get_with(READER, &me.bearer, path).await;
        assert_eq!(header(&response, "x-ratelimit-remaining"), None, "{path}");
        let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
        let invalid = body["invalid_params"].as_array().expect("invalid_params");
        let listed: Vec<&str> = invalid
            .iter()
            .map(|param| param["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed, names, "{path}: {body}");
        assert_eq!(
            body["detail"],
            format!("{}: {}", names[0], invalid[0]["reason"].as_str().unwrap()),
            "{path}"
        );
    }
    let ignored = app.get_with(READER, &me.bearer, "/v1/jobs?x=1&x=2").await;
    assert_eq!(ignored.status(), StatusCode::OK);
}

/// The planner's choice with 300,000 jobs of 3,000 other clients (mostly ended, as history is)
/// and fresh statistics: every shape of the page statement reads its client's index range and
/// no statement scans `jobs` whole.
#[tokio::test]
async fn listing_reads_by_index_with_a_large_table() {
    let app = TestApp::spawn(ROOMY).await;
    let me = key(&app).await;
    app.insert_jobs("10.9.8", 3000, 270_050, "completed", 0.0, 8.0)
        .await;
    app.insert_jobs("10.9.7", 3000, 29_900, "failed", 4.0, 8.0)
        .await;
    app.insert_jobs("10.9.6", 50, 50, "queued", 2.0, 1.0).await;
    app.insert_jobs(&me.client(), 1, 20, "completed", 1.0, 100.0)
        .await;
    app.insert_jobs(&me.client(), 1, 5, "failed", 3.0, 100.0)
        .await;
    let mine = app
        .submit_with("198.51.100.90", &me.bearer, valid_form())
        .await;
    app.db.batch_execute("ANALYZE jobs").await.unwrap();
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 300_026);

    let client = me.id.client();
    let cursor = PageCursor {
        created_at: chrono::Utc::now() - chrono::Duration::minutes(10),
        id: uuid::Uuid::max().into(),
    };
    let (player, beatmap) = (Some("PlayerOne"), Md5::parse(&"ab".repeat(16)).ok());
    for (n, (status, after, (player, beatmap), index)) in [
        (None, None, (None, None), "jobs_by_client_age"),
        (None, Some(cursor), (None, None), "jobs_by_client_age"),
        (
            Some(JobStatus::Failed),
            None,
            (None, None),
            "jobs_by_client_status_age",
        ),
        (
            Some(JobStatus::Queued),
            Some(cursor),
            (None, None),
            "jobs_by_client_status_age",
        ),
        (None, None, (player, None), "jobs_by_client_player_age"),
        (
            None,
            Some(cursor),
            (player, None),
            "jobs_by_client_player_age",
        ),
        (
            None,
            None,
            (None, beatmap.clone()),
            "jobs_by_client_beatmap_age",
        ),
        (
            None,
            Some(cursor),
            (None, beatmap.clone()),
            "jobs_by_client_beatmap_age",
        ),
        (
            None,
            None,
            (player, beatmap.clone()),
            "jobs_by_client_player_beatmap_age",
        ),
        (
            None,
            Some(cursor),
            (player, beatmap.clone()),
            "jobs_by_client_player_beatmap_age",
        ),
        // A sandbox key's status filter: an age range of the client's jobs (and a final
        // status, stored).
        (
            Some(JobStatus::Queued),
            None,
            (None, None),
            "jobs_by_client_age",
        ),
        (
            Some(JobStatus::Completed),
            None,
            (None, None),
            "jobs_by_client_status_age",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let query = JobQuery {
            status,
            player: player.map(str::to_owned),
            beatmap_md5: beatmap,
            sandbox: n >= 10,
            limit: 20,
            after,
        };
        let statement = PageStatement::new(&client, &query);
        let explain = format!("EXPLAIN (FORMAT JSON) {}", statement.sql);
        let plan: Value = app
            .db
            .query_typed(&explain, &statement.params())
            .await
            .unwrap()[0]
            .get(0);
        let nodes = plan_nodes(&plan[0]["Plan"]);
        let label = format!("{query:?}");
        // job_counts and fair_clock are one row each: a young sandbox job's place
        // is read from them.
        let one_row = |node: &Value| {
            node["Relation Name"] == "job_counts" || node["Relation Name"] == "fair_clock"
        };
        assert!(
            nodes
                .iter()
                .all(|node| node["Node Type"] != "Seq Scan" || one_row(node)),
            "{label}: {plan:#}"
        );
        let listing = nodes
            .iter()
            .find(|node| node["Alias"] == "j")
            .unwrap_or_else(|| panic!("{label}: {plan:#}"));
        assert_eq!(listing["Index Name"], index, "{label}: {plan:#}");

        // The total reads the same index range, bounded: no scan, whatever the table holds.
        let explain = format!("EXPLAIN (FORMAT JSON) {}", statement.count_sql);
        let plan: Value = app
            .db
            .query_typed(&explain, &statement.count_params())
            .await
            .unwrap()[0]
            .get(0);
        let nodes = plan_nodes(&plan[0]["Plan"]);
        assert!(
            nodes.iter().all(|node| node["Node Type"] != "Seq Scan"),
            "{label} (count): {plan:#}"
        );
        assert!(
            nodes.iter().any(|node| node["Node Type"] == "Limit"),
            "{label} (count) is cut at its cap: {plan:#}"
        );
    }

    // A key with more jobs than the total counts: 1 000, capped, and no more read.
    let busy = key(&app).await;
    app.insert_jobs(&busy.client(), 1, 1_050, "completed", 1.0, 0.01)
        .await;
    let page = app.list_as(&busy, "?limit=1").await;
    assert_eq!(
        (&page["total"], &page["total_capped"]),
        (&json!(1_000), &json!(true))
    );

    let (ids, _) = app.follow_pages(&me, "/v1/jobs?limit=10").await;
    assert_eq!(ids, app.listing_order(&me.client(), None).await);
    assert_eq!((ids.len(), &ids[0]), (26, &mine));
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan, subplans included.
fn plan_nodes(node: &Value) -> Vec<&Value> {
    let mut nodes = vec![node];
    for child in node["Plans"].as_array().into_iter().flatten() {
        nodes.extend(plan_nodes(child));
    }
    nodes
}

#[tokio::test]
async fn the_janitor_deletes_what_ended_past_the_retention_and_nothing_active() {
    let app = TestApp::spawn(&[ROOMY[0], ROOMY[2], ("JOB_RETENTION", "30d")]).await;
    let old_done = app.submit("198.51.100.100").await;
    let recent_done = app.submit("198.51.100.101").await;
    let rendering = app.submit("198.51.100.102").await;
    let queued = app.submit("198.51.100.103").await;
    for job in [&old_done, &recent_done] {
        app.report_ok(job, json!({ "status": "rendering" })).await;
        app.report_ok(job, json!({ "status": "completed", "video_key": "v.mp4" }))
            .await;
    }
    app.report_ok(&rendering, json!({ "status": "rendering", "progress": 5 }))
        .await;
    // A month old, all of them; the render still has a report due (its deadline ahead), and the
    // queued one is ended by this very run, so it has only just ended.
    app.db
        .execute(
            "UPDATE jobs SET created_at = now() - interval '40 days',
                             updated_at = now() - interval '31 days',
                             deadline_at = CASE WHEN status = 'rendering'
                                                THEN now() + interval '1 hour' END
              WHERE id::text = ANY ($1)",
            &[&vec![old_done.clone(), rendering.clone(), queued.clone()]],
        )
        .await
        .unwrap();
    // Many more, past two batches; and a day short of the retention, which stay.
    let batch = janitor::PRUNE_BATCH;
    let bulk = app
        .insert_jobs(
            "203.0.113",
            7,
            2 * batch + 17,
            "expired",
            31.0 * 86_400.0,
            1.0,
        )
        .await;
    let kept = app
        .insert_jobs("203.0.113.9", 1, 3, "failed", 29.0 * 86_400.0, 1.0)
        .await;
    app.db
        .batch_execute(
            "INSERT INTO outbox_events (job_id, event_type, payload)
             SELECT id, 'render_job_created', '{}' FROM jobs WHERE replay_key = 'replays/inserted.osr';
             INSERT INTO webhook_nonces VALUES ('spent-1', now() - interval '1 minute'),
                                               ('live-1', now() + interval '1 minute');
             INSERT INTO idempotency_keys (client_ip, endpoint, key, request_hash, token, status,
                                           created_at, expires_at)
             VALUES ('198.51.100.100', 'render', 'old', '\\x00', gen_random_uuid(), 'completed',
                     now() - interval '2 days', now() - interval '1 day'),
                    ('198.51.100.100', 'render', 'live', '\\x00', gen_random_uuid(), 'completed',
                     now(), now() + interval '1 day');",
        )
        .await
        .unwrap();
    let events_before = app.count("SELECT count(*) FROM outbox_events").await;

    let report = janitor::run(&app.instance().await).await.unwrap();
    let deleted = bulk.len() as u64 + 1;
    assert_eq!(report.jobs_deleted, deleted, "{report:?}");
    assert_eq!(report.expired, 1, "{report:?}");
    assert_eq!(
        report.outbox_events_deleted, deleted,
        "each deleted job's event: {report:?}"
    );
    assert_eq!(
        (report.nonces_pruned, report.idempotency_keys_pruned),
        (1, 1)
    );
    let events_after = app.count("SELECT count(*) FROM outbox_events").await;
    assert_eq!(events_before - events_after, deleted as i64);

    let left: HashSet<String> = app
        .column_with::<String>("SELECT id::text FROM jobs", &[])
        .await
        .into_iter()
        .collect();
    let expected: HashSet<String> = [recent_done.clone(), rendering.clone(), queued.clone()]
        .into_iter()
        .chain(kept)
        .collect();
    assert_eq!(left, expected);
    assert_eq!(
        app.count("SELECT count(*) FROM outbox_events WHERE job_id NOT IN (SELECT id FROM jobs)")
            .await,
        0
    );
    assert_eq!(
        app.get(&format!("/v1/jobs/{old_done}")).await.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.job(&rendering).await["status"], "rendering");
    let left = "SELECT count(*) FROM webhook_nonces WHERE nonce LIKE '%-1'";
    assert_eq!(app.count(left).await, 1, "the live nonce");
    let left = "SELECT count(*) FROM idempotency_keys WHERE key = 'live'";
    assert_eq!(app.count(left).await, 1);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 1);

    let again = janitor::run(&app.instance().await).await.unwrap();
    assert_eq!((again.jobs_deleted, again.outbox_events_deleted), (0, 0));
    // Admission carries on as before.
    let response = app.render("198.51.100.104", valid_form()).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}
