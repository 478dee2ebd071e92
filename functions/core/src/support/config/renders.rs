//! What a render may ask for: the replay's size, mode and length, a failed replay's cooldown,
//! and an anonymous client's entitlements.

use std::str::FromStr;
use std::time::Duration;

use super::{ConfigError, Env};
use crate::domain::entitlement::{DeniedOptions, Entitlements};
use crate::domain::render::Resolution;
use crate::domain::replay::GameMode;

#[derive(Debug, Clone)]
pub struct Renders {
    /// The largest replay file accepted (`MAX_REPLAY_BYTES`).
    pub max_replay_bytes: usize,
    /// The game modes the render workers render (`RENDER_MODES`): a replay of another is 422
    /// `unsupported_mode`.
    pub modes: RenderModes,
    /// The longest play rendered, in real time (`MAX_REPLAY_LENGTH`); a key may have its own.
    pub max_replay_length: Duration,
    /// A replay whose render failed is refused for this long (`REPLAY_FAILURE_COOLDOWN`;
    /// zero: never refused).
    pub replay_failure_cooldown: Duration,
    /// What an anonymous client's renders may ask for (`ANONYMOUS_MAX_RESOLUTION`,
    /// `ANONYMOUS_DENY`); a key has its own.
    pub anonymous_entitlements: Entitlements,
}

impl Renders {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            max_replay_bytes: env.parse("MAX_REPLAY_BYTES", 4 * 1024 * 1024)?,
            modes: env.parse("RENDER_MODES", RenderModes(vec![GameMode::Std]))?,
            max_replay_length: env.secs("MAX_REPLAY_LENGTH", 900)?,
            replay_failure_cooldown: env.secs("REPLAY_FAILURE_COOLDOWN", 3600)?,
            anonymous_entitlements: Entitlements {
                max_resolution: env
                    .parse("ANONYMOUS_MAX_RESOLUTION", MaxResolution(None))?
                    .0,
                denied: env.parse("ANONYMOUS_DENY", DeniedOptions::default())?,
            },
        })
    }
}

/// `RENDER_MODES`: a comma-separated list of modes as osu!'s API names them, none twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderModes(Vec<GameMode>);

impl RenderModes {
    pub fn renders(&self, mode: GameMode) -> bool {
        self.0.contains(&mode)
    }

    /// The modes, as the configuration names them.
    pub fn names(&self) -> String {
        let names: Vec<_> = self.0.iter().map(|mode| mode.as_str()).collect();
        names.join(", ")
    }
}

impl FromStr for RenderModes {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut modes = Vec::new();
        for name in text.split(',').map(str::trim) {
            let mode: GameMode = name.parse()?;
            if modes.contains(&mode) {
                return Err(format!("`{name}` is listed twice"));
            }
            modes.push(mode);
        }
        Ok(Self(modes))
    }
}

/// `ANONYMOUS_MAX_RESOLUTION`: a resolution, or empty for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MaxResolution(Option<Resolution>);

impl FromStr for MaxResolution {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "" => Ok(Self(None)),
            name => Resolution::parse(name)
                .map(|resolution| Self(Some(resolution)))
                .map_err(|_| format!("expected one of {}, or empty", Resolution::NAMES)),
        }
    }
}
