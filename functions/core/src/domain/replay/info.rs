//! What a replay's header and frames say about the play, as a job shows it (`replay`): the
//! mods by their acronyms, the accuracy by osu!'s formula, the length at the mods' speed.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Serialize, Serializer};

use super::{Field, GameMode, HitCounts, ReplaySummary};
use crate::domain::hash::Md5;
use crate::domain::text;

/// The mods bit set, as the replay stores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Mods(pub u32);

/// The acronyms of osu!'s mod bits, bit 0 first.
const ACRONYMS: [&str; 31] = [
    "NF", "EZ", "TD", "HD", "HR", "SD", "DT", "RX", "HT", "NC", "FL", "AT", "SO", "AP", "PF", "4K",
    "5K", "6K", "7K", "8K", "FI", "RD", "CN", "TP", "9K", "CO", "1K", "3K", "2K", "V2", "MR",
];

impl Mods {
    const DOUBLE_TIME: u32 = 1 << 6;
    const HALF_TIME: u32 = 1 << 8;
    const NIGHTCORE: u32 = 1 << 9;
    const AUTOPLAY: u32 = 1 << 11;
    const SUDDEN_DEATH: u32 = 1 << 5;
    const PERFECT: u32 = 1 << 14;
    const CINEMA: u32 = 1 << 22;

    fn has(self, bits: u32) -> bool {
        self.0 & bits != 0
    }

    /// The acronyms, in bit order. Nightcore and Perfect are stored with the mod they extend
    /// (DT, SD) also set; as in osu!, only the extension is named.
    pub fn acronyms(self) -> Vec<&'static str> {
        let implied = match (self.has(Self::NIGHTCORE), self.has(Self::PERFECT)) {
            (true, true) => Self::DOUBLE_TIME | Self::SUDDEN_DEATH,
            (true, false) => Self::DOUBLE_TIME,
            (false, true) => Self::SUDDEN_DEATH,
            (false, false) => 0,
        };
        let shown = self.0 & !implied;
        ACRONYMS
            .iter()
            .enumerate()
            .filter(|(bit, _)| shown & (1 << bit) != 0)
            .map(|(_, acronym)| *acronym)
            .collect()
    }

    /// A play of the game, not the game playing itself: Autoplay, or Cinema (Autoplay
    /// without the interface).
    pub fn is_autoplay(self) -> bool {
        self.has(Self::AUTOPLAY | Self::CINEMA)
    }

    /// The length in real time of `map_ms` of the map's time: DT and NC play at 1.5×, HT at
    /// 0.75×. A negative total counts as nothing.
    pub fn real_time_ms(self, map_ms: i64) -> i64 {
        let map_ms = map_ms.max(0);
        if self.has(Self::DOUBLE_TIME | Self::NIGHTCORE) {
            map_ms.saturating_mul(2) / 3
        } else if self.has(Self::HALF_TIME) {
            map_ms.saturating_mul(4) / 3
        } else {
            map_ms
        }
    }
}

/// The longest player name a job stores: the header's strings are as long as the file lets
/// them be, and a job's `replay` is read in every listing and indexed.
const MAX_PLAYER_CHARS: usize = 64;

/// The job's `replay`: what it renders, parsed once in the validation pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayInfo {
    /// The replay's player name as shown: without control or format characters (text.rs).
    pub player: String,
    pub beatmap_md5: Md5,
    /// Empty (`""`) when the file has none: the service needs only the beatmap's to render.
    #[serde(serialize_with = "md5_or_empty")]
    pub replay_md5: Option<Md5>,
    pub mode: &'static str,
    pub mods: Vec<&'static str>,
    pub score: u32,
    pub max_combo: u16,
    /// Percent, two decimals.
    pub accuracy: f64,
    pub count_300: u16,
    pub count_100: u16,
    pub count_50: u16,
    pub count_miss: u16,
    /// RFC 3339, UTC.
    pub played_at: String,
    /// The play's length in real time (at the mods' speed).
    pub length_ms: i64,
    /// The osu! score id; `None` when the score was not submitted (stored as 0).
    pub online_id: Option<i64>,
}

impl ReplaySummary {
    /// The play's length in real time: its frames' total at the mods' speed.
    pub fn length_ms(&self) -> i64 {
        self.mods.real_time_ms(self.duration_ms)
    }

    /// What the job shows of the replay; refused when a hash is not an MD5 (osrparse reads any
    /// text there, osu! writes 32 hex digits): the hashes are sent on to the workers as they
    /// are. An empty replay hash is kept empty: a file may lack it, and nothing needs it.
    pub fn info(&self) -> Result<ReplayInfo, NotMd5> {
        let beatmap_md5 = Md5::parse(&self.beatmap_hash).map_err(|_| NotMd5(Field::BeatmapHash))?;
        let replay_md5 = match self.replay_hash.as_str() {
            "" => None,
            hash => Some(Md5::parse(hash).map_err(|_| NotMd5(Field::ReplayHash))?),
        };
        let counts = self.counts;
        Ok(ReplayInfo {
            player: text::shown(&self.player_name, MAX_PLAYER_CHARS),
            beatmap_md5,
            replay_md5,
            mode: self.mode.as_str(),
            mods: self.mods.acronyms(),
            score: self.score,
            max_combo: self.max_combo,
            accuracy: accuracy(self.mode, &counts),
            count_300: counts.count_300,
            count_100: counts.count_100,
            count_50: counts.count_50,
            count_miss: counts.count_miss,
            played_at: played_at(self.timestamp_ticks)
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            length_ms: self.length_ms(),
            online_id: Some(self.online_score_id).filter(|id| *id != 0),
        })
    }
}

/// A hash of the replay's header that is not an MD5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not an MD5 (32 hexadecimal digits, as osu! writes it)")]
pub struct NotMd5(pub Field);

fn md5_or_empty<S: Serializer>(md5: &Option<Md5>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(md5.as_ref().map_or("", Md5::as_str))
}

/// osu!'s accuracy of each mode, in percent rounded to two decimals; 100 with no judgements.
pub fn accuracy(mode: GameMode, counts: &HitCounts) -> f64 {
    let [n300, n100, n50, geki, katu, miss] = [
        counts.count_300,
        counts.count_100,
        counts.count_50,
        counts.count_geki,
        counts.count_katu,
        counts.count_miss,
    ]
    .map(f64::from);
    let (points, max) = match mode {
        GameMode::Std => (
            300.0 * n300 + 100.0 * n100 + 50.0 * n50,
            300.0 * (n300 + n100 + n50 + miss),
        ),
        GameMode::Taiko => (n300 + 0.5 * n100, n300 + n100 + miss),
        GameMode::Catch => (n300 + n100 + n50, n300 + n100 + n50 + katu + miss),
        GameMode::Mania => (
            300.0 * (n300 + geki) + 200.0 * katu + 100.0 * n100 + 50.0 * n50,
            300.0 * (n300 + geki + katu + n100 + n50 + miss),
        ),
    };
    if max == 0.0 {
        return 100.0;
    }
    (points / max * 10_000.0).round() / 100.0
}

/// The time of Windows `ticks` (100 ns since 0001-01-01), rounded to the microsecond half to
/// even, as osrparse's `timedelta(microseconds=ticks / 10)` rounds it.
pub fn played_at(ticks: i64) -> DateTime<Utc> {
    let (mut micros, rest) = (ticks.div_euclid(10), ticks.rem_euclid(10));
    if rest > 5 || (rest == 5 && micros % 2 != 0) {
        micros += 1;
    }
    let epoch = NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .unwrap_or_default();
    epoch
        .checked_add_signed(chrono::Duration::microseconds(micros))
        .unwrap_or(epoch)
        .and_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mods_are_named_in_bit_order_with_their_extensions_only() {
        assert_eq!(Mods(0).acronyms(), Vec::<&str>::new());
        assert_eq!(Mods(8 | 64).acronyms(), ["HD", "DT"]);
        assert_eq!(Mods(8 | 64 | 512).acronyms(), ["HD", "NC"]);
        assert_eq!(Mods(32 | 16384).acronyms(), ["PF"]);
        assert_eq!(Mods(1 | 2 | 1024).acronyms(), ["NF", "EZ", "FL"]);
        assert_eq!(Mods(1 << 30).acronyms(), ["MR"]);
        assert!(Mods(2048).is_autoplay());
        assert!(Mods(1 << 22).is_autoplay());
        assert!(!Mods(8 | 64).is_autoplay());
    }

    fn hashed(beatmap_hash: &str, replay_hash: &str) -> ReplaySummary {
        ReplaySummary {
            mode: GameMode::Std,
            version: 20_240_123,
            beatmap_hash: beatmap_hash.into(),
            player_name: "\u{202e}Mr\u{200b}ekk\0".into(),
            replay_hash: replay_hash.into(),
            counts: HitCounts::default(),
            score: 0,
            max_combo: 0,
            mods: Mods(0),
            timestamp_ticks: 0,
            frame_count: 1,
            duration_ms: 0,
            has_input: true,
            online_score_id: 0,
        }
    }

    #[test]
    fn the_player_is_shown_without_control_or_format_characters() {
        let info = hashed(&"ab".repeat(16), "").info().unwrap();
        assert_eq!(info.player, "Mrekk");
    }

    #[test]
    fn hashes_are_md5s_kept_lowercase_and_a_missing_replay_hash_is_empty() {
        let info = hashed(&"AB".repeat(16), &"Cd".repeat(16)).info().unwrap();
        assert_eq!(info.beatmap_md5.as_str(), "ab".repeat(16));
        let shown = serde_json::to_value(&info).unwrap();
        assert_eq!(shown["beatmap_md5"], "ab".repeat(16));
        assert_eq!(shown["replay_md5"], "cd".repeat(16));
        let unhashed = hashed(&"ab".repeat(16), "").info().unwrap();
        assert_eq!(serde_json::to_value(&unhashed).unwrap()["replay_md5"], "");
        for hostile in ["../../../../etc/passwd", "x' OR '1'='1", ""] {
            assert_eq!(
                hashed(hostile, &"cd".repeat(16)).info(),
                Err(NotMd5(Field::BeatmapHash)),
                "{hostile:?}"
            );
            if !hostile.is_empty() {
                assert_eq!(
                    hashed(&"ab".repeat(16), hostile).info(),
                    Err(NotMd5(Field::ReplayHash))
                );
            }
        }
    }

    #[test]
    fn length_is_real_time_at_the_mods_speed() {
        assert_eq!(Mods(0).real_time_ms(900_000), 900_000);
        assert_eq!(Mods(64).real_time_ms(900_000), 600_000);
        assert_eq!(Mods(64 | 512).real_time_ms(900_000), 600_000);
        assert_eq!(Mods(256).real_time_ms(900_000), 1_200_000);
        assert_eq!(Mods(64).real_time_ms(-5), 0);
        assert_eq!(Mods(256).real_time_ms(i64::MAX), i64::MAX / 3);
    }

    #[test]
    fn accuracy_follows_each_modes_formula() {
        let counts = HitCounts {
            count_300: 90,
            count_100: 6,
            count_50: 2,
            count_geki: 10,
            count_katu: 4,
            count_miss: 2,
        };
        // (27000 + 600 + 100) / 30000
        assert_eq!(accuracy(GameMode::Std, &counts), 92.33);
        // (90 + 3) / 98
        assert_eq!(accuracy(GameMode::Taiko, &counts), 94.9);
        // 98 / 104
        assert_eq!(accuracy(GameMode::Catch, &counts), 94.23);
        // (30000 + 800 + 600 + 100) / (300 * 114)
        assert_eq!(accuracy(GameMode::Mania, &counts), 92.11);
        assert_eq!(accuracy(GameMode::Std, &HitCounts::default()), 100.0);
    }

    #[test]
    fn played_at_is_the_tick_time_rounded_as_osrparse_rounds() {
        // 2024-01-23T12:34:56Z: 638416592960000000 ticks.
        assert_eq!(
            played_at(638_416_100_960_000_000).to_rfc3339(),
            "2024-01-23T12:34:56+00:00"
        );
        assert_eq!(played_at(-5).to_rfc3339(), "0001-01-01T00:00:00+00:00");
        assert_eq!(played_at(15).timestamp_subsec_micros(), 2);
        assert_eq!(played_at(25).timestamp_subsec_micros(), 2);
        assert_eq!(
            played_at(3_155_378_975_999_999_679).to_rfc3339(),
            "9999-12-31T23:59:59.999968+00:00"
        );
    }
}
