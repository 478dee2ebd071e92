//! Property tests of the parts that face hostile input: the replay validator never panics and never
//! allocates past its caps, a cut replay is never accepted, and the fixed-window limiter's keys
//! never let a window admit more than its limit.
//!
//! Case counts are proptest's default (256) unless `PROPTEST_CASES` says otherwise; the CI run
//! uses the default, long runs set it (see docs/RELIABILITY.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;

use osurender_core::domain::rate::RateLimit;
use osurender_core::domain::replay::{inspect, ReplayError, ReplayLimits};
use proptest::prelude::*;

#[path = "support/osr.rs"]
mod osr;
use osr::{fixture, lzma_alone, osr_string};

/// Counts the Rust heap of the current thread, so a property can bound what one call
/// allocates while other tests run on other threads. liblzma's own allocations (the LZMA
/// dictionary) go through C `malloc` and are bounded by `decoder_memlimit` instead.
struct CountingAlloc;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            // `try_with`: the thread-locals may already be gone while a thread exits.
            let _ = LIVE.try_with(|live| {
                let now = live.get() + layout.size();
                live.set(now);
                let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
            });
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The most the current thread's heap grew above its starting point while `f` ran.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let out = f();
    (out, PEAK.with(Cell::get) - start)
}

/// Small caps, so that "past its caps" is cheap to reach.
fn small_limits() -> ReplayLimits {
    ReplayLimits {
        max_decompressed_bytes: 256 * 1024,
        max_frames: 2_000,
        decoder_memlimit: 16 * 1024 * 1024,
    }
}

/// What a call may hold on the Rust heap besides liblzma: the streaming buffers are fixed
/// (tens of KiB) and nothing grows with the replay, so a generous constant bound suffices.
const MAX_RUST_HEAP_BYTES: usize = 1024 * 1024;

/// An osu!standard replay with generated names and frames, laid out as osu! writes it.
fn build_replay(player: &str, score: u32, frames: &[(u16, i16, i16, u8)]) -> Vec<u8> {
    let text: String = frames
        .iter()
        .map(|(w, x, y, keys)| format!("{w}|{x}.5|{y}|{keys},"))
        .collect();
    let block = lzma_alone(text.as_bytes());
    let mut out = vec![0];
    out.extend_from_slice(&20240123u32.to_le_bytes());
    out.extend(osr_string(b"0123456789abcdef0123456789abcdef"));
    out.extend(osr_string(player.as_bytes()));
    out.extend(osr_string(b"fedcba9876543210fedcba9876543210"));
    out.extend_from_slice(&[0; 12]);
    out.extend_from_slice(&score.to_le_bytes());
    out.extend_from_slice(&56u16.to_le_bytes());
    out.push(0);
    out.extend_from_slice(&72u32.to_le_bytes());
    out.extend(osr_string(b"0|1,2000|0.5,"));
    out.extend_from_slice(&638416224000000000i64.to_le_bytes());
    out.extend_from_slice(&(block.len() as u32).to_le_bytes());
    out.extend_from_slice(&block);
    out.extend_from_slice(&4000000000i64.to_le_bytes());
    out
}

fn frames() -> impl Strategy<Value = Vec<(u16, i16, i16, u8)>> {
    prop::collection::vec((1u16..100, -512i16..1024, -384i16..768, 0u8..16), 1..60)
}

fn valid_replay() -> impl Strategy<Value = Vec<u8>> {
    ("[a-zA-Z0-9 _ü名]{0,16}", any::<u32>(), frames())
        .prop_map(|(player, score, frames)| build_replay(&player, score, &frames))
}

proptest! {
    // Failures print their minimal input; nothing is written next to the sources.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes: an answer, never a panic, and the heap stays bounded.
    #[test]
    fn validator_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let (_, grown) = peak_growth(|| inspect(&bytes, &small_limits()));
        prop_assert!(grown <= MAX_RUST_HEAP_BYTES, "grew {grown} bytes");
    }

    /// A real replay with bytes overwritten anywhere (most structure is in the header and
    /// the start of the frame block, where the mutations land most often).
    #[test]
    fn validator_never_panics_on_mutated_replays(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        which in 0usize..2,
    ) {
        let mut bytes = fixture(["valid_0.osr", "valid_1.osr"][which]);
        for (index, value) in edits {
            let pos = index.index(bytes.len().min(512));
            bytes[pos] = value;
        }
        let (_, grown) = peak_growth(|| inspect(&bytes, &small_limits()));
        prop_assert!(grown <= MAX_RUST_HEAP_BYTES, "grew {grown} bytes");
    }

    /// Generated replays are accepted; every prefix that stops before the last 4 bytes is
    /// rejected (osrparse reads a 4-byte score id when 8 are not there, so those cuts pass).
    #[test]
    fn prefixes_of_valid_replays_are_rejected(replay in valid_replay(), cut in any::<prop::sample::Index>()) {
        prop_assert!(inspect(&replay, &small_limits()).is_ok());
        let len = cut.index(replay.len() - 4);
        prop_assert!(inspect(&replay[..len], &small_limits()).is_err(), "accepted a cut at {len}");
        prop_assert!(inspect(&replay[..replay.len() - 4], &small_limits()).is_ok());
    }

    /// Frames past the cap are refused, with the cap named, however the frames look.
    #[test]
    fn frame_cap_is_enforced(frames in prop::collection::vec((1u16..100, 0i16..10, 0i16..10, 0u8..4), 1..40)) {
        let replay = build_replay("p", 1, &frames);
        let limits = ReplayLimits { max_frames: 10, ..small_limits() };
        let verdict = inspect(&replay, &limits);
        if frames.len() > 10 {
            prop_assert_eq!(verdict, Err(ReplayError::TooManyFrames { limit: 10 }));
        } else {
            prop_assert!(verdict.is_ok());
        }
    }

    /// The limiter counts per `(endpoint, client, window start)` item with a conditional
    /// increment (`hits < limit`). Whatever order the requests of many clients arrive in, and
    /// whatever the clock says for each, no item — and so no window — admits more than the
    /// limit, and every request in a window maps to that window's item.
    #[test]
    fn fixed_window_never_admits_more_than_the_limit(
        requests in 1u32..20,
        period in prop::sample::select(vec![1u64, 60, 300, 3_600, 86_400]),
        hits in prop::collection::vec((0u8..4, 0u64..400_000), 1..300),
    ) {
        let limit = RateLimit { requests, period_secs: period };
        let mut items: HashMap<(u8, u64), u32> = HashMap::new();
        let mut admitted: HashMap<(u8, u64), u32> = HashMap::new();
        for (client, now) in hits {
            let (start, end) = limit.window(now);
            prop_assert!(start <= now && now < end && end - start == period);
            prop_assert_eq!(start % period, 0);
            let count = items.entry((client, start)).or_default();
            if *count < requests {
                *count += 1;
                *admitted.entry((client, now / period)).or_default() += 1;
            }
        }
        for (key, n) in admitted {
            prop_assert!(n <= requests, "{key:?} admitted {n} > {requests}");
        }
    }
}
