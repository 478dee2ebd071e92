//! o!rdr's render options: an o!rdr form, in its camelCase names, is admitted as it
//! is; the job's `config` and the workers' message carry every option under our names (and the
//! old names for one release); a bad option is listed with the others; a key can deny the
//! options that cost the farm.

use reqwest::StatusCode;
use serde_json::{json, Value};

use osurender_core::domain::entitlement::{DeniedOptions, Entitlements};
use osurender_core::domain::key::{KeyKind, KeyLimits};
use osurender_core::domain::render::{OptionKind, RenderOptions};

use crate::support::app::{accepted_job, invalid_param_names, problem, TestApp};
use crate::support::replays::{render_form, unique_replay};

/// A value of `kind` that is not its default, as a form sends it, and as `config` shows it.
fn changed(kind: OptionKind) -> (&'static str, Value) {
    match kind {
        OptionKind::Skin => ("Default", json!("Default")),
        OptionKind::Resolution => ("1280x720", json!("720p")),
        OptionKind::Bool(true) => ("false", json!(false)),
        OptionKind::Bool(false) => ("true", json!(true)),
        OptionKind::Percent(_) => ("37", json!(37)),
        OptionKind::CursorSize(_) => ("1.25", json!(1.25)),
    }
}

#[tokio::test]
async fn an_ordr_form_renders_with_every_option_it_names() {
    let app = TestApp::spawn(&[("MAX_ACTIVE_JOBS_PER_IP", "100")]).await;
    let fields: Vec<(&str, &str)> = RenderOptions::SPECS
        .iter()
        .map(|spec| (spec.ordr_name, changed(spec.kind).0))
        .collect();
    let job = accepted_job(
        app.render(
            "198.51.100.90",
            render_form(unique_replay(), "a.osr", &fields),
        )
        .await,
    )
    .await;
    let config = app.job(&job).await["config"].clone();
    for spec in RenderOptions::SPECS {
        assert_eq!(
            config[spec.name],
            changed(spec.kind).1,
            "{}: {config}",
            spec.name
        );
    }
    // The old names, beside the new for one release.
    assert_eq!(config["bg_dim"], json!(0.37));
    assert_eq!(config["video"], config["load_video"]);
    assert_eq!(config["motion_blur"], config["motion_blur_960fps"]);

    let messages = app.drain_queue().await;
    let message = messages
        .iter()
        .find(|m| m.body["job_id"] == job.as_str())
        .expect("the job's render message");
    assert_eq!(
        message.body["payload"]["config"], config,
        "the workers read the same"
    );

    // Our names, the same job options.
    let ours: Vec<(&str, &str)> = RenderOptions::SPECS
        .iter()
        .map(|spec| (spec.name, changed(spec.kind).0))
        .collect();
    let job = accepted_job(
        app.render(
            "198.51.100.90",
            render_form(unique_replay(), "a.osr", &ours),
        )
        .await,
    )
    .await;
    assert_eq!(app.job(&job).await["config"], config);
}

#[tokio::test]
async fn every_bad_option_is_listed_under_the_name_it_was_sent_as() {
    let app = TestApp::spawn(&[]).await;
    let form = render_form(
        unique_replay(),
        "a.osr",
        &[
            ("showPPCounter", "perhaps"),
            ("music_volume", "101"),
            ("cursorSize", "3"),
            ("in_game_bg_dim", "0.5"),
            ("resolution", "960x540"),
        ],
    );
    let body = problem(
        app.render("198.51.100.91", form).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
    )
    .await;
    assert_eq!(
        invalid_param_names(&body),
        [
            "showPPCounter",
            "music_volume",
            "cursorSize",
            "in_game_bg_dim",
            "resolution"
        ],
        "{body}"
    );
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

/// A key that may not show the scoreboard (osu! reads per render): a plain form renders
/// without it; asking for it, under either name, is refused naming the field as sent.
#[tokio::test]
async fn a_denied_option_is_off_unless_asked_for_and_refused_when_asked() {
    let app = TestApp::spawn(&[]).await;
    let limits = KeyLimits::new("60/minute".parse().unwrap(), 100)
        .unwrap()
        .with_entitlements(Entitlements {
            max_resolution: None,
            denied: DeniedOptions::parse("showScoreboard,motion_blur").unwrap(),
        });
    let key = app.create_key_with(KeyKind::Live, limits).await;
    let ip = "198.51.100.92";
    let plain = render_form(unique_replay(), "a.osr", &[]);
    let job = app.submit_with(ip, &key.bearer, plain).await;
    let config = app.job(&job).await["config"].clone();
    assert_eq!(config["show_scoreboard"], false, "{config}");
    assert_eq!(config["motion_blur_960fps"], false, "{config}");
    for field in [
        "showScoreboard",
        "show_scoreboard",
        "motionBlur960fps",
        "motion_blur",
    ] {
        let form = render_form(unique_replay(), "a.osr", &[(field, "true")]);
        let body = problem(
            app.render_with(ip, &key.bearer, form).await,
            StatusCode::FORBIDDEN,
            "option_not_permitted",
        )
        .await;
        assert_eq!(body["field"], field, "{body}");
    }
}
