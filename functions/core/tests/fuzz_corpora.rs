//! The fuzz targets' bodies (`fuzz/src/lib.rs`, included as is) over their seed corpora in
//! `fuzz/corpus/<target>/`: the cheap, every-run part of fuzzing; `infra/fuzz-smoke` runs the
//! same bodies under libFuzzer with mutation and coverage.

#[path = "../../../fuzz/src/lib.rs"]
mod bodies;

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

/// Runs `body` on every seed, and on every seed cut in half and with its bytes reversed, so a
/// seed also stands for a truncated and a scrambled input.
fn run(target: &str, body: fn(&[u8])) {
    for (path, bytes) in corpus(target) {
        let reversed: Vec<u8> = bytes.iter().rev().copied().collect();
        for input in [&bytes[..], &bytes[..bytes.len() / 2], &reversed] {
            let outcome = std::panic::catch_unwind(|| body(input));
            assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
        }
    }
}

#[test]
fn replay_corpus() {
    run("replay", bodies::replay);
}

#[test]
fn render_form_corpus() {
    run("render_form", bodies::render_form);
}

#[test]
fn skin_zip_corpus() {
    run("skin_zip", bodies::skin_zip);
}

#[test]
fn webhook_corpus() {
    run("webhook", bodies::webhook);
}

#[test]
fn client_ip_corpus() {
    run("client_ip", bodies::client_ip);
}
