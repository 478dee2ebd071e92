//! The bodies of the fuzz targets: each feeds arbitrary bytes to a parser that faces hostile
//! input and checks that it answers (never panics, never hangs) within its caps. The targets
//! in `fuzz_targets/` call these under libFuzzer; `functions/core/tests/fuzz_corpora.rs`
//! includes this file and runs them over the seed corpora in `fuzz/corpus/` on every test run.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use osurender_core::domain::archive::{self, ArchiveLimits};
use osurender_core::domain::client::{resolve_client_ip, ClientKey, TrustedProxies};
use osurender_core::domain::form::{read_form, FormSpec, TextValue, MAX_TEXT_FIELD_BYTES};
use osurender_core::domain::job::JobId;
use osurender_core::domain::render::SkinName;
use osurender_core::domain::replay::{inspect, ReplayLimits};
use osurender_core::usecases::lifecycle::{
    check_freshness, check_job, check_report, sign, signature_matches, Report,
};

/// Small caps, so that inputs reach them.
fn replay_limits() -> ReplayLimits {
    ReplayLimits {
        max_decompressed_bytes: 1 << 20,
        max_frames: 20_000,
        decoder_memlimit: 16 << 20,
    }
}

pub fn replay(data: &[u8]) {
    if let Ok(summary) = inspect(data, &replay_limits()) {
        assert!(summary.frame_count <= replay_limits().max_frames);
    }
}

/// Polls `future` to completion without a runtime: the body streams below are always ready,
/// so a `Pending` that never resolves would be a hang, reported as a panic.
fn run<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
    }
    panic!("the form reader did not finish on a ready stream");
}

/// First byte: how the body is split into chunks (1 to 256 bytes) and whether the content
/// type comes from the input (its first line) or is a fixed boundary.
pub fn render_form(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else {
        return;
    };
    let (content_type, body) = if control & 1 == 0 {
        ("multipart/form-data; boundary=fuzz".to_owned(), rest)
    } else {
        let line_end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let (line, body) = rest.split_at(line_end);
        (String::from_utf8_lossy(line).into_owned(), body)
    };
    let chunk = 1 + usize::from(control >> 1) * 2;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.chunks(chunk).map(|c| Ok(c.to_vec())).collect();
    let spec = FormSpec {
        file_field: "replay",
        max_file_bytes: 4096,
    };
    let outcome = run(read_form(
        spec,
        Some(&content_type),
        futures_util::stream::iter(chunks),
    ));
    if let Ok(form) = outcome {
        if let Some(file) = &form.file {
            assert!(file.bytes.len() <= spec.max_file_bytes);
        }
        for (_, value) in &form.fields {
            if let TextValue::Text(text) = value {
                assert!(text.len() <= MAX_TEXT_FIELD_BYTES);
            }
        }
    }
}

pub fn skin_zip(data: &[u8]) {
    let limits = ArchiveLimits {
        max_entries: 64,
        max_total_bytes: 1 << 20,
    };
    if let Ok(summary) = archive::inspect(data, &limits) {
        assert!(summary.entries <= limits.max_entries);
        assert!(summary.uncompressed_bytes <= limits.max_total_bytes);
    }
    // Skin names arrive as text fields next to the archive.
    if let Ok(name) = std::str::from_utf8(data) {
        if let Ok(skin) = SkinName::parse(name) {
            let kept = skin.as_str();
            assert!(!kept.contains("..") && !kept.contains('/') && !kept.contains('\\'));
        }
    }
}

const SECRET: &str = "fuzzing-webhook-secret-of-enough-bytes";

/// The input up to the first newline is the `X-Signature` value, the rest the body. A
/// signature is accepted exactly when it is the body's HMAC; a report that parses is checked
/// as the webhook checks it.
pub fn webhook(data: &[u8]) {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(0);
    let (signature, body) = (&data[..split], &data[(split + 1).min(data.len())..]);
    let signature = String::from_utf8_lossy(signature);
    let genuine = sign(SECRET.as_bytes(), body);
    let verified = signature_matches(SECRET.as_bytes(), body, &signature);
    assert_eq!(
        verified,
        signature.trim().eq_ignore_ascii_case(&genuine),
        "{signature}"
    );
    assert!(signature_matches(SECRET.as_bytes(), body, &genuine));
    if let Ok(report) = serde_json::from_slice::<Report>(body) {
        match report.job_id {
            Some(id) => {
                assert_eq!(check_job(&report, id), Ok(()));
                assert!(check_job(&report, JobId::new()).is_err());
            }
            None => assert!(check_job(&report, JobId::new()).is_err()),
        }
        let _ = check_report(&report, Duration::from_secs(900));
        let _ = check_freshness(&report, report.timestamp);
    }
}

/// First byte: the peer's family and the IPv6 prefix length; then 16 address bytes; the rest
/// is the `CF-Connecting-IP` value (and, parsed as a list, `TRUSTED_PROXY_CIDRS`).
pub fn client_ip(data: &[u8]) {
    if data.len() < 17 {
        return;
    }
    let (control, octets, header) = (data[0], &data[1..17], &data[17..]);
    let v6: [u8; 16] = octets.try_into().expect("16 bytes");
    let peer = if control & 1 == 0 {
        IpAddr::V4(Ipv4Addr::new(v6[0], v6[1], v6[2], v6[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(v6))
    };
    let header = String::from_utf8_lossy(header);
    let trusted = TrustedProxies::parse("127.0.0.0/8, 10.0.0.0/8, 2400:cb00::/32").unwrap();
    let ip = resolve_client_ip(peer, Some(&header), &trusted);
    if !trusted.contains(peer) {
        assert_eq!(ip, resolve_client_ip(peer, None, &trusted), "spoofed");
    }
    let key = ClientKey::new(ip, (control >> 1) % 129);
    assert!(!key.as_str().is_empty());
    let _ = TrustedProxies::parse(&header);
}
