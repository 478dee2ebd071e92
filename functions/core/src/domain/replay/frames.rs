//! The decompressed frame text, parsed as it streams in with osrparse's rules.
//!
//! osrparse does `text.rstrip(",").split(",")`, splits each frame on `|`, and needs `int(w)`
//! and `int(keys)` of every frame. A last frame with `w == -12345` is the RNG seed and nothing
//! else of it is parsed. Of the first two frames, those at x = 256, y = -500 are dropped
//! (deciding that needs `float(x)`, and `float(y)` when x is 256). Every other frame needs,
//! by mode: std `float(x)` and `float(y)`, taiko and mania `int(x)`, catch `float(x)`.
//!
//! Whether a frame is the last one is known only when the next one starts, so a frame that may
//! be the seed frame waits, as facts, until then. Memory stays constant whatever the text's
//! size.

use super::number::{NumberFacts, NumberLexer};
use super::{FrameProblem, GameMode, ReplayError};

/// osrparse's marker for the frame that carries the RNG seed.
const SEED_FRAME_TIME: i64 = -12345;

/// What the lexer learned about the four fields of one frame (`w|x|y|keys`).
#[derive(Clone, Copy, Debug, Default)]
struct FrameFacts {
    /// Fields seen, counting up to 4 (osrparse ignores any after the fourth).
    fields: u8,
    time: NumberFacts,
    x: NumberFacts,
    y: NumberFacts,
    keys: NumberFacts,
    /// A hash of the text of `x|y`, while the replay has shown no input yet: a frame whose
    /// position text differs from the first play frame's moved the cursor.
    position: u64,
}

/// One step of FNV-1a over the position text.
#[inline(always)]
fn position_hash(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameKind {
    /// A frame osrparse keeps in `replay_data`.
    Play,
    /// A seed frame or one of the dropped (256, -500) frames.
    Dropped,
}

/// What osrparse makes of frame number `index`.
fn judge(
    frame: &FrameFacts,
    index: u64,
    mode: GameMode,
    is_last: bool,
) -> Result<FrameKind, FrameProblem> {
    if !frame.time.int_ok {
        return Err(FrameProblem::Time);
    }
    if frame.fields < 4 {
        return Err(FrameProblem::MissingFields);
    }
    if !frame.keys.int_ok {
        return Err(FrameProblem::Keys);
    }
    if is_last && frame.time.int_value == Some(SEED_FRAME_TIME) {
        return Ok(FrameKind::Dropped);
    }
    if index < 2 {
        if !frame.x.float_ok {
            return Err(FrameProblem::X);
        }
        if frame.x.float_value == Some(256.0) {
            if !frame.y.float_ok {
                return Err(FrameProblem::Y);
            }
            if frame.y.float_value == Some(-500.0) {
                return Ok(FrameKind::Dropped);
            }
        }
    }
    let (x_ok, y_ok) = match mode {
        GameMode::Std => (frame.x.float_ok, frame.y.float_ok),
        GameMode::Taiko | GameMode::Mania => (frame.x.int_ok, true),
        GameMode::Catch => (frame.x.float_ok, true),
    };
    match (x_ok, y_ok) {
        (false, _) => Err(FrameProblem::X),
        (true, false) => Err(FrameProblem::Y),
        (true, true) => Ok(FrameKind::Play),
    }
}

/// Totals over the frames osrparse keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct FrameStats {
    pub frames: u64,
    /// Sum of the frames' time deltas in milliseconds, saturating.
    pub duration_ms: i64,
    /// Some play frame presses a key, or moves the cursor from where the first one is.
    pub has_input: bool,
}

#[derive(Clone, Debug)]
pub(super) struct FrameParser {
    mode: GameMode,
    max_frames: u64,
    /// Non-empty frames started so far; the current or latest one has index `started - 1`.
    started: u64,
    /// Inside a frame (at least one byte of it seen).
    in_frame: bool,
    /// An empty frame (`,,`) came after the latest one: fatal if another frame follows.
    empty_frame: bool,
    field: u8,
    lexer: NumberLexer,
    current: FrameFacts,
    /// The latest frame, when it may be the seed frame: judged once it is known whether it
    /// is the last. Any other frame is judged as soon as it is read.
    pending: Option<FrameFacts>,
    /// The first play frame's position hash, until the replay shows input.
    first_position: Option<u64>,
    stats: FrameStats,
    error: Option<ReplayError>,
}

impl FrameParser {
    pub fn new(mode: GameMode, max_frames: u64) -> Self {
        Self {
            mode,
            max_frames,
            started: 0,
            in_frame: false,
            empty_frame: false,
            field: 0,
            lexer: NumberLexer::new(),
            current: FrameFacts::default(),
            pending: None,
            first_position: None,
            stats: FrameStats::default(),
            error: None,
        }
    }

    /// The first error found; no text fed later can undo it.
    pub fn error(&self) -> Option<&ReplayError> {
        self.error.as_ref()
    }

    pub fn feed(&mut self, mut text: &[u8]) {
        while self.error.is_none() {
            if !self.in_frame && self.started >= 2 {
                text = self.feed_fast(text);
            }
            let Some((&byte, rest)) = text.split_first() else {
                return;
            };
            self.push(byte);
            text = rest;
        }
    }

    /// Consumes the frames of the usual shape at the start of `text`; returns the rest.
    fn feed_fast<'t>(&mut self, mut text: &'t [u8]) -> &'t [u8] {
        while let Some((frame, used)) = fast_frame(text, !self.stats.has_input) {
            self.start_frame();
            self.complete_frame(frame);
            if self.error.is_some() {
                break;
            }
            text = text.get(used..).unwrap_or_default();
        }
        text
    }

    /// Ends the text: judges the last frame.
    pub fn finish(mut self) -> Result<FrameStats, ReplayError> {
        if self.in_frame {
            self.end_frame();
        }
        if self.error.is_none() && self.started == 0 {
            // `int("")` of the only, empty, frame.
            self.error = Some(ReplayError::NoFrames);
        }
        if let Some(last) = self.pending.take() {
            self.resolve(&last, true);
        }
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.stats),
        }
    }

    fn push(&mut self, byte: u8) {
        match byte {
            0x80..=0xff => self.error = Some(ReplayError::FrameDataNotAscii),
            b',' if self.in_frame => self.end_frame(),
            b',' => self.empty_frame = true,
            _ => {
                if !self.in_frame {
                    self.start_frame();
                    self.in_frame = true;
                    self.field = 0;
                    self.lexer.reset(false);
                }
                if byte == b'|' {
                    self.end_field();
                } else if self.field < 4 {
                    self.lexer.push(byte);
                    if matches!(self.field, 1 | 2) && !self.stats.has_input {
                        self.current.position = position_hash(self.current.position, byte);
                    }
                    // A time or keys field that can no longer be an integer fails the frame
                    // whether or not it is the last: stop here (this ends a zero-filled bomb).
                    if matches!(self.field, 0 | 3) && self.lexer.int_rejected() {
                        self.fail_current(if self.field == 0 {
                            FrameProblem::Time
                        } else {
                            FrameProblem::Keys
                        });
                    }
                }
            }
        }
    }

    /// A new non-empty frame begins: a waiting previous one is not the last, so judge it now.
    #[inline(always)]
    fn start_frame(&mut self) {
        if self.empty_frame {
            // `int("")` of the empty frame before this one.
            self.error = Some(ReplayError::EmptyFrame {
                index: self.started,
            });
            return;
        }
        if let Some(previous) = self.pending.take() {
            self.resolve(&previous, false);
        }
        self.started += 1;
        if self.started > self.max_frames {
            self.error = Some(ReplayError::TooManyFrames {
                limit: self.max_frames,
            });
        }
    }

    fn end_field(&mut self) {
        let facts = self.lexer.finish();
        match self.field {
            0 => self.current.time = facts,
            1 => self.current.x = facts,
            2 => self.current.y = facts,
            3 => self.current.keys = facts,
            _ => {}
        }
        if self.field == 1 {
            // The separator between x and y, as the fast path hashes it.
            self.current.position = position_hash(self.current.position, b'|');
        }
        self.field = self.field.saturating_add(1);
        // Only the first two frames' x and y values matter (the (256, -500) drop).
        let want_value = self.started <= 2 && matches!(self.field, 1 | 2);
        self.lexer.reset(want_value);
    }

    fn end_frame(&mut self) {
        self.end_field();
        self.current.fields = self.field.min(4);
        let frame = std::mem::take(&mut self.current);
        self.complete_frame(frame);
        self.in_frame = false;
    }

    /// A frame was read; only one that may be the seed frame waits to learn if it is last.
    #[inline(always)]
    fn complete_frame(&mut self, frame: FrameFacts) {
        if frame.time.int_value == Some(SEED_FRAME_TIME) {
            self.pending = Some(frame);
        } else {
            self.resolve(&frame, false);
        }
    }

    fn fail_current(&mut self, problem: FrameProblem) {
        self.error = Some(ReplayError::MalformedFrame {
            index: self.started.saturating_sub(1),
            problem,
        });
    }

    /// Judges the latest frame, the one with index `started - 1`.
    #[inline(always)]
    fn resolve(&mut self, frame: &FrameFacts, is_last: bool) {
        let index = self.started.saturating_sub(1);
        match judge(frame, index, self.mode, is_last) {
            Ok(FrameKind::Play) => {
                self.stats.frames += 1;
                let time = frame.time.int_value.unwrap_or_default();
                self.stats.duration_ms = self.stats.duration_ms.saturating_add(time);
                if !self.stats.has_input {
                    self.note_input(frame);
                }
            }
            Ok(FrameKind::Dropped) => {}
            Err(problem) => self.fail_current(problem),
        }
    }
}

impl FrameParser {
    /// A key pressed (keys other than 0; a value past i64 is not 0 either), or the cursor
    /// elsewhere than in the first play frame.
    fn note_input(&mut self, frame: &FrameFacts) {
        let first = *self.first_position.get_or_insert(frame.position);
        self.stats.has_input = frame.keys.int_value != Some(0) || frame.position != first;
    }
}

/// Parses the usual shape of a frame, `t|x|y|k,` with `-?digits` integers and x, y of the form
/// `-?digits(.digits)?`, lying entirely in `text`. It returns the same facts the lexer would
/// (without float values, so only from the third frame on) and the bytes used, or `None` for
/// anything else, which the byte-at-a-time path then handles. With `track_position`, the
/// frame's position hash too (the byte path's: `x|y`).
#[inline(always)]
fn fast_frame(text: &[u8], track_position: bool) -> Option<(FrameFacts, usize)> {
    let (time, pos) = fast_int(text, 0)?;
    let x_start = expect(text, pos, b'|')?;
    let (x, pos) = fast_decimal(text, x_start)?;
    let (y, y_end) = fast_decimal(text, expect(text, pos, b'|')?)?;
    let (keys, pos) = fast_int(text, expect(text, y_end, b'|')?)?;
    let position = if track_position {
        text.get(x_start..y_end)?
            .iter()
            .fold(0, |hash, &byte| position_hash(hash, byte))
    } else {
        0
    };
    let frame = FrameFacts {
        fields: 4,
        time,
        x,
        y,
        keys,
        position,
    };
    Some((frame, expect(text, pos, b',')?))
}

/// The position after `byte`, if it is at `pos`.
#[inline(always)]
fn expect(text: &[u8], pos: usize, byte: u8) -> Option<usize> {
    (text.get(pos) == Some(&byte)).then_some(pos + 1)
}

/// At most this many digits, so an integer fits an i64 and stays far below `int()`'s limit.
const FAST_MAX_DIGITS: usize = 18;

/// `-?digits`, with its value.
#[inline(always)]
fn fast_int(text: &[u8], pos: usize) -> Option<(NumberFacts, usize)> {
    let negative = text.get(pos) == Some(&b'-');
    let start = pos + usize::from(negative);
    let end = digits_end(text, start)?;
    let magnitude = text
        .get(start..end)?
        .iter()
        .fold(0i64, |value, &d| value * 10 + i64::from(d - b'0'));
    let facts = NumberFacts {
        int_ok: true,
        float_ok: true,
        int_value: Some(if negative { -magnitude } else { magnitude }),
        float_value: None,
    };
    Some((facts, end))
}

/// `-?digits(.digits)?`: always a float, an int only without the fraction.
#[inline(always)]
fn fast_decimal(text: &[u8], pos: usize) -> Option<(NumberFacts, usize)> {
    let start = pos + usize::from(text.get(pos) == Some(&b'-'));
    let mut end = digits_end(text, start)?;
    let fraction = text.get(end) == Some(&b'.');
    if fraction {
        end = digits_end(text, end + 1)?;
    }
    let facts = NumberFacts {
        int_ok: !fraction,
        float_ok: true,
        int_value: None,
        float_value: None,
    };
    Some((facts, end))
}

/// The end of the 1 to `FAST_MAX_DIGITS` ASCII digits starting at `start`.
#[inline(always)]
fn digits_end(text: &[u8], start: usize) -> Option<usize> {
    let limit = text.len().min(start + FAST_MAX_DIGITS + 1);
    let mut end = start;
    while end < limit && text[end].is_ascii_digit() {
        end += 1;
    }
    (end > start && end - start <= FAST_MAX_DIGITS).then_some(end)
}
