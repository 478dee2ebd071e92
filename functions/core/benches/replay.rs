//! `replay::inspect` against plain decompression of the same frame block: the floor, since a
//! validator must decompress. The decoders are liblzma (the one `inspect` uses: same 64 KiB
//! output chunks, output discarded) and two pure-Rust ones from crates.io, lzma-rs and
//! lzma-rust2, to see whether switching would pay. Throughput is in input (file) bytes.
//!
//! Inputs: the fixtures (small, typical and long replays), a synthetic 1.5-million-frame replay
//! (about 7 hours of play, 30 MB of frame text) and 1 GiB decompression bombs.
//!
//! Before the timings, each input's peak memory is printed (`peak-rss:` lines): the growth of
//! the process's peak RSS while one fresh process validates it once (the kernel's `VmHWM`,
//! reset through `/proc/self/clear_refs` after the file is read). It must not grow with the
//! replay's length past the LZMA dictionary window.
//!
//! Run: `cargo bench -p osurender-core --bench replay`; `bench/run` also runs
//! `bench/osrparse_bench.py` on the same files for the reference parser.

use std::hint::black_box;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{criterion_group, Criterion, Throughput};
use liblzma::stream::{Action, LzmaOptions, Status, Stream};
use liblzma::write::XzEncoder;
use osurender_core::domain::replay::{inspect, ReplayLimits};

const FIXTURES: [&str; 3] = ["valid_0", "valid_1", "valid_long"];
/// Output chunk of every decoder here, as `inspect`'s.
const CHUNK: usize = 64 * 1024;
/// Set in a child process: measure the peak memory of validating the file at this path.
const PEAK_RSS_CHILD: &str = "REPLAY_BENCH_PEAK_RSS_OF";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/replays")
        .join(format!("{name}.osr"))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The position after the string at `pos` of a well-formed replay.
fn skip_string(replay: &[u8], mut pos: usize) -> usize {
    let marker = replay[pos];
    pos += 1;
    if marker == 0x0b {
        let (mut len, mut shift) = (0usize, 0);
        loop {
            let byte = replay[pos];
            pos += 1;
            len |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        pos += len;
    }
    pos
}

/// The frame block of a well-formed replay: skips the header (fixed fields and strings).
fn frame_block(replay: &[u8]) -> &[u8] {
    let mut pos = 5;
    for _ in 0..3 {
        pos = skip_string(replay, pos);
    }
    pos = skip_string(replay, pos + 12 + 4 + 2 + 1 + 4) + 8;
    let len = u32::from_le_bytes(replay[pos..pos + 4].try_into().unwrap()) as usize;
    &replay[pos + 4..pos + 4 + len]
}

/// liblzma into a 64 KiB buffer, output thrown away; returns the output size.
fn liblzma_decompress(block: &[u8], out: &mut [u8]) -> u64 {
    let mut stream = Stream::new_auto_decoder(u64::MAX, 0).unwrap();
    let mut pos = 0;
    loop {
        let before = stream.total_in();
        let status = stream.process(&block[pos..], out, Action::Run).unwrap();
        pos += (stream.total_in() - before) as usize;
        black_box(&out);
        if status == Status::StreamEnd {
            return stream.total_out();
        }
    }
}

/// lzma-rs into a sink (it keeps its own dictionary buffer).
fn lzma_rs_decompress(block: &[u8]) {
    let mut input = block;
    lzma_rs::lzma_decompress(&mut input, &mut std::io::sink()).unwrap();
}

/// lzma-rust2 read through a 64 KiB buffer.
fn lzma_rust2_decompress(block: &[u8], out: &mut [u8]) -> u64 {
    let mut reader = lzma_rust2::LzmaReader::new_mem_limit(block, u32::MAX, None).unwrap();
    let mut total = 0;
    loop {
        let n = reader.read(out).unwrap();
        black_box(&out);
        if n == 0 {
            return total;
        }
        total += n as u64;
    }
}

fn replay_benches(c: &mut Criterion) {
    let limits = ReplayLimits::default();
    let mut inputs: Vec<(String, Vec<u8>)> = FIXTURES
        .iter()
        .map(|name| (name.to_string(), read(&fixture_path(name))))
        .collect();
    inputs.push(("synthetic_1500k".into(), read(&long_replay())));
    let mut out = vec![0u8; CHUNK];
    for (name, replay) in &inputs {
        let mut group = c.benchmark_group(format!("replay/{name}"));
        if replay.len() > 1 << 20 {
            group.sample_size(10);
        }
        let block = frame_block(replay);
        group.throughput(Throughput::Bytes(replay.len() as u64));
        group.bench_function("inspect", |b| {
            b.iter(|| inspect(black_box(replay), &limits).unwrap())
        });
        group.bench_function("liblzma", |b| {
            b.iter(|| liblzma_decompress(black_box(block), &mut out))
        });
        group.bench_function("lzma-rs", |b| {
            b.iter(|| lzma_rs_decompress(black_box(block)))
        });
        group.bench_function("lzma-rust2", |b| {
            b.iter(|| lzma_rust2_decompress(black_box(block), &mut out))
        });
        group.finish();
    }
}

/// A std replay (empty strings, zero counts) whose frame block is the concatenated `text`
/// pieces compressed as one LZMA ("alone") stream, the format osu! writes.
fn replay_with_frames(pieces: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let options = LzmaOptions::new_preset(0).unwrap();
    let mut encoder =
        XzEncoder::new_stream(Vec::new(), Stream::new_lzma_encoder(&options).unwrap());
    for piece in pieces {
        encoder.write_all(&piece).unwrap();
    }
    let block = encoder.finish().unwrap();
    // mode, version, three absent strings, counts, score, combo, perfect, mods, life bar
    let mut replay = vec![0, 1, 0, 0, 0, 0, 0, 0];
    replay.extend_from_slice(&[0; 12 + 4 + 2 + 1 + 4]);
    replay.push(0);
    replay.extend_from_slice(&0i64.to_le_bytes());
    replay.extend_from_slice(&(block.len() as u32).to_le_bytes());
    replay.extend_from_slice(&block);
    replay.extend_from_slice(&0i64.to_le_bytes());
    replay
}

/// Where the synthetic inputs are written, for the memory probes and `bench/run`'s osrparse
/// run on the same files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-bench");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// 1.5 million plausible frames (cursor moves every 16 ms, keys toggling) and a seed frame;
/// written once, reused by later runs.
fn long_replay() -> PathBuf {
    let path = scratch("synthetic_1500k.osr");
    if !path.exists() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pieces = (0..1500).map(|_| {
            let mut text = String::new();
            for _ in 0..1000 {
                let r = next();
                let x = (r % 5_120_000) as f64 / 10_000.0;
                let y = ((r >> 24) % 3_840_000) as f64 / 10_000.0;
                text += &format!("16|{x}|{y}|{},", (r >> 48) % 16);
            }
            text.into_bytes()
        });
        let seed = std::iter::once(b"-12345|0|0|4242,".to_vec());
        std::fs::write(&path, replay_with_frames(pieces.chain(seed))).unwrap();
    }
    path
}

/// A std replay whose frame block is 1 GiB of one frame repeated.
fn bomb() -> PathBuf {
    let path = scratch("bomb_1gib.osr");
    if !path.exists() {
        let frame = b"16|256|192|0,";
        let piece = frame.repeat(CHUNK / frame.len());
        let count = (1 << 30) / piece.len() + 1;
        let replay = replay_with_frames(std::iter::repeat_n(piece, count));
        std::fs::write(&path, replay).unwrap();
    }
    path
}

/// Time to reject a 1 GiB decompression bomb: stopped by the frame limit, and (with the frame
/// limit lifted) by the decompressed-size limit.
fn bomb_benches(c: &mut Criterion) {
    let bomb = read(&bomb());
    let mut group = c.benchmark_group("replay/bomb_1gib");
    group.sample_size(10);
    group.bench_function("inspect_frame_limit", |b| {
        b.iter(|| inspect(black_box(&bomb), &ReplayLimits::default()).unwrap_err())
    });
    let no_frame_limit = ReplayLimits {
        max_frames: u64::MAX,
        ..ReplayLimits::default()
    };
    group.bench_function("inspect_size_limit", |b| {
        b.iter(|| inspect(black_box(&bomb), &no_frame_limit).unwrap_err())
    });
    group.finish();
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// In a child process: validate (or, with `liblzma`, only decompress) the file once and print
/// how far the peak RSS rose above the RSS before.
fn peak_rss_child(path: &str) {
    let replay = read(Path::new(path));
    let mode = std::env::var("REPLAY_BENCH_MODE").unwrap_or_default();
    let mut out = vec![0u8; CHUNK];
    let before = status_kib("VmRSS:");
    // "5" resets the peak to the current RSS (Linux 4.0+).
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    let verdict = if mode == "liblzma" {
        format!(
            "{} bytes out",
            liblzma_decompress(frame_block(&replay), &mut out)
        )
    } else {
        match inspect(&replay, &ReplayLimits::default()) {
            Ok(summary) => format!("accepted, {} frames", summary.frame_count),
            Err(error) => format!("rejected: {error}"),
        }
    };
    let growth = status_kib("VmHWM:").saturating_sub(before);
    println!("{growth} {verdict}");
}

/// One `peak-rss:` line per input and decoder, each measured in a fresh process.
fn memory_report() {
    let mut inputs: Vec<(String, PathBuf)> = FIXTURES
        .iter()
        .map(|name| (name.to_string(), fixture_path(name)))
        .collect();
    inputs.push(("synthetic_1500k".into(), long_replay()));
    inputs.push(("bomb_1gib".into(), bomb()));
    let exe = std::env::current_exe().unwrap();
    for (name, path) in &inputs {
        for mode in ["inspect", "liblzma"] {
            if mode == "liblzma" && name.starts_with("bomb") {
                continue; // the floor of a bomb is a gigabyte of decompression, not a number
            }
            let output = Command::new(&exe)
                .env(PEAK_RSS_CHILD, path)
                .env("REPLAY_BENCH_MODE", mode)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            let (kib, verdict) = stdout.trim().split_once(' ').unwrap_or(("?", ""));
            let size = std::fs::metadata(path).unwrap().len();
            println!("peak-rss: {name} ({size} bytes) {mode}: +{kib} KiB ({verdict})");
        }
    }
}

criterion_group!(benches, replay_benches, bomb_benches);

fn main() {
    if let Ok(path) = std::env::var(PEAK_RSS_CHILD) {
        return peak_rss_child(&path);
    }
    memory_report();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
