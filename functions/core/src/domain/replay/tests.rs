//! Edge cases of the validator. The verdicts follow osrparse 7.0.1 (checked case by case in
//! `tests/replay_vs_osrparse.rs`); these pin the behaviour down without Python.

use std::io::Write;
use std::time::{Duration, Instant};

use liblzma::stream::{LzmaOptions, Stream};
use liblzma::write::XzEncoder;

use super::number::python_number;
use super::*;

#[path = "../../../tests/support/osr.rs"]
mod osr;
use osr::{fixture, lzma_alone, lzma_alone_repeated, osr_string};

/// A replay with the given mode byte, life bar and frame block.
fn replay_with(mode: u8, life_bar: &[u8], block: &[u8]) -> Vec<u8> {
    let mut out = vec![mode];
    out.extend_from_slice(&20240123u32.to_le_bytes());
    out.extend(osr_string(b"0123456789abcdef0123456789abcdef"));
    out.extend(osr_string("Ünïcödé 名前".as_bytes()));
    out.extend(osr_string(b"fedcba9876543210fedcba9876543210"));
    out.extend_from_slice(&[0; 12]); // hit counts
    out.extend_from_slice(&1234u32.to_le_bytes());
    out.extend_from_slice(&56u16.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&72u32.to_le_bytes());
    out.extend(osr_string(life_bar));
    out.extend_from_slice(&638416224000000000i64.to_le_bytes());
    out.extend_from_slice(&(block.len() as u32).to_le_bytes());
    out.extend_from_slice(block);
    out.extend_from_slice(&4000000000i64.to_le_bytes());
    out
}

fn replay(mode: u8, frames: &[u8]) -> Vec<u8> {
    replay_with(mode, b"0|1,2000|0.5,", &lzma_alone(frames))
}

fn check(bytes: &[u8]) -> Result<ReplaySummary, ReplayError> {
    inspect(bytes, &ReplayLimits::default())
}

fn frames_of(mode: u8, frames: &[u8]) -> Result<u64, ReplayError> {
    check(&replay(mode, frames)).map(|summary| summary.frame_count)
}

#[test]
fn fixtures_get_the_expected_verdicts() {
    for (name, frames) in [("valid_0", 3000), ("valid_1", 3000), ("valid_long", 40000)] {
        let summary = check(&fixture(&format!("{name}.osr"))).expect(name);
        assert_eq!(summary.mode, GameMode::Std);
        assert_eq!(summary.frame_count, frames, "{name}");
        assert_eq!(summary.player_name, "pyref");
        assert!(summary.info().is_ok(), "{name}: its hashes are MD5s");
    }
    // osrparse ignores whatever follows the score id.
    assert!(check(&fixture("corrupt_trailing_garbage.osr")).is_ok());
    assert_eq!(
        check(&fixture("corrupt_empty.osr")),
        Err(ReplayError::Empty)
    );
    assert_eq!(
        check(&fixture("corrupt_truncated.osr")),
        Err(ReplayError::Truncated(Field::FrameData))
    );
    assert_eq!(
        check(&fixture("corrupt_bad_mode.osr")),
        Err(ReplayError::UnknownGameMode(7))
    );
    assert_eq!(
        check(&fixture("corrupt_bad_string_marker.osr")),
        Err(ReplayError::BadStringMarker {
            field: Field::BeatmapHash,
            marker: 0x05
        })
    );
    assert_eq!(
        check(&fixture("corrupt_garbage_lzma.osr")),
        Err(ReplayError::CorruptFrameData)
    );
    // Admission refuses it for its mode; structurally it is fine.
    let taiko = check(&fixture("corrupt_taiko_mode.osr")).expect("a well-formed taiko replay");
    assert_eq!(taiko.mode, GameMode::Taiko);
}

#[test]
fn error_messages_read_as_sentences() {
    assert_eq!(
        ReplayError::Truncated(Field::PlayerName).to_string(),
        "replay truncated in the player name"
    );
    assert_eq!(
        ReplayError::MalformedFrame {
            index: 3,
            problem: FrameProblem::Keys
        }
        .to_string(),
        "frame 3 has keys that are not an integer"
    );
    assert_eq!(
        ReplayError::UnknownGameMode(9).to_string(),
        "unknown game mode 9"
    );
}

#[test]
fn every_truncation_is_rejected_without_panicking() {
    let bytes = fixture("valid_0.osr");
    for len in 0..bytes.len() - 4 {
        assert!(check(&bytes[..len]).is_err(), "accepted a cut at {len}");
    }
    // Fewer than 8 bytes of score id: osrparse falls back to reading 4.
    for len in bytes.len() - 4..=bytes.len() {
        assert!(check(&bytes[..len]).is_ok(), "rejected a cut at {len}");
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let original = fixture("valid_0.osr");
    // A fixed xorshift sequence: reproducible without a dependency.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let mut bytes = original.clone();
        for _ in 0..1 + next() % 4 {
            // Mostly the header and the start of the frame block, where structure lives.
            let pos = (next() % 200) as usize;
            bytes[pos] = next() as u8;
        }
        let _ = check(&bytes);
    }
}

#[test]
fn score_id_int32_fallback() {
    let mut bytes = replay(0, b"16|1|2|3,");
    bytes.truncate(bytes.len() - 4);
    let summary = check(&bytes).expect("4-byte score id");
    // osrparse reads the fallback unsigned.
    assert_eq!(summary.online_score_id, i64::from(4000000000u32));
}

#[test]
fn strings_follow_osrparse() {
    let good = replay(0, b"16|1|2|3,");
    let hash_at = 5;
    let with_hash = |raw: &[u8]| {
        let mut bytes = good[..hash_at].to_vec();
        bytes.extend_from_slice(raw);
        bytes.extend_from_slice(&good[hash_at + 34..]);
        bytes
    };
    assert!(check(&with_hash(b"\x00")).is_ok(), "absent string");
    assert!(check(&with_hash(b"\x0b\x00")).is_ok(), "empty string");
    // Redundant ULEB128 continuation bytes are still a length of 5.
    assert!(check(&with_hash(
        b"\x0b\x85\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00hello"
    ))
    .is_ok());
    assert_eq!(
        check(&with_hash(b"\x0b\x02\xc0\xaf")),
        Err(ReplayError::InvalidUtf8(Field::BeatmapHash))
    );
    assert_eq!(
        check(&with_hash(b"\x0b\x03\xed\xa0\x80")),
        Err(ReplayError::InvalidUtf8(Field::BeatmapHash)),
        "surrogate"
    );
    assert_eq!(
        check(&with_hash(
            b"\x0b\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7fab"
        )),
        Err(ReplayError::Truncated(Field::BeatmapHash))
    );
    assert_eq!(
        check(&with_hash(b"\x0c")),
        Err(ReplayError::BadStringMarker {
            field: Field::BeatmapHash,
            marker: 0x0c
        })
    );
}

#[test]
fn life_bar_is_parsed_like_osrparse() {
    let block = lzma_alone(b"16|1|2|3,");
    let verdict = |life_bar: &str| check(&replay_with(0, life_bar.as_bytes(), &block)).is_ok();
    assert!(verdict(""));
    assert!(verdict("0|1,2000|0.5,"));
    // The last character is dropped unseen, whatever it is.
    assert!(verdict("0|1x"));
    assert!(!verdict("0|1"), "drops the 1: float('') fails");
    assert!(!verdict("0|1,,"));
    assert!(!verdict("0,"));
    assert!(verdict("1_0|+1e3,"));
    // Unicode digits and spaces count, as in Python.
    assert!(verdict("٣\u{3000}|٤.٥,"));
    assert!(!verdict("²|1,"));
}

#[test]
fn timestamps_osrparse_can_represent() {
    let bytes = replay(0, b"16|1|2|3,");
    let at = bytes.len() - 8 - 4 - lzma_alone(b"16|1|2|3,").len() - 8;
    let with_ticks = |ticks: i64| {
        let mut bytes = bytes.clone();
        bytes[at..at + 8].copy_from_slice(&ticks.to_le_bytes());
        check(&bytes)
    };
    assert!(with_ticks(0).is_ok());
    assert!(with_ticks(-5).is_ok(), "rounds to datetime.min");
    assert_eq!(with_ticks(-6), Err(ReplayError::TimestampOutOfRange));
    assert!(with_ticks(3_155_378_975_999_999_679).is_ok());
    assert_eq!(
        with_ticks(3_155_378_975_999_999_680),
        Err(ReplayError::TimestampOutOfRange)
    );
}

#[test]
fn python_int_and_float_grammar() {
    // (text, int() accepts, float() accepts), as CPython 3.11 answers.
    let cases: &[(&str, bool, bool)] = &[
        ("1", true, true),
        ("+1", true, true),
        ("-1", true, true),
        (" \t1\n\x0b\x0c\r", true, true),
        ("1_0", true, true),
        ("1__0", false, false),
        ("_1", false, false),
        ("1_", false, false),
        ("010", true, true),
        ("\x1c1", false, false),
        ("1\x00", false, false),
        ("1e5", false, true),
        ("1.0", false, true),
        ("1.", false, true),
        (".5", false, true),
        (".", false, false),
        ("1e", false, false),
        ("1e+", false, false),
        ("e5", false, false),
        ("0x10", false, false),
        ("", false, false),
        (" ", false, false),
        ("-", false, false),
        ("nan", false, true),
        ("-nan", false, true),
        ("+inf", false, true),
        ("InFiNiTy", false, true),
        (" inf ", false, true),
        ("infinit", false, false),
        ("nan(1)", false, false),
        ("1_0.5", false, true),
        ("1_.5", false, false),
        ("1._5", false, false),
        ("1e1_0", false, true),
        ("1_e1", false, false),
        ("1e99999", false, true),
        ("٣", true, true),
        ("\u{a0}1\u{3000}", true, true),
        ("١_٢", true, true),
        ("²", false, false),
        ("1é", false, false),
    ];
    for &(text, int_ok, float_ok) in cases {
        let facts = python_number(text);
        assert_eq!(
            (facts.int_ok, facts.float_ok),
            (int_ok, float_ok),
            "{text:?}"
        );
    }
    // int() refuses more than 4300 digits, leading zeros included; float() has no limit.
    let digits = |n: usize| "0".repeat(n);
    assert!(python_number(&digits(4300)).int_ok);
    assert!(!python_number(&digits(4301)).int_ok);
    assert!(python_number(&digits(100_000)).float_ok);
    assert_eq!(python_number("-012_345").int_value, Some(-12345));
    assert_eq!(python_number("99999999999999999999").int_value, None);
}

#[test]
fn skip_frames_and_seed_frame() {
    // The (256, -500) frames among the first two are dropped, the seed frame too.
    let frames = b"0|256|-500|0,-1|256|-500|0,16|100|100|1,-12345|0|0|777,";
    assert_eq!(frames_of(0, frames), Ok(1));
    // Taiko needs int(x) except in dropped frames; 256.0 counts as 256.
    assert_eq!(frames_of(1, b"0|256.0|-500|0,16|100|0|1,"), Ok(1));
    assert!(frames_of(1, b"0|256.5|-500|0,16|100|0|1,").is_err());
    assert!(frames_of(1, b"0|1|1|0,16|100|0|1,16|256.0|-500|0,").is_err());
    // Exact float equality, however the number is written.
    for x in ["2.56e2", "25600e-2", "256.0000000000000001"] {
        let text = format!("0|{x}|-5e2|0,16|100|0|1,");
        assert_eq!(frames_of(3, text.as_bytes()), Ok(1), "{x}");
    }
    let long = format!("0|256.{}1|-500|0,16|100|0|1,", "0".repeat(900));
    assert_eq!(frames_of(3, long.as_bytes()), Ok(1));
    let below = format!("0|255.{}|-500|0,16|100|0|1,", "9".repeat(900));
    assert_eq!(frames_of(3, below.as_bytes()), Ok(1));
    assert!(frames_of(3, b"0|256.0001|-500|0,16|100|0|1,").is_err());

    // Only the last frame may be the seed frame, and then its x and y are not parsed.
    assert_eq!(frames_of(0, b"1|2|3|4,-12345|x|y|7,,,"), Ok(1));
    assert_eq!(frames_of(0, b"-12345|x|y|7"), Ok(0));
    assert!(frames_of(0, b"-12345|x|y|7,1|2|3|4,").is_err());
    assert!(frames_of(0, b"1|2|3|4,-12345|0|0|abc,").is_err());
    assert!(frames_of(0, b"1|2|3|4,-12345|x,").is_err());
}

#[test]
fn frame_separators() {
    assert_eq!(frames_of(0, b""), Err(ReplayError::NoFrames));
    assert_eq!(frames_of(0, b",,,"), Err(ReplayError::NoFrames));
    assert_eq!(frames_of(0, b"1|2|3|4"), Ok(1));
    assert_eq!(frames_of(0, b"1|2|3|4,,,"), Ok(1));
    assert_eq!(
        frames_of(0, b"1|2|3|4,,1|2|3|4,"),
        Err(ReplayError::EmptyFrame { index: 1 })
    );
    assert!(frames_of(0, b",1|2|3|4,").is_err());
    assert_eq!(
        frames_of(0, b"1|2|3|4,5|6|7,"),
        Err(ReplayError::MalformedFrame {
            index: 1,
            problem: FrameProblem::MissingFields
        })
    );
    assert_eq!(frames_of(0, b"1|2|3|4|extra|,5|6|7|8"), Ok(2));
    assert!(frames_of(0, b"1|2|3|4, ").is_err());
    assert_eq!(
        frames_of(0, b"1|2|3|4,\xff"),
        Err(ReplayError::FrameDataNotAscii)
    );
    // Mode decides which fields must be integers.
    assert_eq!(frames_of(2, b"1|2|3|4,5|6.5|y|0,"), Ok(2));
    assert!(frames_of(3, b"1|2|3|4,5|6.5|0|0,").is_err());
    assert!(frames_of(0, b"1|2|3|4,5|6.5|y|0,").is_err());
}

#[test]
fn fields_longer_than_a_chunk_stream_through() {
    let text = format!("1|2|3|4,5|1{}|7|8,9|1|1|1,", "0".repeat(200_000));
    assert_eq!(frames_of(0, text.as_bytes()), Ok(3));
    assert!(
        frames_of(3, text.as_bytes()).is_err(),
        "int(x) of 200,001 digits fails"
    );
}

#[test]
fn frame_count_limit() {
    let bytes = replay(0, &b"16|1|2|3,".repeat(1000));
    let limits = ReplayLimits {
        max_frames: 999,
        ..ReplayLimits::default()
    };
    assert_eq!(
        inspect(&bytes, &limits),
        Err(ReplayError::TooManyFrames { limit: 999 })
    );
}

#[test]
fn decoder_memory_limit() {
    // The frame block declares a 64 MiB dictionary.
    let options = {
        let mut options = LzmaOptions::new_preset(0).expect("preset");
        options.dict_size(64 << 20);
        options
    };
    let mut encoder = XzEncoder::new_stream(
        Vec::new(),
        Stream::new_lzma_encoder(&options).expect("encoder"),
    );
    encoder.write_all(b"16|1|2|3,").expect("compress");
    let bytes = replay_with(0, b"", &encoder.finish().expect("compress"));
    assert!(check(&bytes).is_ok());
    let limits = ReplayLimits {
        decoder_memlimit: 16 << 20,
        ..ReplayLimits::default()
    };
    assert_eq!(
        inspect(&bytes, &limits),
        Err(ReplayError::DecoderMemory { limit: 16 << 20 })
    );
}

/// Work done on a bomb is bounded by the limits, not by what it expands to.
fn assert_rejected_fast(bytes: &[u8], limits: &ReplayLimits, expected: ReplayError) {
    let started = Instant::now();
    assert_eq!(inspect(bytes, limits), Err(expected));
    // Generous for an unoptimised build; expanding everything would take minutes.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn decompression_bomb_of_valid_frames() {
    // 1 GiB of frame text in 1 MiB streams that osrparse would decode one after the other.
    let stream = lzma_alone_repeated(b"0|0|0|0,", 1 << 20);
    let bomb = replay_with(0, b"", &stream.repeat(1024));
    assert!(bomb.len() < 4 << 20, "{} bytes", bomb.len());
    let limits = ReplayLimits::default();
    let expected = ReplayError::TooManyFrames {
        limit: limits.max_frames,
    };
    assert_rejected_fast(&bomb, &limits, expected);
    let roomy = ReplayLimits {
        max_frames: u64::MAX,
        ..ReplayLimits::default()
    };
    let expected = ReplayError::FrameDataTooLarge {
        limit: roomy.max_decompressed_bytes,
    };
    assert_rejected_fast(&bomb, &roomy, expected);

    // One stream, cut at a small cap; the decoder's memory is its dictionary and one chunk.
    let stream = lzma_alone_repeated(b"16|256|192|0,", 16 << 20);
    let limits = ReplayLimits {
        max_decompressed_bytes: 1 << 20,
        ..ReplayLimits::default()
    };
    let expected = ReplayError::FrameDataTooLarge { limit: 1 << 20 };
    assert_rejected_fast(&replay_with(0, b"", &stream), &limits, expected);
}

#[test]
fn decompression_bomb_of_zeros_stops_at_the_first_field() {
    // int() of more than 4300 digits fails, so the first field ends it after 4301 bytes.
    let stream = lzma_alone_repeated(b"0", 16 << 20);
    let expected = ReplayError::MalformedFrame {
        index: 0,
        problem: FrameProblem::Time,
    };
    assert_rejected_fast(
        &replay_with(0, b"", &stream),
        &ReplayLimits::default(),
        expected,
    );
}
