//! Skins: `GET /v1/skins`, the direct uploads (v1 and legacy), the presigned upload of large
//! skins and its ingest, against real Postgres and the AWS stand-in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use osurender_core::domain::render::SkinName;
use osurender_core::skins;
use osurender_core::skins::ingest::IngestOutcome;
use reqwest::multipart::Form;
use reqwest::{Response, StatusCode};
use serde_json::{json, Value};

use crate::support::app::{header, problem, TestApp};
use crate::support::skins::{
    compressed_bomb, declare_size, noise, osk, post_to_s3, skin, upload_form, LEGACY, V1,
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

    async fn skin_names(&self) -> Vec<String> {
        let response = self.http.get(self.url("/v1/skins")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        serde_json::from_value(body["skins"].clone()).unwrap()
    }

    async fn objects(&self, prefix: &str) -> Vec<String> {
        let listed = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        listed
            .contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
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
    assert_eq!(body, json!({ "skins": ["Default"] }));

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

#[tokio::test]
async fn each_step_rejects_with_its_code_and_spends_nothing() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_SKINS_UPLOAD", "2/hour"),
        ("MAX_SKIN_BYTES", "1000000"),
    ])
    .await;
    let ip = "198.51.100.20";
    let app = &app;
    let refused = |path: &'static str, form: Form| async move {
        let response = app.upload_skin(path, ip, form).await;
        assert!(header(&response, "x-ratelimit-limit").is_none());
        response
    };

    // Step 1: the file.
    let no_file = Form::new().text("name", "x");
    problem(
        refused(V1, no_file).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let wrong_extension = upload_form(skin("a"), "skin.zip", None);
    problem(
        refused(V1, wrong_extension).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let empty = upload_form(Vec::new(), "skin.osk", None);
    problem(
        refused(V1, empty).await,
        StatusCode::BAD_REQUEST,
        "invalid_file",
    )
    .await;
    let too_large = upload_form(vec![0; 1_000_001], "skin.osk", None);
    problem(
        refused(LEGACY, too_large).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "file_too_large",
    )
    .await;

    // Step 2: the archive, zip bombs included.
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
            refused(V1, form).await,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_skin",
        )
        .await;
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains(reason), "{reason}: {detail}");
    }

    // Step 3: the name.
    for (file_name, name) in [
        ("ok.osk", Some("../../etc")),
        ("ok.osk", Some("")),
        ("ok.osk", Some(&*"x".repeat(129))),
        ("skin.v2.osk", None),
    ] {
        let form = upload_form(skin("a"), file_name, name);
        let body = problem(
            refused(V1, form).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
        )
        .await;
        assert!(
            body["detail"].as_str().unwrap().starts_with("name:"),
            "{body}"
        );
    }
    assert!(app.objects("skins/").await.is_empty());

    // None of that spent quota: both uploads of the hour are still there, then step 4 says no.
    for (name, remaining) in [("one", 1), ("two", 0)] {
        let response = app
            .upload_skin(V1, ip, upload_form(skin(name), "s.osk", Some(name)))
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(header(&response, "x-ratelimit-remaining"), Some(remaining));
    }
    let limited = app
        .upload_skin(V1, ip, upload_form(skin("three"), "three.osk", None))
        .await;
    assert!(header(&limited, "retry-after").is_some());
    assert_eq!(header(&limited, "x-ratelimit-remaining"), Some(0));
    problem(limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited").await;
    assert_eq!(app.skin_names().await, ["Default", "one", "two"]);
}

#[tokio::test]
async fn an_existing_name_is_not_overwritten() {
    let app = TestApp::spawn(ROOMY).await;
    let ip = "198.51.100.21";
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
        problem(
            app.upload_skin(V1, ip, form).await,
            StatusCode::CONFLICT,
            "skin_exists",
        )
        .await;
    }
    assert_eq!(app.object("skins/Taken.osk").await, first);

    // An object from before the name registry (or another fleet) is kept too.
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
    problem(
        app.upload_skin(V1, ip, form).await,
        StatusCode::CONFLICT,
        "skin_exists",
    )
    .await;
    assert_eq!(app.object("skins/Old One.osk").await, legacy);

    // A claim whose upload is in flight holds the name; one whose function died long ago
    // (never confirmed, older than any function runs) is taken over.
    app.db
        .batch_execute(
            "INSERT INTO skins (name, claim) VALUES ('In Flight', gen_random_uuid());
             INSERT INTO skins (name, claim, claimed_at)
             VALUES ('Abandoned', gen_random_uuid(), now() - interval '1 hour')",
        )
        .await
        .unwrap();
    let form = upload_form(skin("late"), "In Flight.osk", None);
    problem(
        app.upload_skin(V1, ip, form).await,
        StatusCode::CONFLICT,
        "skin_exists",
    )
    .await;
    let form = upload_form(skin("revived"), "Abandoned.osk", None);
    assert_eq!(
        app.upload_skin(V1, ip, form).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        app.skin_names().await,
        ["Abandoned", "Default", "Old One", "Taken"]
    );
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
    // A second event for the same object finds nothing to do.
    assert_eq!(
        skins::ingest(&core, &app.bucket, &key).await.unwrap(),
        IngestOutcome::Gone
    );
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
        let response = app
            .request_upload(ip, json!({ "name": name, "size": bytes.len() }))
            .await;
        assert_eq!(response.status(), StatusCode::OK);
        let body: Value = response.json().await.unwrap();
        let posted = post_to_s3(&app.http, &body["upload"], bytes).await;
        assert!(posted.status().is_success());
        let key = body["upload"]["fields"]["key"].as_str().unwrap();
        match skins::ingest(&core, &app.bucket, key).await.unwrap() {
            IngestOutcome::Refused(reason) => {
                assert!(reason.contains("not a valid skin"), "{reason}")
            }
            other => panic!("{name}: {other:?}"),
        }
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
        match skins::ingest(&core, &app.bucket, key).await.unwrap() {
            IngestOutcome::Refused(reason) => assert!(reason.contains("larger than"), "{reason}"),
            other => panic!("oversized: {other:?}"),
        }
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
    let bytes = skin("polled");
    let response = app
        .request_upload(
            "198.51.100.28",
            json!({ "name": "Polled", "size": bytes.len() }),
        )
        .await;
    let body: Value = response.json().await.unwrap();
    assert!(post_to_s3(&app.http, &body["upload"], bytes)
        .await
        .status()
        .is_success());
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
