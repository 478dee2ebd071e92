//! The operator's controls. A pause or a ban made with `osurender-admin` reaches a
//! running server within `POLICY_CACHE_TTL` (1 s here; a server's first request reads it); a paused intake answers 503
//! `render_jobs_paused` and inserts nothing; a banned address, key or player answers 403
//! `banned` and spends no quota.

use std::time::Duration;

use osurender_core::domain::key::KeyKind;
use osurender_core::domain::replay::{inspect, ReplayLimits};
use osurender_testkit::proxy::Fault;
use reqwest::{Response, StatusCode};
use serde_json::Value;

use crate::support::app::{accepted_job, header, problem, TestApp};
use crate::support::replays::{fixture, played_frames, render_form, valid_form, Play};
use crate::support::skins::{skin, upload_form, LEGACY, V1};

const TTL: &[(&str, &str)] = &[("POLICY_CACHE_TTL", "1")];

/// Past the server's `POLICY_CACHE_TTL` since now: whatever the cache holds is stale, so the
/// next request reads the policy afresh.
async fn one_ttl_later() {
    tokio::time::sleep(Duration::from_millis(1_200)).await;
}

#[tokio::test]
async fn a_pause_reaches_a_running_server_within_the_ttl_and_inserts_nothing() {
    let app = TestApp::spawn(TTL).await;
    accepted_job(app.render("203.0.113.1", valid_form()).await).await;
    let sandbox = app.create_key_of(KeyKind::Sandbox, "60/minute", 20).await;
    let live = app.create_key("60/minute", 20).await;

    let paused = app
        .admin(&["pause", "--reason", "upgrading the renderers"])
        .await;
    assert_eq!(paused["paused"], true);
    one_ttl_later().await;
    let response = app.render("203.0.113.2", valid_form()).await;
    assert_eq!(header(&response, "retry-after"), Some(60));
    assert!(
        header(&response, "x-ratelimit-remaining").is_some(),
        "after the rate limit"
    );
    let body = problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "render_jobs_paused",
    )
    .await;
    assert_eq!(body["reason"], "upgrading the renderers");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("upgrading the renderers"));
    let refused = app
        .render_with("203.0.113.3", &live.bearer, valid_form())
        .await;
    problem(
        refused,
        StatusCode::SERVICE_UNAVAILABLE,
        "render_jobs_paused",
    )
    .await;
    assert_eq!(
        app.count("SELECT count(*) FROM jobs").await,
        1,
        "nothing inserted"
    );
    assert_eq!(app.replay_objects().await.len(), 1, "nothing stored");
    // A sandbox key's jobs hold no capacity: never paused.
    app.submit_with("203.0.113.4", &sandbox.bearer, valid_form())
        .await;

    let resumed = app.admin(&["resume"]).await;
    assert_eq!(resumed["lifted"]["reason"], "upgrading the renderers");
    one_ttl_later().await;
    accepted_job(app.render("203.0.113.5", valid_form()).await).await;
}

#[tokio::test]
async fn an_anonymous_only_pause_still_admits_keys() {
    let app = TestApp::spawn(TTL).await;
    let key = app.create_key("60/minute", 20).await;
    app.admin(&["pause", "--anonymous-only"]).await;
    let response = app.render("203.0.113.10", valid_form()).await;
    let body = problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "render_jobs_paused",
    )
    .await;
    assert_eq!(body.get("reason"), None, "no reason given, none shown");
    app.submit_with("203.0.113.10", &key.bearer, valid_form())
        .await;
}

/// A banned request's 403: its body.
async fn banned(response: Response) -> Value {
    assert_eq!(
        header(&response, "x-ratelimit-remaining"),
        None,
        "no quota spent"
    );
    problem(response, StatusCode::FORBIDDEN, "banned").await
}

#[tokio::test]
async fn address_bans_cover_their_ipv4_and_ipv6_ranges_and_spend_no_quota() {
    let app = TestApp::spawn(TTL).await;
    app.admin(&["bans", "add", "--ip", "203.0.113.0/24", "--reason", "abuse"])
        .await;
    let v6 = app
        .admin(&["bans", "add", "--ip", "2001:db8:1::/48", "--for", "7d"])
        .await;
    let response = app.render("203.0.113.77", valid_form()).await;
    let body = banned(response).await;
    assert_eq!(body["reason"], "abuse");
    assert_eq!(body.get("until"), None, "until removed");
    assert!(body["detail"]
        .as_str()
        .unwrap()
        .contains("until further notice"));
    let body = banned(app.render("2001:db8:1:ffff::1", valid_form()).await).await;
    assert_eq!(
        body["until"], v6["until"],
        "a temporary ban says when it ends"
    );
    assert!(body["detail"].as_str().unwrap().contains("banned until 20"));
    // A key does not lift an address ban.
    let key = app.create_key("60/minute", 20).await;
    banned(
        app.render_with("203.0.113.77", &key.bearer, valid_form())
            .await,
    )
    .await;
    // Skin uploads too, on both paths.
    for path in [V1, LEGACY] {
        let form = upload_form(skin(path), "a.osk", Some("Banned Skin"));
        banned(app.upload_skin(path, "203.0.113.78", form).await).await;
    }
    // Outside the ranges: admitted.
    accepted_job(app.render("203.0.114.1", valid_form()).await).await;
    accepted_job(app.render("2001:db8:2::1", valid_form()).await).await;

    // The banned requests spent none of the address's quota.
    let id = v6["id"].as_i64().unwrap().to_string();
    app.admin(&["bans", "remove", &id]).await;
    one_ttl_later().await;
    let response = app.render("2001:db8:1:ffff::1", valid_form()).await;
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some(4));
}

/// A fresh server that cannot read the policy has none, which is not an empty one: it refuses
/// with a 503 (a banned player's replay, here) until a read succeeds.
#[tokio::test]
async fn a_server_that_never_read_the_policy_admits_no_one() {
    let (app, proxies) = TestApp::spawn_via_proxies(TTL).await;
    let player = inspect(&fixture("valid_0.osr"), &ReplayLimits::default())
        .unwrap()
        .player_name;
    app.admin(&["bans", "add", "--player", &player]).await;
    // The policy's read alone fails: every other statement would admit.
    proxies
        .postgres
        .set_fault(Fault::cut_before_statement("intake_pause"));
    let response = app.render("203.0.113.50", valid_form()).await;
    assert!(header(&response, "retry-after").is_some());
    problem(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "database_unavailable",
    )
    .await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);

    proxies.postgres.set_fault(Fault::None);
    one_ttl_later().await;
    banned(app.render("203.0.113.50", valid_form()).await).await;
}

#[tokio::test]
async fn key_and_player_bans_refuse_before_the_rate_limit() {
    let app = TestApp::spawn(TTL).await;
    let key = app.create_key("60/minute", 20).await;
    let player = inspect(&fixture("valid_0.osr"), &ReplayLimits::default())
        .unwrap()
        .player_name;
    let shouted = player.to_uppercase();
    app.admin(&["bans", "add", "--player", &shouted, "--reason", "cheating"])
        .await;
    app.admin(&["bans", "add", "--key", &key.id.to_string()])
        .await;
    let response = app.render("203.0.113.30", valid_form()).await;
    assert_eq!(banned(response).await["reason"], "cheating");
    let response = app
        .render_with("198.51.100.30", &key.bearer, valid_form())
        .await;
    banned(response).await;
    let form = upload_form(skin("key"), "a.osk", Some("Key Skin"));
    let response = app
        .http
        .post(app.url(V1))
        .header("CF-Connecting-IP", "198.51.100.30")
        .header("Authorization", &key.bearer)
        .multipart(form)
        .send()
        .await
        .unwrap();
    banned(response).await;
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);

    let listed = app.admin(&["bans", "list"]).await;
    let kinds: Vec<&str> = listed["bans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ban| ban["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.len(), 2, "{listed}");
    assert!(kinds.contains(&"player") && kinds.contains(&"key"));
}

#[tokio::test]
async fn a_player_ban_holds_names_that_read_alike_and_lists_the_name_as_typed() {
    let app = TestApp::spawn(TTL).await;
    app.admin(&[
        "bans", "add", "--player", "Cookiezi", "--reason", "cheating",
    ])
    .await;
    let by = |player: &str| {
        let play = Play::new(player, played_frames(100, 600));
        render_form(play.osr(), "play.osr", &[])
    };
    let ip = "203.0.113.40";
    for alike in [
        "Cookiezi\u{200b}",
        "\u{feff}Cookiezi",
        "C\u{200d}o\u{200c}okiezi",
        "\u{421}ookiezi",
    ] {
        let response = app.render(ip, by(alike)).await;
        assert_eq!(banned(response).await["reason"], "cheating", "{alike:?}");
    }
    accepted_job(app.render(ip, by("WhiteCat")).await).await;
    let listed = app.admin(&["bans", "list"]).await;
    assert_eq!(listed["bans"][0]["target"], "Cookiezi", "{listed}");
}
