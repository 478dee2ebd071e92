//! Hostile HTTP: bodies too large to buffer, malformed multipart, header injection,
//! path traversal, spoofed client addresses and forged or replayed webhooks. Each is answered
//! with the right 4xx, nothing is stored, and no secret, signature or client IP shows up in a
//! log line or a public response. (Traversal inside skin archives and skin names, and the
//! spoofed header from an untrusted peer, are also in skins.rs and render.rs.)

use std::io::Write;
use std::time::{Duration, Instant};

use osurender_core::usecases::lifecycle::sign;
use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::app::{problem, TestApp, LOGS, WEBHOOK_SECRET};
use crate::support::replays::{fixture, render_form, valid_form};
use crate::support::skins::{skin, upload_form, V1};

/// Sends `head` (and `body`) over a raw connection and returns the status line's code and the
/// whole answer, read until the server closes or `patience` passes.
async fn raw_request(app: &TestApp, head: &str, body: &[u8], patience: Duration) -> (u16, String) {
    let mut socket = TcpStream::connect(app.addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before taking the body: that is the point.
    let _ = socket.write_all(body).await;
    let mut answer = Vec::new();
    let mut buf = [0; 4096];
    let deadline = Instant::now() + patience;
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline.into(), socket.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    (code, text)
}

#[tokio::test]
async fn a_body_declared_too_large_is_refused_before_it_is_sent() {
    let app = TestApp::spawn(&[("MAX_REPLAY_BYTES", "30000")]).await;
    for path in ["/v1/render", V1] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nCF-Connecting-IP: 203.0.113.1\r\n\
             Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 4000000000\r\n\r\n"
        );
        // Only the head is sent: a server that waited for the body would never answer.
        let (code, answer) = raw_request(&app, &head, b"", Duration::from_secs(5)).await;
        assert_eq!(code, 413, "{path}: {answer}");
        assert!(answer.contains("file_too_large"), "{answer}");
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

/// A chunked body (no length declared) that never ends: refused once it passes the limit,
/// having taken little more than the limit from the client.
#[tokio::test]
async fn an_endless_chunked_body_is_cut_off_at_the_limit() {
    let app = TestApp::spawn(&[("MAX_REPLAY_BYTES", "30000")]).await;
    let socket = TcpStream::connect(app.addr).await.unwrap();
    let (mut read, mut write) = socket.into_split();
    let writer = tokio::spawn(async move {
        let head = "POST /v1/render HTTP/1.1\r\nHost: x\r\nCF-Connecting-IP: 203.0.113.2\r\n\
                    Content-Type: multipart/form-data; boundary=b\r\n\
                    Transfer-Encoding: chunked\r\n\r\n";
        let part =
            "--b\r\nContent-Disposition: form-data; name=\"replay\"; filename=\"a.osr\"\r\n\r\n";
        let mut message = format!("{head}{:x}\r\n{part}\r\n", part.len()).into_bytes();
        let mut chunk = format!("{:x}\r\n", 64 * 1024).into_bytes();
        chunk.extend_from_slice(&[b'x'; 64 * 1024]);
        chunk.extend_from_slice(b"\r\n");
        let mut sent = 0;
        // Up to 1 GiB, unless the server stops taking it.
        for _ in 0..16 * 1024 {
            if write.write_all(&message).await.is_err() {
                break;
            }
            sent += message.len();
            message.clone_from(&chunk);
        }
        sent
    });
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), read.read(&mut answer))
        .await
        .expect("answered without reading the whole body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    drop(read);
    let sent = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the server stopped reading")
        .unwrap();
    assert!(
        sent < 64 * 1024 * 1024,
        "{sent} bytes taken from the client"
    );
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
}

#[tokio::test]
async fn malformed_multipart_is_a_400() {
    let app = TestApp::spawn(&[]).await;
    let replay = fixture("valid_0.osr");
    let mut many_parts = Vec::new();
    for i in 0..500 {
        write!(
            many_parts,
            "--b\r\nContent-Disposition: form-data; name=\"f{i}\"\r\n\r\nx\r\n"
        )
        .unwrap();
    }
    many_parts.extend_from_slice(b"--b--\r\n");
    let huge_name = format!(
        "--b\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\nx\r\n--b--\r\n",
        "n".repeat(200_000)
    );
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("many parts", "multipart/form-data; boundary=b", many_parts),
        ("huge field name", "multipart/form-data; boundary=b", huge_name.into_bytes()),
        ("no boundary", "multipart/form-data", replay.clone()),
        ("not multipart", "application/octet-stream", replay.clone()),
        ("no content type", "", replay.clone()),
        (
            "boundary never closed",
            "multipart/form-data; boundary=b",
            b"--b\r\nContent-Disposition: form-data; name=\"replay\"; filename=\"a.osr\"\r\n\r\nabc"
                .to_vec(),
        ),
        (
            "headers never end",
            "multipart/form-data; boundary=b",
            [b"--b\r\nContent-Disposition: form-data; name=\"x\"\r\n".as_slice(), &[b'h'; 100_000]]
                .concat(),
        ),
    ];
    for (what, content_type, body) in cases {
        let mut request = app
            .http
            .post(app.url("/v1/render"))
            .header("CF-Connecting-IP", "203.0.113.3")
            .body(body);
        if !content_type.is_empty() {
            request = request.header("content-type", content_type);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        problem(response, StatusCode::BAD_REQUEST, "invalid_file").await;
    }
    assert_eq!(app.count("SELECT count(*) FROM jobs").await, 0);
    assert!(app.replay_objects().await.is_empty());
}

/// Request values that try to end a header line, or to climb out of a key prefix, are refused
/// and never come back as a header of the answer.
#[tokio::test]
async fn header_injection_and_traversal_are_refused() {
    let app = TestApp::spawn(&[("RATE_LIMIT_SKINS_UPLOAD", "1000/hour")]).await;
    for path in [
        "/v1/jobs/%0d%0aSet-Cookie:%20a=b",
        "/v1/jobs/..%2f..%2fetc%2fpasswd",
        "/v1/jobs/00000000-0000-0000-0000-000000000000%0d%0aX-Evil:%201",
    ] {
        let response = app.http.get(app.url(path)).send().await.unwrap();
        assert!(response.status().is_client_error(), "{path}");
        assert!(response.headers().get("set-cookie").is_none());
        assert!(response.headers().get("x-evil").is_none());
    }
    for name in [
        "a\r\nSet-Cookie: a=b",
        "..\\..\\windows",
        "/etc/passwd",
        "skins/../../x",
        "nul\u{0}byte",
        "%2e%2e%2fx",
        "",
    ] {
        let form = upload_form(skin(name), "x.osk", Some(name));
        let response = app.upload_skin(V1, "198.51.100.3", form).await;
        assert!(response.headers().get("set-cookie").is_none());
        problem(response, StatusCode::UNPROCESSABLE_ENTITY, "invalid_field").await;
    }
    // A render option with a line break stays a refused field, not a header.
    let form = render_form(
        fixture("valid_0.osr"),
        "a.osr",
        &[("skin", "x\r\nSet-Cookie: a=b")],
    );
    let response = app.render("198.51.100.4", form).await;
    assert!(response.headers().get("set-cookie").is_none());
    assert!(response.status().is_client_error());
    assert_eq!(app.count("SELECT count(*) FROM skins").await, 0);
}

/// Only `CF-Connecting-IP` from a trusted peer names the client: `X-Forwarded-For`,
/// `X-Real-IP`, a list, or junk in `CF-Connecting-IP` all fall back to the peer.
#[tokio::test]
async fn spoofed_forwarding_headers_do_not_choose_the_client() {
    let app = TestApp::spawn(&[
        ("RATE_LIMIT_RENDER", "1000/hour"),
        ("MAX_ACTIVE_JOBS_PER_IP", "100"),
    ])
    .await;
    let spoofs: &[&[(&str, &str)]] = &[
        &[("X-Forwarded-For", "198.51.100.50")],
        &[("X-Real-IP", "198.51.100.51")],
        &[("Forwarded", "for=198.51.100.52")],
        &[("CF-Connecting-IP", "198.51.100.53, 198.51.100.54")],
        &[("CF-Connecting-IP", "not an address")],
        &[("CF-Connecting-IP", "")],
    ];
    for headers in spoofs {
        let mut request = app.http.post(app.url("/v1/render")).multipart(valid_form());
        for (name, value) in *headers {
            request = request.header(*name, *value);
        }
        assert_eq!(
            request.send().await.unwrap().status(),
            StatusCode::ACCEPTED,
            "{headers:?}"
        );
    }
    assert_eq!(app.job_client_keys().await, ["127.0.0.1"]);
}

/// Forged, tampered, re-targeted and replayed worker reports: all 401, the job unmoved.
#[tokio::test]
async fn forged_and_replayed_webhooks_change_nothing() {
    let app = TestApp::spawn(&[]).await;
    let job = app.submit("203.0.113.7").await;
    let other = app.submit("203.0.113.8").await;
    let now = chrono::Utc::now().timestamp();
    let body = json!({ "status": "downloading", "timestamp": now, "nonce": "n-0123456789abcdef", "job_id": job }).to_string();
    let good = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
    let tampered = body.replace("downloading", "completed");
    let wrong_key = sign(b"not-the-secret-but-long-enough-to-pass", body.as_bytes());
    let cases: Vec<(&str, &str, Option<String>)> = vec![
        ("unsigned", &body, None),
        ("wrong key", &body, Some(wrong_key)),
        ("tampered body", &tampered, Some(good.clone())),
        ("truncated signature", &body, Some(good[..32].to_owned())),
        ("not hex", &body, Some("zz".repeat(32))),
        ("empty signature", &body, Some(String::new())),
    ];
    for (what, body, signature) in &cases {
        let response = app.post_webhook(&job, body, signature.as_deref()).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{what}");
    }
    // Signed for `job`, sent to `other`: the body names its job.
    let retargeted = app.post_webhook(&other, &body, Some(&good)).await;
    assert_eq!(retargeted.status(), StatusCode::FORBIDDEN);
    // The genuine report once, then its replay.
    assert_eq!(
        app.post_webhook(&job, &body, Some(&good)).await.status(),
        StatusCode::OK
    );
    let replayed = app.post_webhook(&job, &body, Some(&good)).await;
    assert_eq!(replayed.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        app.count("SELECT count(*) FROM jobs WHERE status = 'queued'")
            .await,
        1,
        "only the genuine report moved a job"
    );
}

/// Every kind of request, the hostile ones too, logged as production logs them but with our
/// own crates at their most verbose (support/app.rs `LOGS`, which holds every test server's
/// lines): no log line and no public answer carries the webhook secret, a signature or a client
/// address. (The AWS SDK's own TRACE level prints request and response bodies, limiter keys
/// included, so it must stay off in production: RELIABILITY.md.)
#[tokio::test]
async fn no_secret_signature_or_client_ip_in_logs_or_answers() {
    let app = TestApp::spawn(&[("RATE_LIMIT_RENDER", "2/hour")]).await;
    let client_ips = ["203.0.113.171", "2001:db8:abcd:17::1"];
    let mut answers = String::new();
    let mut signatures = Vec::new();
    for ip in client_ips {
        for _ in 0..3 {
            let response = app.render(ip, valid_form()).await;
            answers.push_str(&format!("{:?}", response.headers()));
            answers.push_str(&response.text().await.unwrap());
        }
    }
    let job = app.submit("198.51.100.172").await;
    for status in ["downloading", "bogus"] {
        let body = json!({ "status": status, "timestamp": chrono::Utc::now().timestamp(), "nonce": uuid::Uuid::new_v4().to_string(), "job_id": job }).to_string();
        let good = sign(WEBHOOK_SECRET.as_bytes(), body.as_bytes());
        let forged = sign(b"forged-secret-forged-secret-forged", body.as_bytes());
        for signature in [&good, &forged] {
            let response = app.post_webhook(&job, &body, Some(signature)).await;
            answers.push_str(&format!("{:?}", response.headers()));
            answers.push_str(&response.text().await.unwrap());
        }
        signatures.extend([good, forged]);
    }
    let response = app
        .upload_skin(V1, "198.51.100.173", upload_form(skin("s"), "s.osk", None))
        .await;
    answers.push_str(&response.text().await.unwrap());
    let status = app
        .http
        .get(app.url(&format!("/v1/jobs/{job}")))
        .header("CF-Connecting-IP", "198.51.100.174")
        .send()
        .await
        .unwrap();
    answers.push_str(&status.text().await.unwrap());

    if std::env::var_os("RUST_LOG").is_some() {
        return; // the logs went to stdout: nothing to check here
    }
    let logs = String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned();
    assert!(logs.contains("request answered"), "the capture works");
    let mut secrets: Vec<&str> = vec![WEBHOOK_SECRET];
    secrets.extend(signatures.iter().map(String::as_str));
    secrets.extend(client_ips);
    secrets.extend([
        "198.51.100.172",
        "198.51.100.173",
        "198.51.100.174",
        "2001:db8:abcd:17",
    ]);
    for secret in secrets {
        assert!(
            !logs.contains(secret),
            "{secret} in the logs: {}",
            logs.lines()
                .find(|line| line.contains(secret))
                .unwrap_or_default()
        );
        assert!(!answers.contains(secret), "{secret} in a public answer");
    }
}

/// Every answer, success or refusal, of every route says no cache may keep it: also a 400
/// from the path extractor, the 404 and 405 fallbacks and a read route's 429.
#[tokio::test]
async fn every_answer_is_marked_no_store() {
    let app = TestApp::spawn(&[("RATE_LIMIT_READ", "1/hour")]).await;
    let ip = "203.0.113.77";
    let get = |path: &str| {
        app.http
            .get(app.url(path))
            .header("CF-Connecting-IP", ip)
            .send()
    };
    let job = format!("/v1/jobs/{}", uuid::Uuid::new_v4());
    let mut answers = vec![
        ("bad job id", get("/v1/jobs/not-a-uuid").await.unwrap()),
        ("unknown route", get("/nowhere").await.unwrap()),
        ("listing without a key", get("/v1/jobs").await.unwrap()),
        ("read", get(&job).await.unwrap()),
        ("read over its limit", get(&job).await.unwrap()),
        ("health", get("/health").await.unwrap()),
    ];
    let wrong_method = app.http.put(app.url("/v1/render")).send().await.unwrap();
    answers.push(("wrong method", wrong_method));
    answers.push(("admitted", app.render(ip, valid_form()).await));
    let bad_replay = render_form(b"not a replay".to_vec(), "play.osr", &[]);
    answers.push(("invalid replay", app.render(ip, bad_replay).await));
    let statuses: Vec<u16> = answers.iter().map(|(_, a)| a.status().as_u16()).collect();
    assert_eq!(statuses, [400, 404, 401, 404, 429, 200, 405, 202, 415]);
    for (what, answer) in answers {
        assert_eq!(
            answer.headers().get("cache-control").map(|v| v.as_bytes()),
            Some(&b"no-store"[..]),
            "{what}"
        );
    }
}
