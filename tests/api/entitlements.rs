//! What a render may ask for: a key's entitlements and the anonymous ones refuse an
//! option with a 403 `option_not_permitted` naming the field, before the rate limit; a skin
//! that is neither built in nor registered is a 422 `unknown_skin`, after it; and a 422 lists
//! every bad field in `invalid_params`.

use osurender_core::domain::entitlement::{DeniedOptions, Entitlements};
use osurender_core::domain::key::{KeyKind, KeyLimits};
use osurender_core::domain::Resolution;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::app::{accepted_job, header, problem, TestApp};
use crate::support::jobs::READER;
use crate::support::replays::{render_form, unique_replay, valid_form};

const ROOMY: &[(&str, &str)] = &[("MAX_ACTIVE_JOBS_PER_IP", "100")];

/// Limits of `render_limit` renders, at most 1080p, without motion blur or a custom skin.
fn capped(render_limit: &str) -> KeyLimits {
    KeyLimits::new(render_limit.parse().unwrap(), 100)
        .unwrap()
        .with_entitlements(Entitlements {
            max_resolution: Some(Resolution::Hd1080),
            denied: DeniedOptions::parse("motion_blur,skin").unwrap(),
        })
}

/// The 403 of `field`: its `field` member, and the field named in `detail`.
async fn not_permitted(response: reqwest::Response, field: &str) {
    assert_eq!(
        header(&response, "x-ratelimit-remaining"),
        None,
        "{field}: no quota read"
    );
    let body = problem(response, StatusCode::FORBIDDEN, "option_not_permitted").await;
    assert_eq!(body["field"], field, "{body}");
    assert!(
        body["detail"].as_str().unwrap().starts_with(field),
        "{body}"
    );
}

#[tokio::test]
async fn a_keys_entitlements_refuse_options_before_its_rate_limit() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = "198.51.100.70";
    let live = app.create_key_with(KeyKind::Live, capped("3/hour")).await;
    let sandbox = app
        .create_key_with(KeyKind::Sandbox, capped("3/hour"))
        .await;
    for key in [&live, &sandbox] {
        // More refusals than the key has renders: none of them spends one.
        for (field, value) in [
            ("resolution", "4k"),
            ("resolution", "1440p"),
            ("motion_blur", "true"),
            // Denied before it is looked up: no such skin is registered either.
            ("skin", "Other"),
        ] {
            let form = render_form(unique_replay(), "a.osr", &[(field, value)]);
            not_permitted(app.render_with(ip, &key.bearer, form).await, field).await;
        }
        let within = render_form(
            unique_replay(),
            "a.osr",
            &[
                ("resolution", "1080p"),
                ("motion_blur", "false"),
                ("video", "true"),
            ],
        );
        let admitted = app.render_with(ip, &key.bearer, within).await;
        assert_eq!(header(&admitted, "x-ratelimit-remaining"), Some(2));
        accepted_job(admitted).await;
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 2);
}

#[tokio::test]
async fn anonymous_entitlements_come_from_the_configuration() {
    let app = TestApp::spawn(&[
        ("MAX_ACTIVE_JOBS_PER_IP", "100"),
        ("ANONYMOUS_MAX_RESOLUTION", "720p"),
        ("ANONYMOUS_DENY", "video,storyboard"),
    ])
    .await;
    let ip = "198.51.100.71";
    for (field, value) in [
        ("resolution", "1080p"),
        ("video", "true"),
        ("storyboard", "on"),
    ] {
        let form = render_form(unique_replay(), "a.osr", &[(field, value)]);
        not_permitted(app.render(ip, form).await, field).await;
    }
    // A form that names no resolution renders at the highest one permitted.
    let job = accepted_job(app.render(ip, valid_form()).await).await;
    assert_eq!(app.job(&job).await["config"]["resolution"], "720p");
    // A key has its own: everything, by default.
    let key = app.create_key("60/minute", 100).await;
    let form = render_form(
        unique_replay(),
        "a.osr",
        &[("resolution", "4k"), ("video", "true")],
    );
    let job = app.submit_with(ip, &key.bearer, form).await;
    assert_eq!(app.job(&job).await["config"]["resolution"], "4k");
}

#[tokio::test]
async fn a_skin_outside_the_registry_is_refused_after_the_rate_limit() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = "198.51.100.72";
    app.register_skin("Cool Skin").await;
    // An upload that claimed its name and has not stored the skin yet.
    app.db
        .execute(
            "INSERT INTO skins (name, claim) VALUES ('Uploading', gen_random_uuid())",
            &[],
        )
        .await
        .unwrap();
    for skin in ["NoSuchSkin", "Uploading"] {
        let form = render_form(unique_replay(), "a.osr", &[("skin", skin)]);
        let response = app.render(ip, form).await;
        assert_eq!(
            header(&response, "x-ratelimit-remaining"),
            Some(5),
            "{skin}: counted past the rate limit, then given back (the registry's state)"
        );
        let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "unknown_skin").await;
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("skin:") && detail.contains(skin),
            "{body}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert!(app.replay_objects().await.is_empty(), "nothing stored");
    // Registered names in any case, and the built-in skin without a row.
    for skin in ["cool skin", "Default", "DEFAULT"] {
        let form = render_form(unique_replay(), "a.osr", &[("skin", skin)]);
        accepted_job(app.render(ip, form).await).await;
    }
}

#[tokio::test]
async fn a_422_lists_every_bad_field() {
    let app = TestApp::spawn(&[]).await;
    let form = render_form(
        unique_replay(),
        "a.osr",
        &[
            ("bg_dim", "2"),
            ("skin", "Fine"),
            ("video", "perhaps"),
            ("resolution", "8k"),
        ],
    );
    let response = app.render("198.51.100.73", form).await;
    assert_eq!(header(&response, "x-ratelimit-remaining"), None);
    let body = problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    let names: Vec<&str> = params(&body)
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bg_dim", "video", "resolution"], "{body}");
    assert_eq!(
        body["detail"],
        format!(
            "bg_dim: {}",
            body["invalid_params"][0]["reason"].as_str().unwrap()
        )
    );
    assert_eq!(
        body["invalid_params"][2],
        json!({"name": "resolution", "reason": "must be one of 720p, 1080p, 1440p, 4k"})
    );

    let key = app.create_key("60/minute", 20).await;
    let listing = app
        .get_with(
            READER,
            &key.bearer,
            "/v1/jobs?limit=0&status=paused&player=Cookiezi",
        )
        .await;
    let body = problem(listing, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    let names: Vec<&str> = params(&body)
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["limit", "status"], "{body}");
    assert!(
        body["detail"].as_str().unwrap().starts_with("limit: "),
        "{body}"
    );

    let skins = app.get("/v1/skins?limit=0&cursor=%25%25").await;
    let body = problem(skins, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    let names: Vec<&str> = params(&body)
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["limit", "cursor"], "{body}");
}

fn params(body: &Value) -> &Vec<Value> {
    body["invalid_params"]
        .as_array()
        .expect("an invalid_params list")
}
