//! Replays and the render forms that carry them.

use std::path::PathBuf;

use reqwest::multipart::{Form, Part};

/// The core's replay building blocks (its tests' own).
#[path = "../../../functions/core/tests/support/osr.rs"]
mod osr;

/// A replay of `tests/fixtures/replays`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/replays")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A render form with `replay` as `file_name` and the given text fields.
pub fn render_form(replay: Vec<u8>, file_name: &str, fields: &[(&str, &str)]) -> Form {
    fields.iter().fold(
        Form::new().part(
            "replay",
            Part::bytes(replay).file_name(file_name.to_owned()),
        ),
        |form, (name, value)| form.text(name.to_string(), value.to_string()),
    )
}

/// A render form with no `replay` file: a text field only.
pub fn form_without_replay() -> Form {
    Form::new().text("skin", "Default")
}

/// A valid replay no other call returns: `valid_0.osr` with a unique trailer (trailing bytes
/// are tolerated, as osrparse tolerates them). A client's second submission of one replay is a
/// `duplicate_replay` while the first is active, so independent submissions need their own.
pub fn unique_replay() -> Vec<u8> {
    let mut replay = fixture("valid_0.osr");
    replay.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    replay
}

/// A render form of a `unique_replay`.
pub fn valid_form() -> Form {
    render_form(unique_replay(), "play.osr", &[])
}

/// A multipart body with `replay` as the `replay` file, and its content type: for a request
/// built by hand rather than by `reqwest` (budget.rs calls the core directly with it).
pub fn multipart(replay: &[u8]) -> (String, Vec<u8>) {
    let boundary = "budget-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"replay\"; \
         filename=\"play.osr\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(replay);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A replay made to order: the header fields a job's `replay` shows and the frames its rules
/// read, laid out as osu! writes them (the frame block LZMA "alone" compressed).
#[derive(Debug, Clone)]
pub struct Play {
    pub mode: u8,
    pub beatmap_md5: String,
    pub player: String,
    pub replay_md5: String,
    /// 300s, 100s, 50s, gekis, katus, misses.
    pub counts: [u16; 6],
    pub score: u32,
    pub max_combo: u16,
    pub mods: u32,
    /// Windows ticks: 100 ns since 0001-01-01.
    pub ticks: i64,
    /// `w|x|y|keys,` frames.
    pub frames: String,
    pub online_id: i64,
}

impl Play {
    /// A standard-mode play of `frames` by `player`, no mods.
    pub fn new(player: &str, frames: String) -> Self {
        Self {
            mode: 0,
            beatmap_md5: "0123456789abcdef0123456789abcdef".into(),
            player: player.into(),
            replay_md5: "fedcba9876543210fedcba9876543210".into(),
            counts: [300, 20, 5, 40, 10, 3],
            score: 1_234_567,
            max_combo: 456,
            mods: 0,
            // 2024-01-23T12:34:56Z
            ticks: 638_416_100_960_000_000,
            frames,
            online_id: 0,
        }
    }

    pub fn osr(&self) -> Vec<u8> {
        let mut out = vec![self.mode];
        out.extend_from_slice(&20_240_123i32.to_le_bytes());
        for text in [&self.beatmap_md5, &self.player, &self.replay_md5] {
            out.extend(osr::osr_string(text.as_bytes()));
        }
        for count in self.counts {
            out.extend_from_slice(&count.to_le_bytes());
        }
        out.extend_from_slice(&self.score.to_le_bytes());
        out.extend_from_slice(&self.max_combo.to_le_bytes());
        out.push(0);
        out.extend_from_slice(&self.mods.to_le_bytes());
        out.extend(osr::osr_string(b""));
        out.extend_from_slice(&self.ticks.to_le_bytes());
        let block = osr::lzma_alone(self.frames.as_bytes());
        out.extend_from_slice(&(block.len() as u32).to_le_bytes());
        out.extend(block);
        out.extend_from_slice(&self.online_id.to_le_bytes());
        out
    }
}

/// `count` frames `delta_ms` apart, the cursor moving and a key pressed (a real play's input),
/// after osu!'s two leading frames and before its seed frame.
pub fn played_frames(count: usize, delta_ms: i64) -> String {
    let mut text = String::from("0|256|-500|0,-1|256|-500|0,");
    for n in 0..count {
        text += &format!("{delta_ms}|{}|{}|{},", n % 512, (n * 7) % 384, n % 2);
    }
    text + "-12345|0|0|1234567,"
}
