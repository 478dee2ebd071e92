//! The fuzz targets' bodies (`fuzz/src/lib.rs`, included as is) over their seed corpora in
//! `fuzz/corpus/<target>/`: the cheap, every-run part of fuzzing; `infra/fuzz-smoke` runs the
//! same bodies under libFuzzer with mutation and coverage.

#[path = "../../../fuzz/src/lib.rs"]
mod bodies;

use std::path::PathBuf;

/// One folder of seeds per target.
const CORPORA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus");

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(CORPORA).join(target);
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
fn run(target: &str, body: Body) {
    for (path, bytes) in corpus(target) {
        let reversed: Vec<u8> = bytes.iter().rev().copied().collect();
        for input in [&bytes[..], &bytes[..bytes.len() / 2], &reversed] {
            let outcome = std::panic::catch_unwind(|| body(input));
            assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
        }
    }
}

/// A fuzz target's body: it must not panic on any input.
type Body = fn(&[u8]);

/// Every fuzz target's body, by the name of its corpus folder (and of its libFuzzer target).
const TARGETS: [(&str, Body); 5] = [
    ("replay", bodies::replay),
    ("render_form", bodies::render_form),
    ("skin_zip", bodies::skin_zip),
    ("webhook", bodies::webhook),
    ("client_ip", bodies::client_ip),
];

#[test]
fn every_target_over_its_corpus() {
    for (target, body) in TARGETS {
        run(target, body);
    }
}

/// A corpus folder no target here runs would never be run by `cargo test`.
#[test]
fn every_corpus_has_its_target_here() {
    let mut folders: Vec<String> = std::fs::read_dir(CORPORA)
        .unwrap_or_else(|e| panic!("{CORPORA}: {e}"))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let mut targets: Vec<&str> = TARGETS.iter().map(|(target, _)| *target).collect();
    targets.sort();
    assert_eq!(folders, targets);
}
