//! Differential test: `replay::inspect` must reach the verdict of the reference parser,
//! osrparse 7.0.1, on every case `tests/replay_oracle/gen_cases.py` generates.
//!
//! The generator runs with the interpreter in `OSURENDER_PYTHON`, else the workspace's
//! `.venv/bin/python`, else `python3`; osrparse==7.0.1 must be installed there. Without it the
//! test fails: it is the test's whole point.

use std::path::{Path, PathBuf};
use std::process::Command;

use osurender_core::domain::replay::{
    inspect, played_at, ReplayError, ReplayLimits, ReplaySummary,
};
use serde_json::{json, Value};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("OSURENDER_PYTHON") {
        return python.into();
    }
    let venv = workspace_root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

/// Runs the generator into a fresh directory and returns it with the parsed manifest.
fn generate_cases() -> (PathBuf, Vec<Value>) {
    let out = std::env::temp_dir().join(format!("osurender-replay-oracle-{}", std::process::id()));
    // Leftovers of an earlier run with the same pid would only be overwritten.
    let _ = std::fs::remove_dir_all(&out);
    let python = python();
    let script = workspace_root().join("tests/replay_oracle/gen_cases.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg(&out)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (set OSURENDER_PYTHON): {e}",
                python.display()
            )
        });
    assert!(
        output.status.success(),
        "the osrparse oracle failed ({}); it needs osrparse==7.0.1:\n{}{}",
        python.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    let manifest = std::fs::read(out.join("manifest.json")).expect("manifest.json");
    let cases: Vec<Value> = serde_json::from_slice(&manifest).expect("manifest is JSON");
    (out, cases)
}

/// Rejections a limit explains: the only verdicts allowed to differ from osrparse.
fn is_limit(error: &ReplayError) -> bool {
    matches!(
        error,
        ReplayError::DecoderMemory { .. }
            | ReplayError::FrameDataTooLarge { .. }
            | ReplayError::TooManyFrames { .. }
    )
}

/// What a job's `replay` is made of, as `inspect` reads it (the summary's fields) and as
/// osrparse does (the manifest's): player, beatmap and replay hashes, mods, judgement counts,
/// score, combo, and when it was played (whole seconds since 0001-01-01: osrparse's float
/// division is off by microseconds).
fn metadata(summary: &ReplaySummary) -> Value {
    let c = summary.counts;
    let epoch = chrono::NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .expect("0001-01-01")
        .and_utc();
    json!({
        "player": summary.player_name,
        "beatmap_hash": summary.beatmap_hash,
        "replay_hash": summary.replay_hash,
        "mods": summary.mods.0,
        "counts": [c.count_300, c.count_100, c.count_50, c.count_geki, c.count_katu, c.count_miss],
        "score": summary.score,
        "max_combo": summary.max_combo,
        "played_at_seconds": (played_at(summary.timestamp_ticks) - epoch).num_seconds(),
    })
}

fn metadata_of(case: &Value) -> Value {
    let keys = [
        "player",
        "beatmap_hash",
        "replay_hash",
        "mods",
        "counts",
        "score",
        "max_combo",
        "played_at_seconds",
    ];
    keys.iter()
        .map(|key| (key.to_string(), case[key].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Compares one case; `None` when the verdicts agree.
fn mismatch(case: &Value, dir: &Path, limits: &ReplayLimits) -> Option<String> {
    let file = case["file"].as_str().expect("file");
    let name = case["name"].as_str().unwrap_or_default();
    let bytes = std::fs::read(dir.join(file)).expect("case file");
    let ours = inspect(&bytes, limits);
    let theirs = if case["accepted"].as_bool() == Some(true) {
        format!(
            "accepted mode {} frames {} score id {} metadata {}",
            case["mode"],
            case["frames"],
            case["score_id"],
            metadata_of(case)
        )
    } else {
        format!("rejected ({})", case["error"].as_str().unwrap_or_default())
    };
    let ours = ours.map(|summary| (metadata(&summary), summary));
    let agree = match &ours {
        _ if case["exceeds_limits"].as_bool() == Some(true) => {
            matches!(&ours, Err(error) if is_limit(error))
        }
        Ok((_, summary)) => {
            case["accepted"].as_bool() == Some(true)
                && case["mode"].as_u64() == Some(summary.mode as u64)
                && case["frames"].as_u64() == Some(summary.frame_count)
                && case["score_id"].as_i64() == Some(summary.online_score_id)
                && metadata(summary) == metadata_of(case)
        }
        Err(_) => case["accepted"].as_bool() == Some(false),
    };
    (!agree).then(|| format!("{file} [{name}]: osrparse {theirs}, inspect {ours:?}"))
}

#[test]
fn inspect_agrees_with_osrparse() {
    let (dir, cases) = generate_cases();
    assert!(cases.len() >= 300, "only {} cases generated", cases.len());
    let limits = ReplayLimits::default();
    let mismatches: Vec<String> = cases
        .iter()
        .filter_map(|case| mismatch(case, &dir, &limits))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        mismatches.is_empty(),
        "{} of {} cases disagree with osrparse:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
    println!("{} cases agree with osrparse", cases.len());
}
