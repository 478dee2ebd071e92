//! What a user asks to render with: the skin and the danser options.

use serde::{Deserialize, Serialize};

/// A rejected form field: which one, and why, for a 422.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct FieldError {
    pub field: &'static str,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self {
            field,
            reason: reason.into(),
        }
    }
}

/// A skin name: `^[A-Za-z0-9_ -]{1,128}$` once trimmed of surrounding spaces (a name of spaces
/// only is no name). Also the S3 key stem of an uploaded skin, which is why nothing that could
/// walk a path (`.`, `/`, `\`) is allowed. Two names are the same skin when they match
/// ignoring case (the registry's folded name, `ports::skins::NameState`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SkinName(String);

impl SkinName {
    pub const MAX_LEN: usize = 128;

    pub fn parse(name: &str) -> Result<Self, FieldError> {
        let name = name.trim_matches(' ');
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | ' ' | '-');
        if name.is_empty() || name.len() > Self::MAX_LEN || !name.chars().all(allowed) {
            return Err(FieldError::new(
                "skin",
                "must be 1 to 128 characters of letters, digits, space, '_' or '-' (surrounding spaces are trimmed)",
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The built-in skin, in any case (names compare ignoring case): renderable without an
    /// upload, never in the registry.
    pub fn is_default(&self) -> bool {
        self.0.eq_ignore_ascii_case(DEFAULT_SKIN)
    }
}

/// The built-in skin's name: what a render uses when it names none.
pub const DEFAULT_SKIN: &str = "Default";

impl Default for SkinName {
    fn default() -> Self {
        Self(DEFAULT_SKIN.to_owned())
    }
}

impl TryFrom<String> for SkinName {
    type Error = FieldError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<SkinName> for String {
    fn from(name: SkinName) -> Self {
        name.0
    }
}

/// In ascending order: an entitlement's `max_resolution` compares by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resolution {
    #[serde(rename = "720p")]
    Hd720,
    #[default]
    #[serde(rename = "1080p")]
    Hd1080,
    #[serde(rename = "1440p")]
    Qhd1440,
    #[serde(rename = "4k")]
    Uhd4k,
}

impl Resolution {
    pub const NAMES: &str = "720p, 1080p, 1440p, 4k";

    pub fn parse(value: &str) -> Result<Self, FieldError> {
        match value.to_ascii_lowercase().as_str() {
            "720p" => Ok(Self::Hd720),
            "1080p" => Ok(Self::Hd1080),
            "1440p" => Ok(Self::Qhd1440),
            "4k" | "2160p" => Ok(Self::Uhd4k),
            _ => Err(FieldError::new(
                "resolution",
                format!("must be one of {}", Self::NAMES),
            )),
        }
    }

    /// The name `parse` and the job's `config` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hd720 => "720p",
            Self::Hd1080 => "1080p",
            Self::Qhd1440 => "1440p",
            Self::Uhd4k => "4k",
        }
    }
}

/// The render settings stored with a job (its `config`) and handed to the workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderOptions {
    pub skin: SkinName,
    pub resolution: Resolution,
    pub bg_dim: f64,
    pub motion_blur: bool,
    pub storyboard: bool,
    pub video: bool,
    pub snaking_in: bool,
    pub snaking_out: bool,
    pub hit_error_meter: bool,
    pub key_overlay: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            skin: SkinName::default(),
            resolution: Resolution::default(),
            bg_dim: 0.95,
            motion_blur: false,
            storyboard: false,
            video: false,
            snaking_in: true,
            snaking_out: true,
            hit_error_meter: true,
            key_overlay: true,
        }
    }
}

impl RenderOptions {
    /// Builds the options from the form's text fields (name, value), in form order.
    /// Unknown fields are ignored, as the FastAPI original does. Every bad field is reported,
    /// once each (its first error), in form order.
    pub fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, Vec<FieldError>> {
        let mut options = Self::default();
        let mut errors: Vec<FieldError> = Vec::new();
        for (name, value) in fields {
            if let Err(error) = options.set(name, value) {
                if errors.iter().all(|seen| seen.field != error.field) {
                    errors.push(error);
                }
            }
        }
        match errors.is_empty() {
            true => Ok(options),
            false => Err(errors),
        }
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), FieldError> {
        match name {
            "skin" => self.skin = SkinName::parse(value)?,
            "resolution" => self.resolution = Resolution::parse(value.trim())?,
            "bg_dim" => self.bg_dim = parse_bg_dim(value)?,
            "motion_blur" => self.motion_blur = parse_bool("motion_blur", value)?,
            "storyboard" => self.storyboard = parse_bool("storyboard", value)?,
            "video" => self.video = parse_bool("video", value)?,
            "snaking_in" => self.snaking_in = parse_bool("snaking_in", value)?,
            "snaking_out" => self.snaking_out = parse_bool("snaking_out", value)?,
            "hit_error_meter" => self.hit_error_meter = parse_bool("hit_error_meter", value)?,
            "key_overlay" => self.key_overlay = parse_bool("key_overlay", value)?,
            _ => {}
        }
        Ok(())
    }
}

fn parse_bg_dim(value: &str) -> Result<f64, FieldError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|dim| (0.0..=1.0).contains(dim))
        .ok_or_else(|| FieldError::new("bg_dim", "must be a number from 0 to 1"))
}

/// The spellings pydantic accepts for a form boolean, so clients of the original keep working.
fn parse_bool(field: &'static str, value: &str) -> Result<bool, FieldError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Ok(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Ok(false),
        _ => Err(FieldError::new(field, "must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skin_names_follow_the_pattern() {
        for ok in ["Default", "a", "my skin_v2-final", &"x".repeat(128)] {
            assert_eq!(SkinName::parse(ok).unwrap().as_str(), ok);
        }
        for (spaced, trimmed) in [(" name", "name"), ("name  ", "name"), ("  a b  ", "a b")] {
            assert_eq!(SkinName::parse(spaced).unwrap().as_str(), trimmed);
        }
        let padded = format!("  {}  ", "x".repeat(128));
        assert_eq!(SkinName::parse(&padded).unwrap().as_str().len(), 128);
        for bad in [
            "",
            " ",
            "    ",
            "\t",
            " a\t",
            "../etc",
            "a/b",
            "a\\b",
            "skin.osk",
            "é",
            &"x".repeat(129),
            "a\n",
        ] {
            assert!(SkinName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn options_default_and_validate() {
        assert_eq!(
            RenderOptions::from_fields([]).unwrap(),
            RenderOptions::default()
        );
        let options = RenderOptions::from_fields([
            ("skin", "Cool Skin"),
            ("resolution", "4K"),
            ("bg_dim", "0.5"),
            ("video", "true"),
            ("unknown", "whatever"),
        ])
        .unwrap();
        assert_eq!(options.skin.as_str(), "Cool Skin");
        assert_eq!(options.resolution, Resolution::Uhd4k);
        assert_eq!(options.bg_dim, 0.5);
        assert!(options.video);

        for (field, value) in [
            ("bg_dim", "1.5"),
            ("bg_dim", "NaN"),
            ("bg_dim", "-0.1"),
            ("resolution", "8k"),
            ("motion_blur", "maybe"),
            ("skin", "bad/skin"),
        ] {
            let errors = RenderOptions::from_fields([(field, value)]).unwrap_err();
            assert_eq!(errors.len(), 1);
            assert_eq!(errors[0].field, field);
        }
    }

    /// A field sent twice counts as its last value, yet every value of it is checked.
    #[test]
    fn an_option_sent_twice_is_its_last_and_each_value_must_be_valid() {
        let options =
            RenderOptions::from_fields([("resolution", "720p"), ("resolution", "4k")]).unwrap();
        assert_eq!(options.resolution, Resolution::Uhd4k);
        let errors = RenderOptions::from_fields([("bg_dim", "2"), ("bg_dim", "0.5")]).unwrap_err();
        assert_eq!(errors[0].field, "bg_dim");
    }

    #[test]
    fn every_bad_field_is_reported_once_in_form_order() {
        let errors = RenderOptions::from_fields([
            ("video", "maybe"),
            ("skin", "Fine"),
            ("bg_dim", "2"),
            ("video", "perhaps"),
            ("resolution", "8k"),
        ])
        .unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["video", "bg_dim", "resolution"]);
        assert_eq!(errors[0].to_string(), "video: must be true or false");
    }

    #[test]
    fn resolutions_are_ordered_and_named() {
        assert!(Resolution::Hd720 < Resolution::Hd1080);
        assert!(Resolution::Qhd1440 < Resolution::Uhd4k);
        for resolution in [
            Resolution::Hd720,
            Resolution::Hd1080,
            Resolution::Qhd1440,
            Resolution::Uhd4k,
        ] {
            assert_eq!(Resolution::parse(resolution.as_str()), Ok(resolution));
        }
    }
}
