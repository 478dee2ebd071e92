//! The uncompressed part of an `.osr` file: the header before the frame block, the block's
//! bounds, and the online score id after it, read the way osrparse's `_Unpacker` reads them.

use super::number::python_number;
use super::{Field, GameMode, HitCounts, ReplayError};

/// A bounds-checked reader over the replay bytes.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, len: usize, field: Field) -> Result<&'a [u8], ReplayError> {
        let end = self
            .pos
            .checked_add(len)
            .ok_or(ReplayError::Truncated(field))?;
        let taken = self
            .bytes
            .get(self.pos..end)
            .ok_or(ReplayError::Truncated(field))?;
        self.pos = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: Field) -> Result<[u8; N], ReplayError> {
        let taken = self.take(N, field)?;
        taken.try_into().map_err(|_| ReplayError::Truncated(field))
    }

    fn u8(&mut self, field: Field) -> Result<u8, ReplayError> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: Field) -> Result<u16, ReplayError> {
        self.array(field).map(u16::from_le_bytes)
    }

    fn u32(&mut self, field: Field) -> Result<u32, ReplayError> {
        self.array(field).map(u32::from_le_bytes)
    }

    fn i64(&mut self, field: Field) -> Result<i64, ReplayError> {
        self.array(field).map(i64::from_le_bytes)
    }

    /// An unsigned LEB128 length; osrparse accepts any number of continuation bytes, so a
    /// value past u64 saturates (it exceeds every remaining length anyway).
    fn uleb128(&mut self, field: Field) -> Result<u64, ReplayError> {
        let mut value: u64 = 0;
        let mut shift: u32 = 0;
        loop {
            let byte = self.u8(field)?;
            let part = u64::from(byte & 0x7f);
            if part != 0 {
                value = match part.checked_shl(shift) {
                    Some(shifted) if shifted >> shift == part => value | shifted,
                    _ => u64::MAX,
                };
            }
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift = shift.saturating_add(7);
        }
    }

    /// A string: `0x00` for none, or `0x0b`, a ULEB128 byte length and UTF-8 text.
    fn string(&mut self, field: Field) -> Result<Option<&'a str>, ReplayError> {
        match self.u8(field)? {
            0x00 => Ok(None),
            0x0b => {
                let len = self.uleb128(field)?;
                // osrparse slices leniently, but every string is followed by more fields, so
                // a length past the end always fails later: reject it here.
                let len = usize::try_from(len).map_err(|_| ReplayError::Truncated(field))?;
                let bytes = self.take(len, field)?;
                std::str::from_utf8(bytes)
                    .map(Some)
                    .map_err(|_| ReplayError::InvalidUtf8(field))
            }
            marker => Err(ReplayError::BadStringMarker { field, marker }),
        }
    }
}

/// The header fields the summary reports.
pub(super) struct Header<'a> {
    pub mode: GameMode,
    pub version: i32,
    pub beatmap_hash: Option<&'a str>,
    pub player_name: Option<&'a str>,
    pub replay_hash: Option<&'a str>,
    pub counts: HitCounts,
    pub score: u32,
    pub max_combo: u16,
    pub mods: u32,
    pub timestamp_ticks: i64,
}

/// Windows ticks (100 ns since 0001-01-01) that osrparse turns into a datetime without an
/// `OverflowError`: `datetime.min + timedelta(microseconds=ticks / 10)` must stay within
/// years 1..=9999 after rounding to whole microseconds.
const TIMESTAMP_TICKS: std::ops::RangeInclusive<i64> = -5..=3_155_378_975_999_999_679;

pub(super) fn read_header<'a>(cursor: &mut Cursor<'a>) -> Result<Header<'a>, ReplayError> {
    let mode_byte = cursor.u8(Field::GameMode)?;
    let mode = GameMode::from_byte(mode_byte).ok_or(ReplayError::UnknownGameMode(mode_byte))?;
    let version = i32::from_le_bytes(cursor.array(Field::GameVersion)?);
    let beatmap_hash = cursor.string(Field::BeatmapHash)?;
    let player_name = cursor.string(Field::PlayerName)?;
    let replay_hash = cursor.string(Field::ReplayHash)?;
    // 300s, 100s, 50s, gekis, katus, misses: any value is fine.
    let counts = HitCounts {
        count_300: cursor.u16(Field::HitCounts)?,
        count_100: cursor.u16(Field::HitCounts)?,
        count_50: cursor.u16(Field::HitCounts)?,
        count_geki: cursor.u16(Field::HitCounts)?,
        count_katu: cursor.u16(Field::HitCounts)?,
        count_miss: cursor.u16(Field::HitCounts)?,
    };
    let score = cursor.u32(Field::Score)?;
    let max_combo = cursor.u16(Field::MaxCombo)?;
    cursor.u8(Field::Perfect)?;
    let mods = cursor.u32(Field::Mods)?;
    if let Some(life_bar) = cursor.string(Field::LifeBar)? {
        check_life_bar(life_bar)?;
    }
    let timestamp_ticks = cursor.i64(Field::Timestamp)?;
    if !TIMESTAMP_TICKS.contains(&timestamp_ticks) {
        return Err(ReplayError::TimestampOutOfRange);
    }
    Ok(Header {
        mode,
        version,
        beatmap_hash,
        player_name,
        replay_hash,
        counts,
        score,
        max_combo,
        mods,
        timestamp_ticks,
    })
}

/// osrparse parses a non-empty life bar: it drops the last character (normally a trailing
/// comma), splits on `,` then `|`, and needs `int(time)` and `float(life)` for every state.
fn check_life_bar(text: &str) -> Result<(), ReplayError> {
    let mut chars = text.chars();
    if chars.next_back().is_none() {
        return Ok(());
    }
    for state in chars.as_str().split(',') {
        let mut parts = state.split('|');
        let time = parts.next().unwrap_or_default();
        let life = parts.next().ok_or(ReplayError::MalformedLifeBar)?;
        if !python_number(time).int_ok || !python_number(life).float_ok {
            return Err(ReplayError::MalformedLifeBar);
        }
    }
    Ok(())
}

/// Reads the frame block's declared length and returns the block, checking first that the
/// score id after it is present (osrparse needs at least 4 bytes there).
pub(super) fn frame_block<'a>(cursor: &mut Cursor<'a>) -> Result<&'a [u8], ReplayError> {
    let declared = cursor.u32(Field::FrameDataLength)?;
    let len = usize::try_from(declared).map_err(|_| ReplayError::Truncated(Field::FrameData))?;
    if len > cursor.remaining() {
        return Err(ReplayError::Truncated(Field::FrameData));
    }
    if cursor.remaining() - len < 4 {
        return Err(ReplayError::Truncated(Field::OnlineScoreId));
    }
    cursor.take(len, Field::FrameData)
}

/// The online score id: an i64, or (old replays) a u32 when fewer than 8 bytes remain.
/// Anything after it (a target-practice double, lazer data) is ignored, like osrparse does.
pub(super) fn online_score_id(cursor: &mut Cursor<'_>) -> Result<i64, ReplayError> {
    if cursor.remaining() >= 8 {
        cursor.i64(Field::OnlineScoreId)
    } else {
        cursor.u32(Field::OnlineScoreId).map(i64::from)
    }
}
