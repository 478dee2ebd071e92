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
        // Also o!rdr's spellings (width x height); its 480 and 540 lines are not rendered here.
        match value.to_ascii_lowercase().as_str() {
            "720p" | "1280x720" => Ok(Self::Hd720),
            "1080p" | "1920x1080" => Ok(Self::Hd1080),
            "1440p" | "2560x1440" => Ok(Self::Qhd1440),
            "4k" | "2160p" | "3840x2160" => Ok(Self::Uhd4k),
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

/// A dim or a volume: whole percent, 0 to 100, as o!rdr takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Percent(u8);

impl Percent {
    pub fn get(self) -> u8 {
        self.0
    }
}

/// The cursor's size, a multiplier from 0.5 to 2 (o!rdr's range).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct CursorSize(f64);

impl CursorSize {
    pub const MIN: f64 = 0.5;
    pub const MAX: f64 = 2.0;
}

/// What an option takes, with its default: what the README's table and the spec show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OptionKind {
    Skin,
    Resolution,
    Bool(bool),
    Percent(u8),
    CursorSize(f64),
}

/// A render option as a client names it: ours (snake_case) and o!rdr's (camelCase), both
/// accepted in the form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptionSpec {
    pub name: &'static str,
    pub ordr_name: &'static str,
    pub kind: OptionKind,
    pub description: &'static str,
}

/// A form value of one kind of option, read with the field it came in (its error names it).
trait OptionValue: Sized {
    fn read(field: &'static str, value: &str) -> Result<Self, FieldError>;
}

/// An option's kind with its default, as the constant table holds it.
macro_rules! option_kind {
    (bool, $default:expr) => {
        OptionKind::Bool($default)
    };
    ($kind:ident, $default:expr) => {
        OptionKind::$kind($default)
    };
}

/// An option's default value.
macro_rules! option_default {
    (bool, $default:expr) => {
        $default
    };
    ($kind:ident, $default:expr) => {
        $kind($default)
    };
}

impl OptionValue for bool {
    fn read(field: &'static str, value: &str) -> Result<Self, FieldError> {
        parse_bool(field, value)
    }
}

impl OptionValue for Percent {
    fn read(field: &'static str, value: &str) -> Result<Self, FieldError> {
        value
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|percent| *percent <= 100)
            .map(Self)
            .ok_or_else(|| FieldError::new(field, "must be a whole number from 0 to 100"))
    }
}

impl OptionValue for CursorSize {
    fn read(field: &'static str, value: &str) -> Result<Self, FieldError> {
        value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|size| (Self::MIN..=Self::MAX).contains(size))
            .map(Self)
            .ok_or_else(|| FieldError::new(field, "must be a number from 0.5 to 2"))
    }
}

/// Declares the danser options besides the skin and the resolution: the struct's fields, their
/// defaults, both names each is accepted under, and how each is read. One line per option, so
/// the form, the job's `config`, the README's table and the spec cannot list different ones.
macro_rules! render_options {
    ($( $(#[doc = $doc:literal])+ $field:ident: $ty:ident = $default:expr, $ordr:literal; )*) => {
        /// The render settings stored with a job (its `config`) and handed to the workers:
        /// o!rdr's render options (rosu-render's `RenderOptions`), under their snake_case names.
        #[derive(Debug, Clone, PartialEq)]
        pub struct RenderOptions {
            pub skin: SkinName,
            pub resolution: Resolution,
            $( $(#[doc = $doc])+ pub $field: $ty, )*
        }

        impl Default for RenderOptions {
            fn default() -> Self {
                Self {
                    skin: SkinName::default(),
                    resolution: Resolution::default(),
                    $( $field: option_default!($ty, $default), )*
                }
            }
        }

        impl RenderOptions {
            /// Every option, in the order the README and the spec list them.
            pub const SPECS: &'static [OptionSpec] = &[
                OptionSpec {
                    name: "skin",
                    ordr_name: "skin",
                    kind: OptionKind::Skin,
                    description: "The skin: `Default`, or the name of one uploaded with `POST /v1/skins/upload`.",
                },
                OptionSpec {
                    name: "resolution",
                    ordr_name: "resolution",
                    kind: OptionKind::Resolution,
                    description: "720p, 1080p, 1440p or 4k (also o!rdr's 1280x720 and 1920x1080, and 2560x1440, 3840x2160, 2160p); without it, 1080p or the highest the client may ask for, when lower.",
                },
                $( OptionSpec {
                    name: stringify!($field),
                    ordr_name: $ordr,
                    kind: option_kind!($ty, $default),
                    description: concat!($($doc),+),
                }, )*
            ];

            /// Sets the option named `name` (either spelling) from a form value; `None` when
            /// no option has that name.
            fn set_named(&mut self, name: &str, value: &str) -> Option<Result<(), FieldError>> {
                let set = match name {
                    "skin" => SkinName::parse(value).map(|skin| self.skin = skin),
                    "resolution" => Resolution::parse(value.trim()).map(|r| self.resolution = r),
                    $( stringify!($field) => <$ty as OptionValue>::read(stringify!($field), value)
                        .map(|v| self.$field = v),
                       $ordr => <$ty as OptionValue>::read($ordr, value).map(|v| self.$field = v), )*
                    _ => return None,
                };
                Some(set)
            }
        }

        impl Serialize for RenderOptions {
            /// Every option under our name, then the names they had before o!rdr's (one
            /// release, `LEGACY_NAMES`), so a reader or a worker of the last release reads on.
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                map.serialize_entry("skin", &self.skin)?;
                map.serialize_entry("resolution", &self.resolution)?;
                $( map.serialize_entry(stringify!($field), &self.$field)?; )*
                map.serialize_entry("bg_dim", &(f64::from(self.in_game_bg_dim.get()) / 100.0))?;
                for (old, bool_now) in self.legacy_flags() {
                    map.serialize_entry(old, &bool_now)?;
                }
                map.end()
            }
        }
    };
}

render_options! {
    /// Overall volume, percent.
    global_volume: Percent = 50, "globalVolume";
    /// Music volume, percent.
    music_volume: Percent = 50, "musicVolume";
    /// Hitsound volume, percent.
    hitsound_volume: Percent = 50, "hitsoundVolume";
    /// The hit error meter.
    show_hit_error_meter: bool = true, "showHitErrorMeter";
    /// The unstable rate (with the hit error meter).
    show_unstable_rate: bool = true, "showUnstableRate";
    /// The score.
    show_score: bool = true, "showScore";
    /// The HP bar.
    show_hp_bar: bool = true, "showHPBar";
    /// The combo counter.
    show_combo_counter: bool = true, "showComboCounter";
    /// The PP counter.
    show_pp_counter: bool = true, "showPPCounter";
    /// The scoreboard (the beatmap's leaderboard, read from osu!).
    show_scoreboard: bool = true, "showScoreboard";
    /// The playfield's borders.
    show_borders: bool = true, "showBorders";
    /// The mods played with.
    show_mods: bool = true, "showMods";
    /// The result screen at the end.
    show_result_screen: bool = true, "showResultScreen";
    /// The skin's cursor (else danser's).
    use_skin_cursor: bool = true, "useSkinCursor";
    /// The skin's combo colours.
    use_skin_colors: bool = false, "useSkinColors";
    /// The skin's hitsounds (else the beatmap's).
    use_skin_hitsounds: bool = true, "useSkinHitsounds";
    /// The beatmap's combo colours (over the skin's).
    use_beatmap_colors: bool = true, "useBeatmapColors";
    /// Scale the cursor to the circle size.
    cursor_scale_to_cs: bool = false, "cursorScaleToCS";
    /// A rainbow cursor (with danser's cursor).
    cursor_rainbow: bool = false, "cursorRainbow";
    /// A glow on the cursor trail.
    cursor_trail_glow: bool = false, "cursorTrailGlow";
    /// Follow points between objects.
    draw_follow_points: bool = true, "drawFollowPoints";
    /// Objects scale to the beat.
    scale_to_the_beat: bool = false, "scaleToTheBeat";
    /// Merge sliders.
    slider_merge: bool = false, "sliderMerge";
    /// Rainbow objects (over the skin's and the beatmap's colours).
    objects_rainbow: bool = false, "objectsRainbow";
    /// Objects flash to the beat.
    objects_flash_to_the_beat: bool = false, "objectsFlashToTheBeat";
    /// Slider bodies in the hit circles' colour.
    use_hit_circle_color: bool = false, "useHitCircleColor";
    /// A 5-second seizure warning first.
    seizure_warning: bool = false, "seizureWarning";
    /// The beatmap's storyboard.
    load_storyboard: bool = false, "loadStoryboard";
    /// The beatmap's background video.
    load_video: bool = false, "loadVideo";
    /// Background dim in the intro, percent.
    intro_bg_dim: Percent = 0, "introBGDim";
    /// Background dim while playing, percent.
    in_game_bg_dim: Percent = 95, "inGameBGDim";
    /// Background dim in breaks, percent.
    break_bg_dim: Percent = 30, "breakBGDim";
    /// Background parallax.
    bg_parallax: bool = false, "BGParallax";
    /// danser's logo in the intro.
    show_danser_logo: bool = true, "showDanserLogo";
    /// Skip the intro.
    skip_intro: bool = true, "skip";
    /// Cursor ripples on key presses.
    cursor_ripples: bool = false, "cursorRipples";
    /// Cursor size, a multiplier from 0.5 to 2.
    cursor_size: CursorSize = 1.0, "cursorSize";
    /// The cursor trail.
    cursor_trail: bool = true, "cursorTrail";
    /// Combo numbers on objects.
    draw_combo_numbers: bool = true, "drawComboNumbers";
    /// Sliders snake in.
    slider_snaking_in: bool = true, "sliderSnakingIn";
    /// Sliders snake out.
    slider_snaking_out: bool = true, "sliderSnakingOut";
    /// A hit counter (100s, 50s, misses) under the PP counter.
    show_hit_counter: bool = true, "showHitCounter";
    /// The key overlay.
    show_key_overlay: bool = true, "showKeyOverlay";
    /// Players' avatars on the scoreboard (read from osu!).
    show_avatars_on_scoreboard: bool = false, "showAvatarsOnScoreboard";
    /// The aim error meter.
    show_aim_error_meter: bool = false, "showAimErrorMeter";
    /// Nightcore samples with the NC mod.
    play_nightcore_samples: bool = true, "playNightcoreSamples";
    /// The strain graph.
    show_strain_graph: bool = false, "showStrainGraph";
    /// Slider breaks in the hit counter.
    show_slider_breaks: bool = false, "showSliderBreaks";
    /// Render past a fail.
    ignore_fail: bool = false, "ignoreFail";
    /// 960 fps motion blur (frame blending: the costliest option).
    motion_blur_960fps: bool = false, "motionBlur960fps";
}

/// Deprecated option names, each with the option (o!rdr's, snake_case) it sets: accepted in the
/// form and shown in `config` for one release. `bg_dim` is a fraction (0 to 1) of `in_game_bg_dim`.
pub const LEGACY_NAMES: [(&str, &str); 8] = [
    ("bg_dim", "in_game_bg_dim"),
    ("motion_blur", "motion_blur_960fps"),
    ("storyboard", "load_storyboard"),
    ("video", "load_video"),
    ("snaking_in", "slider_snaking_in"),
    ("snaking_out", "slider_snaking_out"),
    ("hit_error_meter", "show_hit_error_meter"),
    ("key_overlay", "show_key_overlay"),
];

impl RenderOptions {
    /// Builds the options from the form's text fields (name, value), in form order. A field
    /// that names no option is ignored, as the FastAPI original does. Every bad field is
    /// reported, once each (its first error, under the name it was sent as), in form order.
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

    /// Whether `name` is an option's name: ours, o!rdr's, or a legacy one.
    pub fn names_option(name: &str) -> bool {
        Self::SPECS
            .iter()
            .any(|spec| spec.name == name || spec.ordr_name == name)
            || LEGACY_NAMES.iter().any(|(old, _)| *old == name)
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), FieldError> {
        if let Some(set) = self.set_named(name, value) {
            return set;
        }
        match LEGACY_NAMES.iter().find(|(old, _)| *old == name) {
            Some(("bg_dim", _)) => {
                self.in_game_bg_dim = parse_bg_dim(value)?;
                Ok(())
            }
            Some((old, now)) => {
                let flag = parse_bool(old, value)?;
                self.set_named(now, if flag { "true" } else { "false" })
                    .unwrap_or(Ok(()))
            }
            None => Ok(()),
        }
    }

    /// The legacy boolean names with their values (`LEGACY_NAMES` after `bg_dim`).
    fn legacy_flags(&self) -> [(&'static str, bool); 7] {
        [
            ("motion_blur", self.motion_blur_960fps),
            ("storyboard", self.load_storyboard),
            ("video", self.load_video),
            ("snaking_in", self.slider_snaking_in),
            ("snaking_out", self.slider_snaking_out),
            ("hit_error_meter", self.show_hit_error_meter),
            ("key_overlay", self.show_key_overlay),
        ]
    }
}

/// The legacy `bg_dim`, a fraction: the percent it rounds to.
fn parse_bg_dim(value: &str) -> Result<Percent, FieldError> {
    value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|dim| (0.0..=1.0).contains(dim))
        .map(|dim| Percent((dim * 100.0).round() as u8))
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
            ("in_game_bg_dim", "50"),
            ("load_video", "true"),
            ("cursor_size", "1.5"),
            ("unknown", "whatever"),
        ])
        .unwrap();
        assert_eq!(options.skin.as_str(), "Cool Skin");
        assert_eq!(options.resolution, Resolution::Uhd4k);
        assert_eq!(options.in_game_bg_dim, Percent(50));
        assert!(options.load_video);
        assert_eq!(options.cursor_size, CursorSize(1.5));

        for (field, value) in [
            ("in_game_bg_dim", "101"),
            ("music_volume", "-1"),
            ("music_volume", "50.5"),
            ("cursor_size", "0.4"),
            ("cursor_size", "NaN"),
            ("cursorSize", "3"),
            ("bg_dim", "1.5"),
            ("bg_dim", "NaN"),
            ("resolution", "8k"),
            ("resolution", "720x480"),
            ("motion_blur_960fps", "maybe"),
            ("showPPCounter", "maybe"),
            ("skin", "bad/skin"),
        ] {
            let errors = RenderOptions::from_fields([(field, value)]).unwrap_err();
            assert_eq!(errors.len(), 1, "{field}={value}");
            assert_eq!(errors[0].field, field, "the error names the field as sent");
        }
    }

    /// Each option is read under our name and o!rdr's, to the same value, and every default is
    /// o!rdr's but the resolution's and the in-game dim's (ours, as before).
    #[test]
    fn each_option_takes_both_names() {
        for spec in RenderOptions::SPECS {
            let value = match spec.kind {
                OptionKind::Skin => "Other",
                OptionKind::Resolution => "1280x720",
                OptionKind::Bool(default) => ["true", "false"][usize::from(default)],
                OptionKind::Percent(_) => "42",
                OptionKind::CursorSize(_) => "0.75",
            };
            let ours = RenderOptions::from_fields([(spec.name, value)]).unwrap();
            let theirs = RenderOptions::from_fields([(spec.ordr_name, value)]).unwrap();
            assert_eq!(ours, theirs, "{}", spec.name);
            assert_ne!(
                ours,
                RenderOptions::default(),
                "{} changed nothing",
                spec.name
            );
            let shown = serde_json::to_value(&ours).unwrap();
            let default = serde_json::to_value(RenderOptions::default()).unwrap();
            assert_ne!(shown[spec.name], default[spec.name], "{}", spec.name);
        }
        let names: std::collections::BTreeSet<_> =
            RenderOptions::SPECS.iter().map(|spec| spec.name).collect();
        assert_eq!(names.len(), RenderOptions::SPECS.len());
        assert_eq!(
            RenderOptions::SPECS.len(),
            52,
            "o!rdr's 50, motion blur, the skin"
        );
    }

    /// The old names are read as the new ones and shown beside them for one release.
    #[test]
    fn legacy_names_read_and_show() {
        let default = serde_json::to_value(RenderOptions::default()).unwrap();
        for (old, now) in LEGACY_NAMES {
            let flipped = default[now] != true;
            let value = match old {
                "bg_dim" => "0.42",
                _ if flipped => "true",
                _ => "false",
            };
            let options = RenderOptions::from_fields([(old, value)]).unwrap();
            let shown = serde_json::to_value(&options).unwrap();
            assert_ne!(options, RenderOptions::default(), "{old}");
            if old == "bg_dim" {
                assert_eq!(shown["in_game_bg_dim"], 42);
                assert_eq!(shown["bg_dim"], 0.42);
            } else {
                let renamed = RenderOptions::from_fields([(now, value)]).unwrap();
                assert_eq!(options, renamed, "{old} is {now}");
                assert_eq!(shown[old], flipped);
                assert_eq!(shown[now], flipped);
            }
        }
        let legacy: Vec<_> = RenderOptions::default()
            .legacy_flags()
            .map(|(old, _)| old)
            .to_vec();
        let listed: Vec<_> = LEGACY_NAMES[1..].iter().map(|(old, _)| *old).collect();
        assert_eq!(legacy, listed);
    }

    /// A field sent twice counts as its last value, yet every value of it is checked.
    #[test]
    fn an_option_sent_twice_is_its_last_and_each_value_must_be_valid() {
        let options =
            RenderOptions::from_fields([("resolution", "720p"), ("resolution", "4k")]).unwrap();
        assert_eq!(options.resolution, Resolution::Uhd4k);
        let errors = RenderOptions::from_fields([("bg_dim", "2"), ("bg_dim", "0.5")]).unwrap_err();
        assert_eq!(errors[0].field, "bg_dim");
        let mixed =
            RenderOptions::from_fields([("inGameBGDim", "10"), ("in_game_bg_dim", "20")]).unwrap();
        assert_eq!(mixed.in_game_bg_dim, Percent(20));
    }

    #[test]
    fn every_bad_field_is_reported_once_in_form_order() {
        let errors = RenderOptions::from_fields([
            ("video", "maybe"),
            ("skin", "Fine"),
            ("globalVolume", "200"),
            ("video", "perhaps"),
            ("resolution", "8k"),
        ])
        .unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, ["video", "globalVolume", "resolution"]);
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
        assert_eq!(Resolution::parse("1280x720"), Ok(Resolution::Hd720));
        assert_eq!(Resolution::parse("1920X1080"), Ok(Resolution::Hd1080));
        assert!(Resolution::parse("960x540").is_err());
    }
}
