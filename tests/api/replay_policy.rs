//! The render policy's replay rules (mode, Autoplay, length at the mods' speed, input, MD5s;
//! and, at the look, a recently failed render) and what a job says it renders (`replay`), in
//! its reads, its listing filters, its queue message and its callbacks.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use osurender_core::domain::key::{KeyKind, KeyLimits};

use crate::support::app::{accepted_job, header, problem, TestApp};
use crate::support::callbacks::{sweep_callbacks, Receiver};
use crate::support::jobs::item_ids;
use crate::support::keys::TestKey;
use crate::support::queue::Delivered;
use crate::support::replays::{fixture, played_frames, render_form, valid_form, Play};

const DT: u32 = 1 << 6;
const HD: u32 = 1 << 3;
const HT: u32 = 1 << 8;
const NC: u32 = 1 << 9;
const AUTOPLAY: u32 = 1 << 11;

fn form_of(play: &Play) -> reqwest::multipart::Form {
    render_form(play.osr(), "play.osr", &[])
}

/// A play of `secs` seconds of the map's time, with input.
fn lasting(player: &str, secs: i64) -> Play {
    Play::new(player, played_frames(100, secs * 10))
}

#[tokio::test]
async fn replays_the_policy_refuses_get_their_own_code_and_spend_nothing() {
    let app = TestApp::spawn(&[]).await;
    let ip = "198.51.100.40";
    let taiko = Play {
        mode: 1,
        ..lasting("drummer", 60)
    };
    let cases = [
        (form_of(&taiko), "unsupported_mode", "taiko"),
        (
            render_form(fixture("corrupt_taiko_mode.osr"), "t.osr", &[]),
            "unsupported_mode",
            "osu replays only",
        ),
        (
            form_of(&Play {
                mods: AUTOPLAY | HD,
                ..lasting("osu!", 60)
            }),
            "autoplay_replay",
            "Autoplay",
        ),
        (
            form_of(&lasting("marathoner", 901)),
            "replay_too_long",
            "at most 900 s",
        ),
        (
            // The cursor never leaves its first place and no key is ever pressed.
            form_of(&Play::new(
                "afk",
                format!("0|256|-500|0,{}", "16|100|100|0,".repeat(100)),
            )),
            "replay_without_input",
            "never presses a key",
        ),
    ];
    for (form, code, says) in cases {
        let body = problem(
            app.render(ip, form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
        )
        .await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{code}: {detail}");
    }
    // Refused before the rate limit, with nothing stored: the first admitted render finds its
    // whole window and an empty bucket.
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert!(app.replay_objects().await.is_empty());
    let admitted = app.render(ip, form_of(&lasting("player", 900))).await;
    assert_eq!(admitted.status(), StatusCode::ACCEPTED);
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(4));

    // A deployment whose workers render taiko takes it.
    let taiko_too = TestApp::spawn(&[("RENDER_MODES", "osu, taiko")]).await;
    accepted_job(taiko_too.render(ip, form_of(&taiko)).await).await;
}

#[tokio::test]
async fn length_is_measured_at_the_mods_speed() {
    let app = TestApp::spawn(&[("MAX_REPLAY_LENGTH", "600")]).await;
    // DT and NC play 1.5× as fast, HT at 0.75×: the real length decides.
    for (n, (secs, mods, admitted)) in [
        (700, 0, false),
        (700, DT, true),
        (700, DT | NC, true),
        (901, DT, false),
        (500, 0, true),
        (500, HT, false),
        (450, HT, true),
    ]
    .into_iter()
    .enumerate()
    {
        let play = Play {
            mods,
            ..lasting(&format!("runner{n}"), secs)
        };
        let response = app
            .render(&format!("198.51.100.{}", 50 + n), form_of(&play))
            .await;
        if admitted {
            let job = accepted_job(response).await;
            let length = app.job(&job).await["replay"]["length_ms"].clone();
            let expected = match mods {
                0 => secs * 1000,
                HT => secs * 4000 / 3,
                _ => secs * 2000 / 3,
            };
            assert_eq!(length, json!(expected), "{secs} s, mods {mods}");
        } else {
            problem(
                response,
                StatusCode::UNPROCESSABLE_ENTITY,
                "replay_too_long",
            )
            .await;
        }
    }
}

#[tokio::test]
async fn a_key_may_have_its_own_length_limit() {
    let app = TestApp::spawn(&[]).await;
    let limits = KeyLimits::new("60/minute".parse().unwrap(), 5)
        .unwrap()
        .with_max_replay_length(Some(100))
        .unwrap();
    let short = app.create_key_with(KeyKind::Live, limits).await;
    let refused = app
        .render_with("203.0.113.62", &short.bearer, form_of(&lasting("p", 120)))
        .await;
    let body = problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "replay_too_long").await;
    assert!(
        body["detail"].as_str().unwrap().contains("at most 100 s"),
        "{body}"
    );
    app.submit_with("203.0.113.62", &short.bearer, form_of(&lasting("p", 99)))
        .await;
    // Without a key of its own, the service's 900 s.
    accepted_job(
        app.render("203.0.113.63", form_of(&lasting("p", 120)))
            .await,
    )
    .await;
}

#[tokio::test]
async fn a_job_shows_what_its_replay_renders_in_reads_the_queue_and_callbacks() {
    let app = TestApp::spawn(&[("ALLOW_PRIVATE_CALLBACKS", "true")]).await;
    let receiver = Receiver::start(0).await;
    let key = app.create_key("60/minute", 20).await;
    // Format characters (a right-to-left override, a zero-width space, a BOM) are left out of
    // every answer and message; markup is text like any other, in JSON.
    let play = Play {
        mods: HD | DT,
        counts: [300, 20, 5, 40, 10, 3],
        online_id: 4_000_000_001,
        ..lasting("\u{202e}<b>Mr\u{200b}ekk</b>\u{feff}", 90)
    };
    let form = render_form(
        play.osr(),
        "play.osr",
        &[("callback_url", &receiver.url("/hook"))],
    );
    let job = app.submit_with("203.0.113.60", &key.bearer, form).await;
    let expected = json!({
        "player": "<b>Mrekk</b>",
        "beatmap_md5": play.beatmap_md5,
        "replay_md5": play.replay_md5,
        "mode": "osu",
        "mods": ["HD", "DT"],
        "score": 1_234_567,
        "max_combo": 456,
        // (300·300 + 100·20 + 50·5) / (300·328)
        "accuracy": 93.75,
        "count_300": 300,
        "count_100": 20,
        "count_50": 5,
        "count_miss": 3,
        "played_at": "2024-01-23T12:34:56Z",
        "length_ms": 60_000,
        "online_id": 4_000_000_001u64,
    });
    assert_eq!(app.job(&job).await["replay"], expected);
    let listed = app.list_as(&key, "").await;
    assert_eq!(listed["items"][0]["replay"], expected);
    let read = app.get(&format!("/v1/jobs/{job}")).await;
    assert_eq!(
        read.headers()["content-type"],
        "application/json",
        "never a document a browser renders as HTML"
    );

    let message = render_message(&app, &job).await;
    assert_eq!(
        message.body["payload"]["replay"], expected,
        "{}",
        message.body
    );

    app.report_ok(&job, json!({ "status": "rendering", "progress": 5 }))
        .await;
    sweep_callbacks(&app.instance().await).await;
    let received = receiver.received();
    assert_eq!(received.len(), 2);
    for callback in &received {
        assert_eq!(callback.json["replay"], expected, "{}", callback.json);
    }
}

/// A server, and a key that renders 60 a minute, 20 at once.
async fn app_with_a_key() -> (TestApp, TestKey) {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/minute", 20).await;
    (app, key)
}

/// A NUL (which no database column can hold) or another control character in the player's
/// name is dropped, not a 503.
#[tokio::test]
async fn control_characters_in_a_players_name_are_dropped() {
    let (app, key) = app_with_a_key().await;
    let hostile = lasting("evil\u{0}na\u{7}me", 31);
    let job = app
        .submit_with("203.0.113.60", &key.bearer, form_of(&hostile))
        .await;
    assert_eq!(app.job(&job).await["replay"]["player"], "evilname");
}

#[tokio::test]
async fn an_unsubmitted_score_has_no_online_id() {
    let (app, key) = app_with_a_key().await;
    let unsubmitted = Play {
        online_id: 0,
        ..lasting("Mrekk", 30)
    };
    let job = app
        .submit_with("203.0.113.60", &key.bearer, form_of(&unsubmitted))
        .await;
    let replay = app.job(&job).await["replay"].clone();
    assert_eq!(
        (&replay["online_id"], &replay["mods"]),
        (&Value::Null, &json!([]))
    );
}

#[tokio::test]
async fn a_replays_hashes_are_md5s_kept_lowercase_and_found_in_any_case() {
    let app = TestApp::spawn(&[]).await;
    let ip = "203.0.113.65";
    for hostile in ["../../../../etc/passwd", "x' OR '1'='1", &"g".repeat(32)] {
        for (play, which) in [
            (
                Play {
                    beatmap_md5: hostile.into(),
                    ..lasting("p", 30)
                },
                "beatmap hash",
            ),
            (
                Play {
                    replay_md5: hostile.into(),
                    ..lasting("p", 30)
                },
                "replay hash",
            ),
        ] {
            let response = app.render(ip, form_of(&play)).await;
            let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_md5").await;
            let detail = body["detail"].as_str().unwrap();
            assert!(detail.contains(which), "{hostile}: {detail}");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert!(app.drain_queue().await.is_empty(), "nothing dispatched");

    let key = app.create_key("60/minute", 20).await;
    let upper = Play {
        beatmap_md5: "0123456789ABCDEF0123456789ABCDEF".into(),
        replay_md5: "FEDCBA9876543210FEDCBA9876543210".into(),
        ..lasting("Mrekk", 30)
    };
    let job = app.submit_with(ip, &key.bearer, form_of(&upper)).await;
    let replay = app.job(&job).await["replay"].clone();
    assert_eq!(
        (&replay["beatmap_md5"], &replay["replay_md5"]),
        (
            &json!("0123456789abcdef0123456789abcdef"),
            &json!("fedcba9876543210fedcba9876543210")
        )
    );
    let message = render_message(&app, &job).await;
    assert_eq!(
        message.body["payload"]["replay"], replay,
        "dispatched as stored"
    );
    for filter in [&upper.beatmap_md5, "0123456789abcdef0123456789ABCDEF"] {
        let listed = app.list_as(&key, &format!("?beatmap_md5={filter}")).await;
        assert_eq!(item_ids(&listed), std::slice::from_ref(&job), "{filter}");
    }

    // A file without a replay hash is a replay all the same: shown with an empty one.
    let unhashed = Play {
        replay_md5: String::new(),
        ..lasting("Mrekk", 31)
    };
    let job = app.submit_with(ip, &key.bearer, form_of(&unhashed)).await;
    assert_eq!(app.job(&job).await["replay"]["replay_md5"], "");
}

#[tokio::test]
async fn a_keys_listing_finds_a_players_or_a_beatmaps_jobs() {
    let app = TestApp::spawn(&[]).await;
    let key = app.create_key("60/minute", 20).await;
    let ip = "203.0.113.61";
    let (beatmap_a, beatmap_b) = ("a".repeat(32), "b".repeat(32));
    let mut jobs = Vec::new();
    for (player, beatmap) in [
        ("Alice", &beatmap_a),
        ("alice", &beatmap_b),
        ("Bob", &beatmap_a),
    ] {
        let play = Play {
            beatmap_md5: beatmap.clone(),
            ..lasting(player, 60)
        };
        jobs.push(app.submit_with(ip, &key.bearer, form_of(&play)).await);
    }
    let other = app.create_key("60/minute", 20).await;
    app.submit_with(ip, &other.bearer, form_of(&lasting("Alice", 61)))
        .await;

    let ids = |page: &Value| item_ids(page);
    assert_eq!(
        ids(&app.list_as(&key, "?player=ALICE").await),
        [jobs[1].clone(), jobs[0].clone()],
        "a player's jobs, whatever the case, of this key only"
    );
    assert_eq!(
        ids(&app
            .list_as(&key, &format!("?beatmap_md5={}", beatmap_a.to_uppercase()))
            .await),
        [jobs[2].clone(), jobs[0].clone()]
    );
    // A player's jobs of one beatmap, by an index of both; with the total of the matches.
    let both = app
        .list_as(&key, &format!("?player=ALICE&beatmap_md5={beatmap_a}"))
        .await;
    assert_eq!(ids(&both), [jobs[0].clone()]);
    assert_eq!(
        (&both["total"], &both["total_capped"]),
        (&json!(1), &json!(false))
    );
    let alices = app.list_as(&key, "?player=alice&limit=1").await;
    assert_eq!(alices["total"], 2, "all pages together: {alices}");
    // A status goes alone: with a replay filter each would scan the other's rows.
    let mixed = app
        .get_with(ip, &key.bearer, "/v1/jobs?status=queued&player=bob")
        .await;
    let body = problem(mixed, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    assert_eq!(body["invalid_params"][0]["name"], "player", "{body}");
    // Pages keep the filter.
    let first = app.list_as(&key, "?player=alice&limit=1").await;
    let next = first["next"].as_str().unwrap();
    assert!(next.contains("player=alice"), "{next}");
    assert_eq!(
        ids(&app
            .list_as(
                &key,
                next.split_once("/v1/jobs").map_or(next, |(_, query)| query)
            )
            .await),
        [jobs[0].clone()]
    );
    for bad in ["?beatmap_md5=xyz", "?player=", "?player=a%00b"] {
        let response = app
            .get_with(ip, &key.bearer, &format!("/v1/jobs{bad}"))
            .await;
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }
}

#[tokio::test]
async fn a_failed_job_says_why_in_a_code_of_the_documented_set() {
    let app = TestApp::spawn(&[("REPLAY_FAILURE_COOLDOWN", "0")]).await;
    for (n, (reported, code, retryable)) in [
        (Some("beatmap_not_found"), "beatmap_not_found", false),
        (Some("skin_download_failed"), "skin_download_failed", true),
        (Some("gpu_on_fire"), "render_failed", false),
        (None, "render_failed", false),
    ]
    .into_iter()
    .enumerate()
    {
        let job = app.submit(&format!("198.51.100.{}", 80 + n)).await;
        let before = app.job(&job).await;
        assert_eq!(
            (&before["error_code"], &before["retryable"]),
            (&Value::Null, &Value::Null)
        );
        let mut report = json!({ "status": "failed" });
        if let Some(reported) = reported {
            report["error_code"] = json!(reported);
        }
        app.report_ok(&job, report).await;
        let after = app.job(&job).await;
        assert_eq!(
            (&after["error_code"], &after["retryable"]),
            (&json!(code), &json!(retryable)),
            "{reported:?}"
        );
    }
    // A worker that went silent: the janitor's failure, retryable.
    let job = app.submit("198.51.100.91").await;
    app.report_ok(&job, json!({ "status": "rendering" })).await;
    app.db
        .execute(
            "UPDATE jobs SET deadline_at = now() - interval '1 second' WHERE id = $1",
            &[&job.parse::<uuid::Uuid>().unwrap()],
        )
        .await
        .unwrap();
    osurender_core::usecases::janitor::run(&app.instance().await)
        .await
        .unwrap();
    let after = app.job(&job).await;
    assert_eq!(
        (&after["error_code"], &after["retryable"]),
        (&json!("timed_out"), &json!(true))
    );
    // Only a failed report has a code.
    let job = app.submit("198.51.100.90").await;
    let response = app
        .report(
            &job,
            json!({ "status": "rendering", "error_code": "timed_out" }),
        )
        .await;
    problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
}

#[tokio::test]
async fn a_replay_whose_render_failed_is_refused_to_everyone_until_the_cooldown_ends() {
    let app = TestApp::spawn(&[("REPLAY_FAILURE_COOLDOWN", "3")]).await;
    let replay = lasting("unlucky", 60).osr();
    let form = || render_form(replay.clone(), "play.osr", &[]);
    // Failures that are not the replay's own keep nothing out: the service's, one
    // submitter's skin (anyone could pick a skin that fails, to lock a replay out for
    // others), a crash, none reported.
    let failed =
        |code: &str| json!({ "status": "failed", "error": "it broke", "error_code": code });
    for report in [
        failed("worker_stopped"),
        failed("skin_not_found"),
        failed("renderer_crashed"),
        json!({ "status": "failed" }),
    ] {
        let job = accepted_job(app.render("198.51.100.70", form()).await).await;
        app.report_ok(&job, report).await;
    }
    // The replay's own does.
    let job = accepted_job(app.render("198.51.100.70", form()).await).await;
    app.report_ok(&job, json!({ "status": "rendering", "progress": 50 }))
        .await;
    app.report_ok(&job, failed("beatmap_not_found")).await;

    // Another client, and the first one again: refused, with when to try again, and no quota
    // spent (the first admitted render finds its whole window).
    let other = "198.51.100.71";
    for ip in [other, "198.51.100.70"] {
        let refused = app.render(ip, form()).await;
        let retry_after = header(&refused, "retry-after").expect("Retry-After");
        assert!((1..=3).contains(&retry_after), "{retry_after}");
        problem(
            refused,
            StatusCode::UNPROCESSABLE_ENTITY,
            "replay_failed_recently",
        )
        .await;
    }
    let admitted = app.render(other, valid_form()).await;
    assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(4));

    tokio::time::sleep(Duration::from_millis(3_200)).await;
    accepted_job(app.render(other, form()).await).await;
}

/// The render queue's message for `job`.
async fn render_message(app: &TestApp, job: &str) -> Delivered {
    let messages = app.drain_queue().await;
    messages
        .into_iter()
        .find(|m| m.body["job_id"] == job)
        .expect("the job's render message")
}
