//! Skins: `GET /v1/skins`, the direct uploads (v1 and legacy), the presigned upload of large
//! skins and its ingest, against real Postgres and the AWS stand-in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use osurender_core::domain::render::SkinName;
use osurender_core::usecases::skins::ingest::IngestOutcome;
use osurender_core::{usecases::janitor, usecases::skins, App};
use reqwest::multipart::Form;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::support::app::{accepted_job, header, problem, within_one_minute, Proxies, TestApp};
use crate::support::replays::{render_form, unique_replay};
use crate::support::skins::{
    compressed_bomb, declare_size, noise, osk, post_to_s3, skin, upload_form, with_unix_mode,
    LEGACY, V1,
};

/// Long windows keep counting tests clear of a window boundary.
const ROOMY: &[(&str, &str)] = &[
    ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
    ("RATE_LIMIT_LEGACY_SKINS_UPLOAD", "1000/hour"),
];

impl TestApp {
    async fn request_upload(&self, client_ip: &str, body: Value) -> Response {
        self.http
            .post(self.url(V1))
            .header("CF-Connecting-IP", client_ip)
            .json(&body)
            .send()
            .await
            .expect("request completes")
    }

    /// A presigned upload of `bytes` as `name`: the policy asked for (and granted), the file
    /// POSTed to S3 (and taken). The policy, and its object's key.
    async fn presigned_upload(&self, client_ip: &str, name: &str, bytes: &[u8]) -> (Value, String) {
        let response = self
            .request_upload(client_ip, json!({ "name": name, "size": bytes.len() }))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        let upload = body["upload"].clone();
        let posted = post_to_s3(&self.http, &upload, bytes.to_vec()).await;
        assert!(posted.status().is_success(), "{}", posted.status());
        let key = upload["fields"]["key"].as_str().unwrap().to_owned();
        (upload, key)
    }

    /// `form` uploaded on the v1 route: refused, the name taken (409 `skin_exists`).
    async fn assert_name_taken(&self, client_ip: &str, form: Form) {
        let response = self.upload_skin(V1, client_ip, form).await;
        problem(response, StatusCode::CONFLICT, "skin_exists").await;
    }

    async fn skin_names(&self) -> Vec<String> {
        let response = self.http.get(self.url("/v1/skins")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        serde_json::from_value(body["skins"].clone()).unwrap()
    }

    async fn object(&self, key: &str) -> Vec<u8> {
        let object = self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .unwrap();
        object.body.collect().await.unwrap().into_bytes().to_vec()
    }
}

/// `key`'s ingest by `core`: refused, for a reason that says `why` (`case` names the case).
async fn assert_ingest_refused(
    core: &osurender_core::App,
    bucket: &str,
    key: &str,
    why: &str,
    case: &str,
) {
    match skins::ingest(core, bucket, key).await.unwrap() {
        IngestOutcome::Refused(reason) => assert!(reason.contains(why), "{case}: {reason}"),
        other => panic!("{case}: {other:?}"),
    }
}

/// Waits, if need be, for a fresh window of `period_secs`, so the requests of a counting test
/// land in one window.
async fn start_of_window(period_secs: u64) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = now.as_secs() % period_secs;
    if into + 10 > period_secs {
        tokio::time::sleep(Duration::from_secs(period_secs - into)).await;
    }
}

#[tokio::test]
async fn uploads_a_skin_and_lists_it() {
    let app = TestApp::spawn(&[]).await;
    let listing = app.http.get(app.url("/v1/skins")).send().await.unwrap();
    assert_eq!(listing.status(), StatusCode::OK);
    assert_eq!(header(&listing, "x-ratelimit-limit"), Some(120));
    assert_eq!(header(&listing, "x-ratelimit-remaining"), Some(119));
    let body: Value = listing.json().await.unwrap();
    assert_eq!(body, json!({ "skins": ["Default"], "next": null }));

    let bytes = skin("cool");
    let response = app
        .upload_skin(
            V1,
            "203.0.113.5",
            upload_form(bytes.clone(), "Cool Skin.osk", None),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(header(&response, "x-ratelimit-limit"), Some(2));
    assert!(header(&response, "x-ratelimit-reset").is_some());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({ "skin": "Cool Skin" }));
    assert_eq!(app.object("skins/Cool Skin.osk").await, bytes);

    let named = upload_form(skin("a"), "whatever.OSK", Some("alpha_1"));
    let response = app.upload_skin(LEGACY, "203.0.113.5", named).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(header(&response, "x-ratelimit-limit"), Some(5));

    assert_eq!(app.skin_names().await, ["Cool Skin", "Default", "alpha_1"]);
    let stored = app
        .count("SELECT count(*) FROM skins WHERE stored_at IS NOT NULL")
        .await;
    assert_eq!(stored, 2);
}

/// A server whose v1 route takes two uploads an hour, of up to 1 MB; the window starts with
/// room for the whole test.
async fn two_uploads_an_hour() -> TestApp {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_SKINS_UPLOAD", "2/hour"),
        ("MAX_SKIN_BYTES", "1000000"),
    ])
    .await;
    within_one_minute().await;
    app
}

/// The upload client of the refusal tests.
const REFUSED_IP: &str = "198.51.100.20";

impl TestApp {
    /// `form` uploaded on `path` by `REFUSED_IP`, answered before the rate limit (no headers).
    async fn refused_upload(&self, path: &str, form: Form) -> Response {
        let response = self.upload_skin(path, REFUSED_IP, form).await;
        assert!(header(&response, "x-ratelimit-limit").is_none());
        response
    }

    /// None of the refusals spent quota or stored anything: both uploads of the hour are still
    /// there, then the rate limit says no.
    async fn assert_refusals_spent_nothing(&self) {
        assert!(self.objects("skins/").await.is_empty());
        for (name, remaining) in [("one", 1), ("two", 0)] {
            let response = self
                .upload_skin(V1, REFUSED_IP, upload_form(skin(name), "s.osk", Some(name)))
                .await;
            assert_eq!(response.status(), StatusCode::CREATED);
            assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining));
        }
        let limited = self
            .upload_skin(
                V1,
                REFUSED_IP,
                upload_form(skin("three"), "three.osk", None),
            )
            .await;
        assert!(header(&limited, "retry-after").is_some());
        assert_eq!(header(&limited, "x-ratelimit-remaining"), Some(0));
        problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
        assert_eq!(self.skin_names().await, ["Default", "one", "two"]);
    }
}

/// No file, another extension, an empty one, one too large.
#[tokio::test]
async fn an_upload_without_a_good_file_is_refused_and_spends_nothing() {
    let app = two_uploads_an_hour().await;
    let no_file = Form::new().text("name", "x");
    problem(
        app.refused_upload(V1, no_file).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let wrong_extension = upload_form(skin("a"), "skin.zip", None);
    problem(
        app.refused_upload(V1, wrong_extension).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let empty = upload_form(Vec::new(), "skin.osk", None);
    problem(
        app.refused_upload(V1, empty).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let too_large = upload_form(vec![0; 1_000_001], "skin.osk", None);
    problem(
        app.refused_upload(LEGACY, too_large).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;
    app.assert_refusals_spent_nothing().await;
}

/// Not a zip, an empty one, unsafe names, zip bombs.
#[tokio::test]
async fn an_upload_whose_archive_is_unsafe_is_refused_and_spends_nothing() {
    let app = two_uploads_an_hour().await;
    let huge_entry = declare_size(osk(&[("a.wav", &[0; 100])]), 0xFFFF_FFF0, true);
    let lying_entry = declare_size(osk(&[("a.wav", &vec![0; 4 << 20])]), 100, true);
    let bomb = compressed_bomb();
    assert!(bomb.len() < 1_000_000, "{} bytes", bomb.len());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"just some text, not a zip".to_vec(), "not a zip"),
        (osk(&[]), "no files"),
        (osk(&[("../escape.png", b"x")]), "unsafe name"),
        (osk(&[("/etc/cron.d/x", b"x")]), "unsafe name"),
        (osk(&[("sub\\..\\..\\x.png", b"x")]), "unsafe name"),
        (osk(&[("C:/Windows/x.png", b"x")]), "unsafe name"),
        (huge_entry, "unpack to more than"),
        (bomb, "unpack to more than"),
        (lying_entry, "more than the declared 100"),
    ];
    for (bytes, reason) in cases {
        let form = upload_form(bytes, "Bad.osk", None);
        let body = problem(
            app.refused_upload(V1, form).await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_skin",
        )
        .await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{reason}: {detail}");
    }
    app.assert_refusals_spent_nothing().await;
}

/// A path, an empty name, one too long, a file name that makes no name.
#[tokio::test]
async fn an_upload_with_a_bad_name_is_refused_and_spends_nothing() {
    let app = two_uploads_an_hour().await;
    for (file_name, name) in [
        ("ok.osk", Some("../../etc")),
        ("ok.osk", Some("")),
        ("ok.osk", Some(&*"x".repeat(129))),
        ("skin.v2.osk", None),
    ] {
        let form = upload_form(skin("a"), file_name, name);
        let body = problem(
            app.refused_upload(V1, form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
        assert!(
            body["detail"].as_str().unwrap().starts_with("name:"),
            "{body}"
        );
    }
    app.assert_refusals_spent_nothing().await;
}

/// The client of the taken-name tests.
const TAKEN_IP: &str = "198.51.100.21";

#[tokio::test]
async fn an_existing_name_is_not_overwritten() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = TAKEN_IP;
    let first = skin("first");
    let response = app
        .upload_skin(V1, ip, upload_form(first.clone(), "Taken.osk", None))
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    for path in [V1, LEGACY] {
        let again = upload_form(skin("second"), "Taken.osk", None);
        let response = app.upload_skin(path, ip, again).await;
        assert!(header(&response, "x-ratelimit-limit").is_some());
        problem(response, StatusCode::CONFLICT, "skin_exists").await;
    }
    for reserved in ["Default", "default"] {
        let form = upload_form(skin("d"), "d.osk", Some(reserved));
        app.assert_name_taken(ip, form).await;
    }
    assert_eq!(app.object("skins/Taken.osk").await, first);
    assert_eq!(app.skin_names().await, ["Default", "Taken"]);
}

/// An object from before the name registry (or another fleet) is kept too.
#[tokio::test]
async fn a_stored_object_outside_the_registry_is_not_overwritten() {
    let app = TestApp::spawn(ROOMY).await;
    let legacy = skin("legacy");
    app.s3
        .put_object()
        .bucket(&app.bucket)
        .key("skins/Old One.osk")
        .body(legacy.clone().into())
        .send()
        .await
        .unwrap();
    let form = upload_form(skin("new"), "Old One.osk", None);
    app.assert_name_taken(TAKEN_IP, form).await;
    assert_eq!(app.object("skins/Old One.osk").await, legacy);
    assert_eq!(app.skin_names().await, ["Default", "Old One"]);
}

/// A claim whose upload is in flight holds the name; one whose function died long ago (never
/// confirmed, older than any function runs) is taken over.
#[tokio::test]
async fn a_claim_in_flight_holds_its_name_and_a_dead_one_is_taken_over() {
    let app = TestApp::spawn(ROOMY).await;
    app.db
        .batch_execute(
            "INSERT INTO skins (name, claim) VALUES ('In Flight', gen_random_uuid());
             INSERT INTO skins (name, claim, claimed_at)
             VALUES ('Abandoned', gen_random_uuid(), now() - interval '1 hour')",
        )
        .await
        .unwrap();
    let form = upload_form(skin("late"), "In Flight.osk", None);
    app.assert_name_taken(TAKEN_IP, form).await;
    let form = upload_form(skin("revived"), "Abandoned.osk", None);
    assert_eq!(
        app.upload_skin(V1, TAKEN_IP, form).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(app.skin_names().await, ["Abandoned", "Default"]);
}

#[tokio::test]
async fn concurrent_uploads_of_one_new_name_admit_exactly_one() {
    let app = TestApp::spawn(ROOMY).await;
    let uploads: Vec<Vec<u8>> = (0..12).map(|i| skin(&format!("racer {i}"))).collect();
    let responses = join_all(uploads.iter().enumerate().map(|(i, bytes)| {
        let path = if i % 2 == 0 { V1 } else { LEGACY };
        let form = upload_form(bytes.clone(), "Race.osk", None);
        app.upload_skin(path, "198.51.100.22", form)
    }))
    .await;
    let statuses: Vec<StatusCode> = responses.iter().map(Response::status).collect();
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    let conflicts = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((created, conflicts), (1, 11), "{statuses:?}");
    let stored = app.object("skins/Race.osk").await;
    assert!(uploads.contains(&stored));
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 1);
}

#[tokio::test]
async fn v1_and_legacy_uploads_count_separately() {
    let app = TestApp::spawn(&[]).await;
    let ip = "198.51.100.23";
    start_of_window(60).await;
    for i in 0..2 {
        let form = upload_form(skin("v1"), "s.osk", Some(&format!("v1 {i}")));
        assert_eq!(
            app.upload_skin(V1, ip, form).await.status(),
            StatusCode::CREATED
        );
    }
    let form = upload_form(skin("v1"), "s.osk", Some("v1 2"));
    let limited = app.upload_skin(V1, ip, form).await;
    assert_eq!(header(&limited, "x-ratelimit-limit"), Some(2));
    problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    // The presigned path is the v1 route and shares its counter.
    let presign = app
        .request_upload(ip, json!({ "name": "big", "size": 10_000 }))
        .await;
    problem(presign, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;

    for i in 0..5 {
        let form = upload_form(skin("legacy"), "s.osk", Some(&format!("legacy {i}")));
        let response = app.upload_skin(LEGACY, ip, form).await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(header(&response, "x-ratelimit-limit"), Some(5));
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(4 - i));
    }
    let form = upload_form(skin("legacy"), "s.osk", Some("legacy 5"));
    problem(
        app.upload_skin(LEGACY, ip, form).await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    )
    .await;
    // Another client has its own counters.
    let form = upload_form(skin("other"), "s.osk", Some("other"));
    let other = app.upload_skin(V1, "198.51.100.24", form).await;
    assert_eq!(other.status(), StatusCode::CREATED);
    assert_eq!(app.skin_names().await.len(), 1 + 2 + 5 + 1);
}

#[tokio::test]
async fn one_ipv6_allocation_uploads_at_most_its_networks_limits() {
    // An hour's windows, so the storm cannot straddle one.
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_SKINS_UPLOAD_NETWORK", "10/hour"),
        ("RATE_LIMIT_SKINS_UPLOAD_WIDE_NETWORK", "30/hour"),
    ])
    .await;
    start_of_window(3600).await;
    // 120 skins at once from 120 /64s of one /48: each /64 within its own limit.
    let statuses = join_all((0..120).map(|i| {
        let form = upload_form(skin("flood"), "s.osk", Some(&format!("flood {i}")));
        let app = &app;
        async move {
            let response = app
                .upload_skin(V1, &format!("2001:db8:48:{i:x}::1"), form)
                .await;
            let status = response.status();
            let body: Value = response.json().await.unwrap_or_default();
            (
                status,
                body["scope"].as_str().unwrap_or_default().to_owned(),
            )
        }
    }))
    .await;
    let count = |status, scope: &str| {
        statuses
            .iter()
            .filter(|(s, sc)| *s == status && sc == scope)
            .count()
    };
    assert_eq!(count(StatusCode::CREATED, ""), 10, "{statuses:?}");
    assert_eq!(count(StatusCode::TOO_MANY_REQUESTS, "network"), 110);
    // The legacy route and the presigned path count in the same network window.
    let form = upload_form(skin("legacy"), "s.osk", Some("legacy"));
    let legacy = app.upload_skin(LEGACY, "2001:db8:48:ffff::1", form).await;
    let refused = problem(legacy, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert_eq!(refused["scope"], "network");
    let presign = app
        .request_upload(
            "2001:db8:48:fffe::1",
            json!({ "name": "big", "size": 10_000 }),
        )
        .await;
    problem(presign, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;

    // Two more /48s of its /32 take the rest of the wide network's 30; a fourth is refused.
    for net in [0x49, 0x4a] {
        for i in 0..10 {
            let form = upload_form(skin("wide"), "s.osk", Some(&format!("wide {net} {i}")));
            let ip = format!("2001:db8:{net:x}:{i:x}::1");
            let response = app.upload_skin(V1, &ip, form).await;
            assert_eq!(response.status(), StatusCode::CREATED, "{ip}");
        }
    }
    let form = upload_form(skin("wide"), "s.osk", Some("fourth"));
    let fourth = app.upload_skin(V1, "2001:db8:4b::1", form).await;
    let refused = problem(fourth, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert_eq!(refused["scope"], "network");
    assert!(
        refused["detail"].as_str().unwrap().contains("wide network"),
        "{refused}"
    );
    // Another allocation is not held to it.
    let form = upload_form(skin("other"), "s.osk", Some("other"));
    let other = app.upload_skin(V1, "2001:db9::1", form).await;
    assert_eq!(other.status(), StatusCode::CREATED);
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 10 + 20 + 1);
}

#[tokio::test]
async fn presigned_upload_end_to_end() {
    let app = TestApp::spawn(&[]).await;
    let ip = "198.51.100.25";
    let bytes = osk(&[
        ("skin.ini", b"[General]\nName: Big\n"),
        ("big.wav", &vec![7; 300_000]),
    ]);
    let response = app
        .request_upload(ip, json!({ "name": "Big Skin", "size": bytes.len() }))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "x-ratelimit-limit"), Some(2));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["skin"], "Big Skin");
    assert_eq!(body["max_bytes"], bytes.len());
    let upload = &body["upload"];
    assert_eq!(
        upload["url"],
        format!("http://127.0.0.1:4566/{}", app.bucket)
    );
    let fields = &upload["fields"];
    let key = fields["key"].as_str().unwrap().to_owned();
    assert!(
        key.starts_with("incoming/") && key.ends_with("/Big Skin.osk"),
        "{key}"
    );
    for field in [
        "policy",
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-signature",
    ] {
        assert!(fields[field].is_string(), "{field}");
    }
    let expires_at = chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap())
        .unwrap()
        .timestamp();
    let in_15_minutes = chrono::Utc::now().timestamp() + 15 * 60;
    assert!((expires_at - in_15_minutes).abs() <= 5, "{body}");

    let posted = post_to_s3(&app.http, upload, bytes.clone()).await;
    assert!(posted.status().is_success(), "{}", posted.status());
    assert_eq!(app.objects("incoming/").await, [key.as_str()]);
    assert!(!app.skin_names().await.contains(&"Big Skin".to_owned()));

    // The core against this server's resources, to run the ingest as the S3 event would.
    let core = app.instance().await;
    let outcome = skins::ingest(&core, &app.bucket, &key).await.unwrap();
    assert_eq!(
        outcome,
        IngestOutcome::Published(SkinName::parse("Big Skin").unwrap())
    );
    assert_eq!(app.skin_names().await, ["Big Skin", "Default"]);
    assert_eq!(app.object("skins/Big Skin.osk").await, bytes);
    assert!(app.objects("incoming/").await.is_empty());
    // A second event for the same object is refused unread: the name is taken now.
    assert_eq!(
        skins::ingest(&core, &app.bucket, &key).await.unwrap(),
        IngestOutcome::Refused("a skin named `Big Skin` exists already".into())
    );
    assert_eq!(app.skin_names().await, ["Big Skin", "Default"]);
    // Now the name is taken for the presigned path as well.
    let again = app
        .request_upload(ip, json!({ "name": "Big Skin", "size": 1000 }))
        .await;
    problem(again, StatusCode::CONFLICT, "skin_exists").await;
}

#[tokio::test]
async fn presigned_bad_uploads_are_deleted_and_never_listed() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
        ("MAX_SKIN_UPLOAD_BYTES", "2000000"),
    ])
    .await;
    let ip = "198.51.100.26";
    let core = app.instance().await;
    let bomb = compressed_bomb();
    let traversal = osk(&[("../../evil.png", b"x")]);
    let garbage = b"this is not a zip archive at all".to_vec();
    for (name, bytes) in [
        ("Bomb", bomb),
        ("Traversal", traversal),
        ("Garbage", garbage),
    ] {
        let (_, key) = app.presigned_upload(ip, name, &bytes).await;
        assert_ingest_refused(&core, &app.bucket, &key, "not a valid skin", name).await;
    }
    // More than the policy allows: S3 refuses it at the door; moto does not enforce POST
    // policies (nor signatures), so there the ingest's bounded download must refuse it.
    let response = app
        .request_upload(ip, json!({ "name": "Oversized", "size": 1000 }))
        .await;
    let body: Value = response.json().await.unwrap();
    let oversized = osk(&[("noise.bin", &noise(2_100_000))]);
    let posted = post_to_s3(&app.http, &body["upload"], oversized).await;
    if posted.status().is_success() {
        let key = body["upload"]["fields"]["key"].as_str().unwrap();
        assert_ingest_refused(&core, &app.bucket, key, "larger than", "oversized").await;
    }
    assert!(app.objects("incoming/").await.is_empty());
    assert!(app.objects("skins/").await.is_empty());
    assert_eq!(app.skin_names().await, ["Default"]);
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 0);

    // A name taken between the request and the arrival: the late upload is refused.
    let response = app
        .request_upload(ip, json!({ "name": "Late", "size": skin("late").len() }))
        .await;
    let body: Value = response.json().await.unwrap();
    let direct = app
        .upload_skin(V1, ip, upload_form(skin("direct"), "Late.osk", None))
        .await;
    assert_eq!(direct.status(), StatusCode::CREATED);
    post_to_s3(&app.http, &body["upload"], skin("late")).await;
    let key = body["upload"]["fields"]["key"].as_str().unwrap();
    assert!(matches!(
        skins::ingest(&core, &app.bucket, key).await.unwrap(),
        IngestOutcome::Refused(reason) if reason.contains("exists")
    ));
    assert_eq!(app.object("skins/Late.osk").await, skin("direct"));

    // Objects the ingest does not own are left alone.
    assert!(skins::ingest(&core, &app.bucket, "skins/Late.osk")
        .await
        .is_err());
    assert!(skins::ingest(&core, "another-bucket", key).await.is_err());
    assert_eq!(app.objects("skins/").await, ["skins/Late.osk"]);
}

#[tokio::test]
async fn presigned_requests_are_admitted_like_uploads() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
        ("MAX_SKIN_UPLOAD_BYTES", "5000000"),
    ])
    .await;
    let ip = "198.51.100.27";
    for body in [
        json!("text"),
        json!({ "name": "x" }),
        json!({ "name": 3, "size": 100 }),
    ] {
        problem(
            app.request_upload(ip, body).await,
            StatusCode::BAD_REQUEST,
            "invalid_body",
        )
        .await;
    }
    let garbled = app
        .http
        .post(app.url(V1))
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    problem(garbled, StatusCode::BAD_REQUEST, "invalid_body").await;
    problem(
        app.request_upload(ip, json!({ "name": "x", "size": 5_000_001 }))
            .await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;
    for body in [
        json!({ "name": "../x", "size": 100 }),
        json!({ "name": "", "size": 100 }),
        json!({ "name": "ok", "size": 0 }),
    ] {
        problem(
            app.request_upload(ip, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
    }
    problem(
        app.request_upload(ip, json!({ "name": "Default", "size": 100 }))
            .await,
        StatusCode::CONFLICT,
        "skin_exists",
    )
    .await;
    // The legacy route takes forms only.
    let legacy = app
        .http
        .post(app.url(LEGACY))
        .json(&json!({ "name": "x", "size": 100 }))
        .send()
        .await
        .unwrap();
    problem(legacy, StatusCode::BAD_REQUEST, "invalid_file").await;
}

#[tokio::test]
async fn the_dev_server_ingests_presigned_uploads_on_its_own() {
    let app = TestApp::spawn(&[("SKIN_INGEST_INTERVAL", "1")]).await;
    app.presigned_upload("198.51.100.28", "Polled", &skin("polled"))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !app.skin_names().await.contains(&"Polled".to_owned()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ingested in time"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(app.objects("incoming/").await.is_empty());
}

/// Names are trimmed at the edge and compared ignoring case, on every path that names a skin:
/// the `name` field, the file's stem, the presigned request; `Default` in any case is taken.
/// The client of the name tests.
const NAMING_IP: &str = "198.51.100.30";

/// A server with a skin uploaded as "  Mixed Case " (by `NAMING_IP`), and the upload's answer.
async fn app_with_a_mixed_case_skin() -> (TestApp, Response) {
    let app = TestApp::spawn(ROOMY).await;
    let response = app
        .upload_skin(
            V1,
            NAMING_IP,
            upload_form(skin("first"), "x.osk", Some("  Mixed Case ")),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    (app, response)
}

#[tokio::test]
async fn an_uploaded_skins_name_is_trimmed() {
    let (app, response) = app_with_a_mixed_case_skin().await;
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({ "skin": "Mixed Case" })
    );
    assert_eq!(app.object("skins/Mixed Case.osk").await, skin("first"));
}

/// Direct uploads on either route and presigned requests alike; "Default" is taken too.
#[tokio::test]
async fn a_name_is_taken_whatever_its_case_and_surrounding_spaces() {
    let (app, _) = app_with_a_mixed_case_skin().await;
    let ip = NAMING_IP;
    for (path, name, file) in [
        (V1, Some("Mixed Case"), "x.osk"),
        (V1, Some(" mixed case"), "x.osk"),
        (LEGACY, Some("MIXED CASE   "), "x.osk"),
        (LEGACY, Some("mIxEd cAsE"), "x.osk"),
        (V1, None, " MIXED case .osk"),
        (V1, Some("dEfAuLt "), "x.osk"),
    ] {
        let form = upload_form(skin("again"), file, name);
        let response = app.upload_skin(path, ip, form).await;
        problem(response, StatusCode::CONFLICT, "skin_exists").await;
    }
    for name in [" MIXED CASE ", "mixed case", "DEFAULT"] {
        let response = app
            .request_upload(ip, json!({ "name": name, "size": 1000 }))
            .await;
        problem(response, StatusCode::CONFLICT, "skin_exists").await;
    }
}

/// Blank after trimming, in the name field, the file's name or a presigned request.
#[tokio::test]
async fn a_blank_skin_name_is_refused() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = NAMING_IP;
    for name in ["   ", " ", ""] {
        let form = upload_form(skin("blank"), "x.osk", Some(name));
        let body = problem(
            app.upload_skin(V1, ip, form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
        assert!(
            body["detail"].as_str().unwrap().starts_with("name:"),
            "{body}"
        );
    }
    problem(
        app.upload_skin(V1, ip, upload_form(skin("blank"), "   .osk", None))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
    )
    .await;
    problem(
        app.request_upload(ip, json!({ "name": "    ", "size": 1000 }))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
    )
    .await;
}

#[tokio::test]
async fn a_presigned_uploads_name_is_trimmed() {
    let app = TestApp::spawn(ROOMY).await;
    let response = app
        .request_upload(NAMING_IP, json!({ "name": "  Spaced Out  ", "size": 1000 }))
        .await;
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["skin"], "Spaced Out");
    assert!(body["upload"]["fields"]["key"]
        .as_str()
        .unwrap()
        .ends_with("/Spaced Out.osk"));
}

/// Twelve spellings of one new name at once: one is stored, under the spelling that won.
#[tokio::test]
async fn spellings_of_one_new_name_at_once_store_one_skin_under_the_winners_spelling() {
    let (app, _) = app_with_a_mixed_case_skin().await;
    let spellings = ["Race", "race", "RACE", " Race", "race ", "  rAcE  "];
    let responses = join_all((0..12).map(|i| {
        let path = if i % 2 == 0 { V1 } else { LEGACY };
        let form = upload_form(skin(&format!("r{i}")), "x.osk", Some(spellings[i % 6]));
        app.upload_skin(path, NAMING_IP, form)
    }))
    .await;
    let mut created = Vec::new();
    for response in responses {
        match response.status() {
            StatusCode::CREATED => created.push(response.json::<Value>().await.unwrap()),
            status => assert_eq!(status, StatusCode::CONFLICT),
        }
    }
    assert_eq!(created.len(), 1, "{created:?}");
    let winner = created[0]["skin"].as_str().unwrap().to_owned();
    assert_eq!(winner.to_lowercase(), "race");
    assert_eq!(app.objects("skins/").await.len(), 2, "one object per skin");
    assert_eq!(
        app.skin_names().await,
        ["Default", "Mixed Case", winner.as_str()]
    );
}

#[tokio::test]
async fn a_dead_uploads_claim_is_taken_over_by_another_spelling_stored_as_spelled() {
    let app = TestApp::spawn(ROOMY).await;
    app.db
        .batch_execute(
            "INSERT INTO skins (name, claim, claimed_at)
             VALUES ('Abandoned One', gen_random_uuid(), now() - interval '1 hour')",
        )
        .await
        .unwrap();
    let form = upload_form(skin("revived"), "x.osk", Some(" abandoned ONE"));
    let response = app.upload_skin(V1, NAMING_IP, form).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(app.object("skins/abandoned ONE.osk").await, skin("revived"));
    assert!(app.skin_names().await.contains(&"abandoned ONE".to_owned()));
    assert_eq!(
        app.count("SELECT count(*) FROM skins WHERE lower(name) = 'abandoned one'")
            .await,
        1
    );
}

/// An entry whose Unix mode is a symlink, a device, a FIFO or a socket makes the archive
/// invalid (415), directly and presigned; regular files and directories with Unix modes pass.
#[tokio::test]
async fn links_devices_fifos_and_sockets_are_refused() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = "198.51.100.31";
    let core = app.instance().await;
    let archive = |marker: &str| {
        osk(&[
            (
                "skin.ini",
                format!("[General]\nName: {marker}\n").as_bytes(),
            ),
            ("sounds/", b""),
            ("sounds/drum-hitnormal.wav", b"RIFF0000WAVE"),
        ])
    };
    for (i, mode) in [0o120777, 0o020666, 0o060660, 0o010644, 0o140755]
        .into_iter()
        .enumerate()
    {
        let bytes = with_unix_mode(archive(&format!("m{i}")), mode);
        let name = format!("Special {i}");
        for path in [V1, LEGACY] {
            let form = upload_form(bytes.clone(), "x.osk", Some(&name));
            let body = problem(
                app.upload_skin(path, ip, form).await,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_skin",
            )
            .await;
            assert!(
                body["detail"].as_str().unwrap().contains("regular files"),
                "{body}"
            );
        }
        let (_, key) = app.presigned_upload(ip, &name, &bytes).await;
        let case = format!("{mode:o}");
        assert_ingest_refused(&core, &app.bucket, &key, "not a valid skin", &case).await;
    }
    assert!(app.objects("skins/").await.is_empty());
    assert!(app.objects("incoming/").await.is_empty());
    assert_eq!(app.skin_names().await, ["Default"]);

    // Files 0644 and directories 0755, as Info-ZIP on Unix writes them, are a skin.
    let regular = with_unix_mode(archive("regular"), 0o100644);
    let form = upload_form(regular, "x.osk", Some("Regular"));
    assert_eq!(
        app.upload_skin(V1, ip, form).await.status(),
        StatusCode::CREATED
    );
}

impl TestApp {
    /// `GET /v1/skins?{query}`.
    async fn skin_page(&self, query: &str) -> Response {
        self.http
            .get(self.url(&format!("/v1/skins?{query}")))
            .send()
            .await
            .unwrap()
    }

    /// Every name, page by page of `limit`, following `next`; and how many pages.
    async fn all_skin_pages(&self, limit: usize) -> (Vec<String>, usize) {
        let (mut names, mut pages) = (Vec::new(), 0);
        let mut query = format!("limit={limit}");
        loop {
            let response = self.skin_page(&query).await;
            assert_eq!(response.status(), StatusCode::OK);
            let page: Value = response.json().await.unwrap();
            let skins: Vec<String> = serde_json::from_value(page["skins"].clone()).unwrap();
            assert!(skins.len() <= limit + 1, "{limit}: {}", skins.len());
            names.extend(skins);
            pages += 1;
            match page["next"].as_str() {
                Some(next) => query = format!("limit={limit}&cursor={next}"),
                None => return (names, pages),
            }
        }
    }
}

/// `GET /v1/skins` pages through the registry with an opaque cursor: every stored name once,
/// `Default` in its place, nothing claimed but unstored, nothing that is only an S3 object; the
/// page size is bounded and the query runs on the registry's index.
#[tokio::test]
async fn the_skin_list_pages_through_the_registry() {
    let app = TestApp::spawn(&[("RATE_LIMIT_READ", "1000/hour")]).await;
    // 2,400 stored names around `Default` in byte order (digits, capitals, lowercase), one
    // in-flight claim, and an object no upload registered.
    app.db
        .batch_execute(
            "INSERT INTO skins (name, claim, stored_at)
             SELECT prefix || lpad(i::text, 4, '0'), gen_random_uuid(), now()
               FROM generate_series(1, 800) AS i, unnest(ARRAY['0 ', 'Dark ', 'z ']) AS prefix;
             INSERT INTO skins (name, claim) VALUES ('Dangling', gen_random_uuid())",
        )
        .await
        .unwrap();
    app.s3
        .put_object()
        .bucket(&app.bucket)
        .key("skins/Only In S3.osk")
        .body(skin("s3").into())
        .send()
        .await
        .unwrap();
    let mut expected: Vec<String> = app
        .column_with("SELECT name FROM skins WHERE stored_at IS NOT NULL", &[])
        .await;
    expected.push("Default".into());
    expected.sort();

    for limit in [1000, 333, 7] {
        let (names, pages) = app.all_skin_pages(limit).await;
        assert_eq!(names, expected, "limit {limit}");
        assert_eq!(pages, 2400usize.div_ceil(limit), "limit {limit}");
    }
    // No limit: the largest page, and a cursor for the rest.
    let first: Value = app.skin_page("").await.json().await.unwrap();
    assert_eq!(first["skins"].as_array().unwrap().len(), 1000);
    assert!(first["next"].is_string());

    for query in [
        "limit=0",
        "limit=1001",
        "limit=-1",
        "limit=ten",
        "cursor=%25%25",
        "cursor=",
        "cursor=_w",
        &format!("cursor={}", "eHh4".repeat(60)),
    ] {
        let response = app.skin_page(query).await;
        assert!(header(&response, "x-ratelimit-limit").is_none(), "{query}");
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }

    // The page query is an index range scan, whatever the table's size.
    app.db.batch_execute("ANALYZE skins").await.unwrap();
    let plan: String = app
        .db
        .query(
            "EXPLAIN SELECT name FROM skins WHERE stored_at IS NOT NULL AND removed_at IS NULL \
             AND name COLLATE \"C\" > 'Dark 0400' ORDER BY name COLLATE \"C\" LIMIT 1001",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("skins_listed_kept"), "{plan}");
}

/// One presigned policy, one ingest. Once a policy's upload is published, the same policy
/// POSTed again 100 times (the same file and others) and each S3 event delivered costs a
/// registry read and a DELETE each: nothing read, inflated or copied. Before that, the same
/// object delivered ten times at once is checked and copied once.
/// A server reached through proxies, another instance of its core, and a presigned upload
/// of a 200 kB skin as "Once", posted but not yet ingested.
struct Presigned {
    app: TestApp,
    proxies: Proxies,
    core: App,
    /// The upload's policy, and its object's key.
    upload: Value,
    key: String,
    bytes: Vec<u8>,
}

/// The client of the presigned upload tests.
const PRESIGNED_IP: &str = "198.51.100.32";

async fn presigned_once() -> Presigned {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    let core = app.instance().await;
    let bytes = osk(&[
        ("skin.ini", b"[General]\nName: Once\n"),
        ("big.wav", &noise(200_000)),
    ]);
    let (upload, key) = app.presigned_upload(PRESIGNED_IP, "Once", &bytes).await;
    Presigned {
        app,
        proxies,
        core,
        upload,
        key,
        bytes,
    }
}

#[tokio::test]
async fn a_presigned_policy_is_ingested_once() {
    let Presigned {
        app,
        proxies,
        core,
        key,
        bytes,
        ..
    } = presigned_once().await;
    let ip = PRESIGNED_IP;

    // Ten deliveries of one event at once: one run checks and copies; the others find it
    // claimed (or, once it is done, gone).
    proxies.reset();
    let outcomes = join_all((0..10).map(|_| skins::ingest(&core, &app.bucket, &key))).await;
    let outcomes: Vec<IngestOutcome> = outcomes.into_iter().map(Result::unwrap).collect();
    let published = outcomes
        .iter()
        .filter(|o| matches!(o, IngestOutcome::Published(_)))
        .count();
    assert_eq!(published, 1, "{outcomes:?}");
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            IngestOutcome::Published(_) | IngestOutcome::InProgress | IngestOutcome::Gone
        ) || matches!(o, IngestOutcome::Refused(r) if r.contains("exists"))),
        "{outcomes:?}"
    );
    let concurrent = proxies.aws.counts();
    assert_eq!(concurrent.op("S3.PutObject"), 1, "one copy: {concurrent:?}");
    assert_eq!(app.skin_names().await, ["Default", "Once"]);
    assert_eq!(app.object("skins/Once.osk").await, bytes);

    // The same work for one delivery alone, on a second upload of the same bytes.
    let (_, alone_key) = app.presigned_upload(ip, "Alone", &bytes).await;
    proxies.reset();
    assert!(matches!(
        skins::ingest(&core, &app.bucket, &alone_key).await.unwrap(),
        IngestOutcome::Published(_)
    ));
    let single = proxies.aws.counts();
    assert!(single.op("S3.GetObject") >= 2, "{single:?}");
    for op in ["S3.GetObject", "S3.PutObject"] {
        assert_eq!(
            concurrent.op(op),
            single.op(op),
            "{op}: {concurrent:?} {single:?}"
        );
    }
}

/// The policy POSTed again 100 times once its upload is ingested, the same file or another,
/// each delivered: no-ops.
#[tokio::test]
async fn a_presigned_policy_posted_again_after_its_ingest_changes_nothing() {
    let Presigned {
        app,
        proxies,
        core,
        upload,
        key,
        bytes,
    } = presigned_once().await;
    assert!(matches!(
        skins::ingest(&core, &app.bucket, &key).await.unwrap(),
        IngestOutcome::Published(_)
    ));
    let other = skin("another file");
    for i in 0..100 {
        let file = if i % 2 == 0 {
            bytes.clone()
        } else {
            other.clone()
        };
        assert!(post_to_s3(&app.http, &upload, file)
            .await
            .status()
            .is_success());
    }
    proxies.reset();
    for _ in 0..100 {
        match skins::ingest(&core, &app.bucket, &key).await.unwrap() {
            IngestOutcome::Refused(reason) => assert!(reason.contains("exists"), "{reason}"),
            IngestOutcome::Gone => {}
            other => panic!("{other:?}"),
        }
    }
    let (aws, pg) = (proxies.aws.counts(), proxies.postgres.counts());
    for op in ["S3.GetObject", "S3.HeadObject", "S3.PutObject"] {
        assert_eq!(aws.op(op), 0, "{op}: {aws:?}");
    }
    assert!(aws.op("S3.DeleteObject") <= 100, "{aws:?}");
    assert!(aws.http_requests() <= 100, "{aws:?}");
    assert!(pg.pg_round_trips <= 100, "{pg:?}");
    assert_eq!(
        app.object("skins/Once.osk").await,
        bytes,
        "published once, never replaced"
    );
    assert!(app.objects("incoming/").await.is_empty());
}

/// Before its name is taken, a policy whose upload was refused is not ingested again either:
/// the same file or another POSTed to it later is refused unread, and the name stays free.
#[tokio::test]
async fn a_refused_policy_is_not_ingested_again() {
    let (app, proxies) = TestApp::spawn_via_proxies(ROOMY).await;
    let core = app.instance().await;
    let ip = "198.51.100.33";
    let invalid = with_unix_mode(skin("linked"), 0o120777);
    let (upload, key) = app.presigned_upload(ip, "Second Try", &invalid).await;
    assert!(matches!(
        skins::ingest(&core, &app.bucket, &key).await.unwrap(),
        IngestOutcome::Refused(reason) if reason.contains("not a valid skin")
    ));

    for (file, why) in [
        (invalid, "ingested already"),
        (skin("valid"), "another file"),
    ] {
        assert!(post_to_s3(&app.http, &upload, file)
            .await
            .status()
            .is_success());
        proxies.reset();
        assert_ingest_refused(&core, &app.bucket, &key, why, why).await;
        let aws = proxies.aws.counts();
        assert_eq!(aws.op("S3.GetObject"), 0, "{aws:?}");
        assert_eq!(aws.op("S3.PutObject"), 0, "{aws:?}");
    }
    assert!(app.objects("incoming/").await.is_empty());
    assert_eq!(app.skin_names().await, ["Default"]);
    // The name is free for a new policy.
    let response = app
        .request_upload(ip, json!({ "name": "Second Try", "size": 1000 }))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// Ingest claims are kept a day (past any policy and any retry of its event), then pruned.
#[tokio::test]
async fn the_janitor_prunes_day_old_ingest_claims_only() {
    let app = TestApp::spawn(&[]).await;
    let core = app.instance().await;
    app.db
        .batch_execute(
            "INSERT INTO skin_ingests (key, etag, claim, claimed_at, finished_at) VALUES \
             ('incoming/a/A.osk', 'e1', NULL, now() - interval '25 hours', now()), \
             ('incoming/b/B.osk', 'e2', gen_random_uuid(), now() - interval '26 hours', NULL), \
             ('incoming/c/C.osk', 'e3', NULL, now() - interval '23 hours', now())",
        )
        .await
        .unwrap();
    assert_eq!(janitor::run(&core).await.unwrap().skin_ingests_pruned, 2);
    assert_eq!(app.count("SELECT count(*) FROM skin_ingests").await, 1);
    assert_eq!(janitor::run(&core).await.unwrap().skin_ingests_pruned, 0);
}

impl TestApp {
    /// `form` uploaded on `path`: refused, the name kept by the operator (409
    /// `skin_name_reserved`).
    async fn assert_name_reserved(&self, path: &str, client_ip: &str, form: Form) {
        let response = self.upload_skin(path, client_ip, form).await;
        let body = problem(response, StatusCode::CONFLICT, "skin_name_reserved").await;
        assert!(
            body["detail"].as_str().unwrap().contains("reserved"),
            "{body}"
        );
    }

    /// Every upload path refuses `name` as kept by the operator: v1 and legacy direct uploads,
    /// and the presigned request.
    async fn assert_uploads_refused(&self, client_ip: &str, name: &str) {
        for path in [V1, LEGACY] {
            let form = upload_form(skin(name), "x.osk", Some(name));
            self.assert_name_reserved(path, client_ip, form).await;
        }
        let request = json!({ "name": name, "size": 1000 });
        let presigned = self.request_upload(client_ip, request).await;
        problem(presigned, StatusCode::CONFLICT, "skin_name_reserved").await;
    }

    async fn render_with_skin(&self, client_ip: &str, skin: &str) -> Response {
        let form = render_form(unique_replay(), "a.osr", &[("skin", skin)]);
        self.render(client_ip, form).await
    }
}

const ROOMY_RENDERS: &[(&str, &str)] = &[
    ("RATE_LIMIT_SKINS_UPLOAD", "1000/hour"),
    ("RATE_LIMIT_LEGACY_SKINS_UPLOAD", "1000/hour"),
    ("MAX_ACTIVE_JOBS_PER_IP", "100"),
];

/// `skins remove`: the skin leaves the listing and can no longer be rendered; its object stays
/// for the jobs that name it, so its name (in any case) is kept from every upload path.
#[tokio::test]
async fn a_removed_skin_is_unlisted_unrenderable_and_its_object_kept() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    let ip = "198.51.100.90";
    let bytes = skin("squat");
    let form = upload_form(bytes.clone(), "Squatted.osk", None);
    assert_eq!(
        app.upload_skin(V1, ip, form).await.status(),
        StatusCode::CREATED
    );
    let job = accepted_job(app.render_with_skin(ip, "Squatted").await).await;

    let removed = app.admin(&["skins", "remove", "SQUATTED"]).await;
    assert_eq!(
        removed,
        json!({ "skin": "SQUATTED", "removed": ["Squatted"], "already_removed": false })
    );
    assert_eq!(app.skin_names().await, ["Default"]);
    for name in ["Squatted", "squatted"] {
        let response = app.render_with_skin(ip, name).await;
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "unknown_skin").await;
    }
    assert_eq!(
        app.object("skins/Squatted.osk").await,
        bytes,
        "kept for the jobs"
    );
    assert_eq!(app.job(&job).await["config"]["skin"], "Squatted");
    for name in ["Squatted", "squatted"] {
        app.assert_uploads_refused(ip, name).await;
    }
    assert_eq!(
        app.object("skins/Squatted.osk").await,
        bytes,
        "never overwritten"
    );

    let again = app.admin(&["skins", "remove", "Squatted"]).await;
    assert_eq!(again["already_removed"], true);
    let unknown = app
        .try_admin(&["skins", "remove", "Nobody"])
        .await
        .unwrap_err();
    assert_eq!(unknown.exit_code(), 1);
    assert_eq!(unknown.to_string(), "no skin is named `Nobody`");
    // Unreserving does not free a removed name.
    let unreserved = app.admin(&["skins", "unreserve", "Squatted"]).await;
    assert_eq!(unreserved["was_reserved"], false);
    assert_eq!(unreserved["removed"], true);
    app.assert_uploads_refused(ip, "Squatted").await;
}

/// `skins free`: a removed name is freed once no job that has not ended names it (its worker may
/// still read the object) and the removal has settled; then its object is deleted and the name
/// can be uploaded again. No render admitted after the removal can name it (422 `unknown_skin`),
/// so only the jobs from before keep it in use.
#[tokio::test]
async fn a_removed_name_is_freed_once_no_job_can_read_its_object() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    let ip = "198.51.100.91";
    let form = upload_form(skin("squat"), "Squatted.osk", None);
    assert_eq!(
        app.upload_skin(V1, ip, form).await.status(),
        StatusCode::CREATED
    );
    let queued = accepted_job(app.render_with_skin(ip, "squatted").await).await;
    let rendering = accepted_job(app.render_with_skin(ip, "Squatted").await).await;
    app.report_ok(&rendering, json!({ "status": "rendering", "progress": 10 }))
        .await;
    app.admin(&["skins", "remove", "Squatted"]).await;
    let late = app.render_with_skin(ip, "Squatted").await;
    problem(late, StatusCode::UNPROCESSABLE_ENTITY, "unknown_skin").await;

    let free = || app.try_admin(&["skins", "free", "SQUATTED"]);
    let in_use = free().await.unwrap_err();
    assert_eq!(in_use.exit_code(), 1);
    assert!(
        in_use.to_string().starts_with("2 job(s) not ended"),
        "{in_use}"
    );
    app.report_ok(
        &queued,
        json!({ "status": "failed", "error": "GPU on fire" }),
    )
    .await;
    assert!(free()
        .await
        .unwrap_err()
        .to_string()
        .starts_with("1 job(s)"));
    app.report_ok(
        &rendering,
        json!({ "status": "failed", "error": "GPU on fire" }),
    )
    .await;
    let recent = free().await.unwrap_err();
    assert!(
        recent
            .to_string()
            .contains("removed less than 15 minutes ago"),
        "{recent}"
    );
    assert_eq!(app.object("skins/Squatted.osk").await, skin("squat"));

    app.db
        .execute(
            "UPDATE skins SET removed_at = removed_at - interval '15 minutes'",
            &[],
        )
        .await
        .unwrap();
    let freed = free().await.unwrap();
    assert_eq!(
        freed,
        json!({ "skin": "SQUATTED", "freed": ["Squatted"], "deleted": ["skins/Squatted.osk"],
                "reserved": false })
    );
    let gone = app
        .s3
        .head_object()
        .bucket(&app.bucket)
        .key("skins/Squatted.osk")
        .send()
        .await;
    assert!(gone.is_err(), "the object is deleted");
    let again = free().await.unwrap_err();
    assert!(again.to_string().starts_with("no removed skin"), "{again}");

    // The name is free: uploaded again (another content, another spelling), listed, renderable.
    let form = upload_form(skin("honest"), "squatted.osk", None);
    assert_eq!(
        app.upload_skin(V1, ip, form).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(app.object("skins/squatted.osk").await, skin("honest"));
    assert!(app.skin_names().await.contains(&"squatted".to_owned()));
    accepted_job(app.render_with_skin(ip, "squatted").await).await;
}

/// `skins reserve`: every upload path refuses the name (in any case) with 409
/// `skin_name_reserved`, the presigned ingest too when the reservation came after the policy;
/// a skin stored before its name was reserved stays listed and renderable; `skins unreserve`
/// frees the name.
/// The client of the reservation tests.
const RESERVING_IP: &str = "198.51.100.91";

#[tokio::test]
async fn a_reserved_name_is_refused_on_every_upload_path() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    let ip = RESERVING_IP;
    let reserved = app.admin(&["skins", "reserve", "Official"]).await;
    assert_eq!(
        reserved,
        json!({ "skin": "Official", "reserved": true, "already_reserved": false, "listed": false })
    );
    for name in ["Official", "OFFICIAL"] {
        app.assert_uploads_refused(ip, name).await;
    }
    let response = app.render_with_skin(ip, "Official").await;
    problem(response, StatusCode::UNPROCESSABLE_ENTITY, "unknown_skin").await;
}

/// A policy granted before the reservation: its upload is refused at the ingest, unread.
#[tokio::test]
async fn a_presigned_upload_granted_before_its_name_was_reserved_is_refused_at_the_ingest() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    let bytes = skin("late");
    let (_, key) = app
        .presigned_upload(RESERVING_IP, "Late Official", &bytes)
        .await;
    app.admin(&["skins", "reserve", "late official"]).await;
    let core = app.instance().await;
    assert_ingest_refused(&core, &app.bucket, &key, "is reserved", "reserved late").await;
    assert!(app.objects("incoming/").await.is_empty());
    assert!(app.objects("skins/").await.is_empty());
}

/// A stored skin whose name is reserved afterwards: listed and renderable, never replaced.
#[tokio::test]
async fn a_stored_skin_reserved_afterwards_stays_listed_and_renderable_and_is_never_replaced() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    let ip = RESERVING_IP;
    let team = skin("team");
    let form = upload_form(team.clone(), "Team Skin.osk", None);
    assert_eq!(
        app.upload_skin(LEGACY, ip, form).await.status(),
        StatusCode::CREATED
    );
    let reserved = app.admin(&["skins", "reserve", "team skin"]).await;
    assert_eq!(reserved["listed"], true);
    assert_eq!(app.skin_names().await, ["Default", "Team Skin"]);
    accepted_job(app.render_with_skin(ip, "TEAM SKIN").await).await;
    app.assert_uploads_refused(ip, "Team Skin").await;
    assert_eq!(app.object("skins/Team Skin.osk").await, team);
}

#[tokio::test]
async fn an_unreserved_name_may_be_uploaded_again() {
    let app = TestApp::spawn(ROOMY_RENDERS).await;
    app.admin(&["skins", "reserve", "Official"]).await;
    let unreserved = app.admin(&["skins", "unreserve", "OFFICIAL"]).await;
    assert_eq!(
        unreserved,
        json!({ "skin": "OFFICIAL", "reserved": false, "was_reserved": true, "removed": false })
    );
    let form = upload_form(skin("official"), "Official.osk", None);
    assert_eq!(
        app.upload_skin(V1, RESERVING_IP, form).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(app.skin_names().await, ["Default", "Official"]);
}
