//! Building blocks of hand-made replays, shared by the validator's unit tests
//! (`src/replay/tests.rs`) and the property tests (`tests/properties.rs`), which include this
//! file with `#[path]`.
#![allow(dead_code)] // each includer uses its own subset

use std::io::Write;

use liblzma::stream::{LzmaOptions, Stream};
use liblzma::write::XzEncoder;

/// A file of `tests/fixtures/replays`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/replays")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// LZMA "alone" compression, as osu! and osrparse write the frame block.
pub fn lzma_alone(text: &[u8]) -> Vec<u8> {
    lzma_alone_repeated(text, text.len())
}

/// `pattern` repeated to `total` bytes, compressed 64 KiB at a time so a large text never
/// has to exist in memory.
pub fn lzma_alone_repeated(pattern: &[u8], total: usize) -> Vec<u8> {
    let options = LzmaOptions::new_preset(0).expect("preset");
    let stream = Stream::new_lzma_encoder(&options).expect("encoder");
    let mut encoder = XzEncoder::new_stream(Vec::new(), stream);
    let piece = pattern.repeat((64 * 1024 / pattern.len().max(1)).max(1));
    let mut left = total;
    while left > 0 {
        let take = left.min(piece.len());
        encoder.write_all(&piece[..take]).expect("compress");
        left -= take;
    }
    encoder.finish().expect("compress")
}

/// An osu! string: the 0x0b marker, the ULEB128 length, the bytes.
pub fn osr_string(text: &[u8]) -> Vec<u8> {
    let mut out = vec![0x0b];
    let mut len = text.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(text);
    out
}
