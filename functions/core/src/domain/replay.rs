//! Structural validation of osu! replays (`.osr`).
//!
//! [`inspect`] accepts exactly the files the reference parser, osrparse 7.0.1, parses without
//! an exception, within [`ReplayLimits`]: osrparse reads the whole replay and its decompressed
//! frames into memory, so a small upload can cost it gigabytes, while here the frames are
//! decompressed into a fixed buffer and parsed as they stream, so memory does not grow with
//! the replay and oversized ones are cut off early. The limits are the only intended
//! difference: a replay that exceeds one is rejected even if osrparse would parse it.
//!
//! Any game mode passes here, as in osrparse; admission then applies the render policy
//! (`RENDER_MODES`, Autoplay, length, input) to the summary.

mod decompress;
mod frames;
mod header;
mod info;
mod number;
#[cfg(test)]
mod tests;

use std::fmt;

use header::Cursor;

pub use info::{played_at, Mods, NotMd5, ReplayInfo};

/// Bounds on the work and memory one replay may cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Decompressed frame text, over all LZMA streams of the frame block.
    pub max_decompressed_bytes: u64,
    /// Frames in the frame text (including the seed frame).
    pub max_frames: u64,
    /// liblzma's memory limit; the LZMA dictionary size declared by the file counts here.
    pub decoder_memlimit: u64,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        Self {
            // A 40,000-frame replay (a long map) decompresses to under 1 MiB.
            max_decompressed_bytes: 64 * 1024 * 1024,
            // About nine hours of frames at 60 Hz.
            max_frames: 2_000_000,
            // Dictionaries up to xz's largest preset (64 MiB); replays use 2 MiB. Only the part
            // that decompressed bytes fill is ever touched.
            decoder_memlimit: 128 * 1024 * 1024,
        }
    }
}

/// The game mode, with the value of the replay's mode byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GameMode {
    Std = 0,
    Taiko = 1,
    Catch = 2,
    Mania = 3,
}

impl GameMode {
    pub const ALL: [GameMode; 4] = [Self::Std, Self::Taiko, Self::Catch, Self::Mania];

    /// The mode's name, as osu!'s API spells it (`RENDER_MODES`, a job's `replay.mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Std => "osu",
            Self::Taiko => "taiko",
            Self::Catch => "fruits",
            Self::Mania => "mania",
        }
    }

    /// The mode byte's meaning; osrparse rejects any other value.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Std),
            1 => Some(Self::Taiko),
            2 => Some(Self::Catch),
            3 => Some(Self::Mania),
            _ => None,
        }
    }
}

impl std::str::FromStr for GameMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| format!("unknown game mode `{s}` (osu, taiko, fruits or mania)"))
    }
}

/// The judgement counts of the header, as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitCounts {
    pub count_300: u16,
    pub count_100: u16,
    pub count_50: u16,
    pub count_geki: u16,
    pub count_katu: u16,
    pub count_miss: u16,
}

/// What a structurally valid replay says about itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaySummary {
    pub mode: GameMode,
    pub version: i32,
    /// Empty when the file stores no string.
    pub beatmap_hash: String,
    pub player_name: String,
    pub replay_hash: String,
    pub counts: HitCounts,
    pub score: u32,
    pub max_combo: u16,
    pub mods: Mods,
    /// When it was played: Windows ticks (100 ns since 0001-01-01), within osrparse's range.
    pub timestamp_ticks: i64,
    /// Play frames, as osrparse's `replay_data` holds them (without the seed frame and the
    /// dropped (256, -500) frames at the start).
    pub frame_count: u64,
    /// Sum of the play frames' time deltas: the replay's length in the map's time.
    pub duration_ms: i64,
    /// Some play frame presses a key or moves the cursor.
    pub has_input: bool,
    /// 0 when the score was not submitted.
    pub online_score_id: i64,
}

/// A part of the replay file, named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    GameMode,
    GameVersion,
    BeatmapHash,
    PlayerName,
    ReplayHash,
    HitCounts,
    Score,
    MaxCombo,
    Perfect,
    Mods,
    LifeBar,
    Timestamp,
    FrameDataLength,
    FrameData,
    OnlineScoreId,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::GameMode => "the game mode",
            Self::GameVersion => "the game version",
            Self::BeatmapHash => "the beatmap hash",
            Self::PlayerName => "the player name",
            Self::ReplayHash => "the replay hash",
            Self::HitCounts => "the hit counts",
            Self::Score => "the score",
            Self::MaxCombo => "the max combo",
            Self::Perfect => "the perfect flag",
            Self::Mods => "the mods",
            Self::LifeBar => "the life bar graph",
            Self::Timestamp => "the timestamp",
            Self::FrameDataLength => "the frame data length",
            Self::FrameData => "the frame data",
            Self::OnlineScoreId => "the online score id",
        })
    }
}

/// What is wrong with a frame (`w|x|y|keys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameProblem {
    Time,
    MissingFields,
    Keys,
    X,
    Y,
}

impl fmt::Display for FrameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Time => "a time that is not an integer",
            Self::MissingFields => "fewer than four fields",
            Self::Keys => "keys that are not an integer",
            Self::X => "an invalid x value",
            Self::Y => "an invalid y value",
        })
    }
}

/// Why a replay was rejected; the message suits an API error's detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("replay file is empty")]
    Empty,
    #[error("replay truncated in {0}")]
    Truncated(Field),
    #[error("unknown game mode {0}")]
    UnknownGameMode(u8),
    #[error("{field} has an invalid string marker 0x{marker:02x}")]
    BadStringMarker { field: Field, marker: u8 },
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(Field),
    #[error("the life bar graph is malformed")]
    MalformedLifeBar,
    #[error("the timestamp is out of range")]
    TimestampOutOfRange,
    #[error("the compressed frame data is corrupt")]
    CorruptFrameData,
    #[error("the compressed frame data ends early")]
    FrameDataEndsEarly,
    #[error("the compressed frame data needs more than {} MiB to decompress", limit >> 20)]
    DecoderMemory { limit: u64 },
    #[error("the frame data exceeds {} MiB when decompressed", limit >> 20)]
    FrameDataTooLarge { limit: u64 },
    #[error("replay has more than {limit} frames")]
    TooManyFrames { limit: u64 },
    #[error("the frame data is not ASCII text")]
    FrameDataNotAscii,
    #[error("replay has no frames")]
    NoFrames,
    #[error("frame {index} is empty")]
    EmptyFrame { index: u64 },
    #[error("frame {index} has {problem}")]
    MalformedFrame { index: u64, problem: FrameProblem },
}

/// Checks that `bytes` is a replay osrparse 7.0.1 parses, within `limits`, and summarises it.
pub fn inspect(bytes: &[u8], limits: &ReplayLimits) -> Result<ReplaySummary, ReplayError> {
    if bytes.is_empty() {
        return Err(ReplayError::Empty);
    }
    let mut cursor = Cursor::new(bytes);
    let header = header::read_header(&mut cursor)?;
    // Both bounds checks come before the costly part, decompression.
    let block = header::frame_block(&mut cursor)?;
    let online_score_id = header::online_score_id(&mut cursor)?;
    let frames = decompress::decode_frames(block, header.mode, limits)?;
    let text = |s: Option<&str>| s.unwrap_or_default().to_owned();
    Ok(ReplaySummary {
        mode: header.mode,
        version: header.version,
        beatmap_hash: text(header.beatmap_hash),
        player_name: text(header.player_name),
        replay_hash: text(header.replay_hash),
        counts: header.counts,
        score: header.score,
        max_combo: header.max_combo,
        mods: Mods(header.mods),
        timestamp_ticks: header.timestamp_ticks,
        frame_count: frames.frames,
        duration_ms: frames.duration_ms,
        has_input: frames.has_input,
        online_score_id,
    })
}
