//! `replay::inspect` against bare liblzma decompression of the same frame block (same
//! decoder, same 64 KiB chunks, output discarded): the parser's cost on top of the
//! decompression it cannot avoid. Throughput is in input (file) bytes for both.
//!
//! Run: `cargo bench -p osurender-core --bench replay`; compare with
//! `bench/osrparse_bench.py` for the reference parser.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use liblzma::stream::{Action, LzmaOptions, Status, Stream};
use liblzma::write::XzEncoder;
use osurender_core::replay::{inspect, ReplayLimits};

const FIXTURES: [&str; 3] = ["valid_0", "valid_1", "valid_long"];

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/replays")
        .join(format!("{name}.osr"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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

/// Decompresses into a 64 KiB buffer and throws the output away; returns the output size.
fn bare_decompress(block: &[u8], out: &mut [u8]) -> u64 {
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

fn replay_benches(c: &mut Criterion) {
    let limits = ReplayLimits::default();
    let mut group = c.benchmark_group("replay");
    for name in FIXTURES {
        let replay = fixture(name);
        let block = frame_block(&replay);
        let mut out = vec![0u8; 64 * 1024];
        group.throughput(Throughput::Bytes(replay.len() as u64));
        group.bench_function(format!("inspect/{name}"), |b| {
            b.iter(|| inspect(black_box(&replay), &limits).unwrap())
        });
        group.bench_function(format!("bare_lzma/{name}"), |b| {
            b.iter(|| bare_decompress(black_box(block), &mut out))
        });
    }
    group.finish();
}

/// A std replay whose frame block is 1 GiB of `frame` repeated, in a single LZMA stream.
fn bomb(frame: &[u8]) -> Vec<u8> {
    let options = LzmaOptions::new_preset(0).unwrap();
    let mut encoder =
        XzEncoder::new_stream(Vec::new(), Stream::new_lzma_encoder(&options).unwrap());
    let piece = frame.repeat(64 * 1024 / frame.len());
    let mut written = 0;
    while written < 1 << 30 {
        encoder.write_all(&piece).unwrap();
        written += piece.len();
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

/// Time to reject 1 GiB decompression bombs: one stopped by the frame limit, one (with the
/// frame limit lifted) by the decompressed-size limit.
fn bomb_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("replay");
    group.sample_size(10);
    let frames = bomb(b"16|256|192|0,");
    eprintln!("1 GiB frame bomb: {} bytes", frames.len());
    group.bench_function("inspect/bomb_1gib_frames", |b| {
        b.iter(|| inspect(black_box(&frames), &ReplayLimits::default()).unwrap_err())
    });
    let no_frame_limit = ReplayLimits {
        max_frames: u64::MAX,
        ..ReplayLimits::default()
    };
    group.bench_function("inspect/bomb_1gib_bytes", |b| {
        b.iter(|| inspect(black_box(&frames), &no_frame_limit).unwrap_err())
    });
    group.finish();
}

criterion_group!(benches, replay_benches, bomb_benches);
criterion_main!(benches);
