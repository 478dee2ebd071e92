//! What a client may ask a render for: the highest resolution, and the costly render
//! options it may not turn on. A key's come with its record; an anonymous client's are the
//! configured `ANONYMOUS_MAX_RESOLUTION` and `ANONYMOUS_DENY`. Checked with the form, before
//! any quota is spent: an option beyond them is a 403 `option_not_permitted` naming the field.

use std::fmt;
use std::str::FromStr;

use super::render::{RenderOptions, Resolution, SkinName, LEGACY_NAMES};

/// A render option that can be denied: the ones that cost the farm more when asked for, in
/// frames or in reads from osu!. The cheap ones (volumes, dims, HUD toggles drawn from the
/// replay) cannot be: a client can always ask for them or turn them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeniableOption {
    /// `motion_blur_960fps=true`: frame blending multiplies the frames rendered.
    MotionBlur,
    /// `load_storyboard=true`.
    Storyboard,
    /// `load_video=true`: the beatmap's background video decoded alongside.
    Video,
    /// A `skin` other than the built-in `Default`.
    Skin,
    /// `show_scoreboard=true` (on by default): the beatmap's leaderboard read from osu!.
    Scoreboard,
    /// `show_avatars_on_scoreboard=true`: an avatar downloaded per player shown.
    Avatars,
}

impl DeniableOption {
    pub const ALL: [Self; 6] = [
        Self::MotionBlur,
        Self::Storyboard,
        Self::Video,
        Self::Skin,
        Self::Scoreboard,
        Self::Avatars,
    ];
    pub const NAMES: &str =
        "motion_blur_960fps, load_storyboard, load_video, skin, show_scoreboard, show_avatars_on_scoreboard";

    /// The option's name (the form field's, in snake_case).
    pub fn field(self) -> &'static str {
        match self {
            Self::MotionBlur => "motion_blur_960fps",
            Self::Storyboard => "load_storyboard",
            Self::Video => "load_video",
            Self::Skin => "skin",
            Self::Scoreboard => "show_scoreboard",
            Self::Avatars => "show_avatars_on_scoreboard",
        }
    }

    /// Every name the option is sent under: ours, o!rdr's and the legacy one (a deny list
    /// stored before the rename still reads).
    fn names(self) -> impl Iterator<Item = &'static str> {
        let field = self.field();
        let spec = RenderOptions::SPECS
            .iter()
            .find(move |spec| spec.name == field);
        let legacy = LEGACY_NAMES.iter().find(move |(_, now)| *now == field);
        [
            Some(field),
            spec.map(|spec| spec.ordr_name),
            legacy.map(|(old, _)| *old),
        ]
        .into_iter()
        .flatten()
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|option| option.names().any(|known| known == name))
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether `options` asks for it.
    fn asked(self, options: &RenderOptions) -> bool {
        match self {
            Self::MotionBlur => options.motion_blur_960fps,
            Self::Storyboard => options.load_storyboard,
            Self::Video => options.load_video,
            Self::Skin => !options.skin.is_default(),
            Self::Scoreboard => options.show_scoreboard,
            Self::Avatars => options.show_avatars_on_scoreboard,
        }
    }

    /// Turns it off: what a render that did not name it gets when it is denied.
    fn turn_off(self, options: &mut RenderOptions) {
        match self {
            Self::MotionBlur => options.motion_blur_960fps = false,
            Self::Storyboard => options.load_storyboard = false,
            Self::Video => options.load_video = false,
            Self::Skin => options.skin = SkinName::default(),
            Self::Scoreboard => options.show_scoreboard = false,
            Self::Avatars => options.show_avatars_on_scoreboard = false,
        }
    }
}

/// A set of denied options. Shown (and stored) as the comma-separated field names in
/// `DeniableOption::ALL`'s order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeniedOptions(u8);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an option that can be denied (one of {names})", names = DeniableOption::NAMES)]
pub struct UnknownOption(pub String);

impl DeniedOptions {
    /// `motion_blur,storyboard`: names separated by commas (spaces around them ignored); the
    /// empty text denies nothing.
    pub fn parse(list: &str) -> Result<Self, UnknownOption> {
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .try_fold(Self::default(), |denied, name| {
                DeniableOption::parse(name)
                    .map(|option| denied.with(option))
                    .ok_or_else(|| UnknownOption(name.to_owned()))
            })
    }

    pub fn with(self, option: DeniableOption) -> Self {
        Self(self.0 | option.bit())
    }

    pub fn contains(self, option: DeniableOption) -> bool {
        self.0 & option.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = DeniableOption> {
        DeniableOption::ALL
            .into_iter()
            .filter(move |option| self.contains(*option))
    }

    /// The field names, as the store and the admin answers hold them.
    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(DeniableOption::field).collect()
    }
}

impl FromStr for DeniedOptions {
    type Err = UnknownOption;

    fn from_str(list: &str) -> Result<Self, Self::Err> {
        Self::parse(list)
    }
}

impl fmt::Display for DeniedOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

/// What a client may ask a render for. The default allows everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entitlements {
    /// The highest `resolution`; `None`: any.
    pub max_resolution: Option<Resolution>,
    pub denied: DeniedOptions,
}

/// An option beyond the client's entitlements: which form field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct NotPermitted {
    pub field: &'static str,
    pub reason: String,
}

impl NotPermitted {
    /// Names the option as the form sent it (o!rdr's or a legacy name), when it did.
    pub fn as_sent(mut self, sent: impl Fn(&str) -> bool) -> Self {
        let named = DeniableOption::parse(self.field)
            .and_then(|option| option.names().find(|name| sent(name)));
        if let Some(name) = named {
            self.field = name;
        }
        self
    }
}

impl Entitlements {
    /// The resolution of a render that asks for none: the service's default, or the highest
    /// permitted when that is lower (a client that never names a resolution is not refused for
    /// one it did not ask for).
    pub fn default_resolution(&self) -> Resolution {
        self.max_resolution
            .map_or(Resolution::default(), |max| max.min(Resolution::default()))
    }

    /// Fits what a render did not name (`sent` says which names it did) to these
    /// entitlements: the default resolution within them, and a denied option that is on by
    /// default (`show_scoreboard`) off. A client is only refused for what it asked for.
    pub fn fit_unnamed(&self, options: &mut RenderOptions, sent: impl Fn(&str) -> bool) {
        if !sent("resolution") {
            options.resolution = self.default_resolution();
        }
        for option in self.denied.iter() {
            if !option.names().any(&sent) {
                option.turn_off(options);
            }
        }
    }

    /// Refuses the first option `options` asks for beyond these entitlements: the resolution,
    /// then the denied options in `DeniableOption::ALL`'s order.
    pub fn permit(&self, options: &RenderOptions) -> Result<(), NotPermitted> {
        if let Some(max) = self.max_resolution.filter(|max| options.resolution > *max) {
            return Err(NotPermitted {
                field: "resolution",
                reason: format!(
                    "{} is not permitted for this client; at most {} is",
                    options.resolution.as_str(),
                    max.as_str()
                ),
            });
        }
        match self.denied.iter().find(|option| option.asked(options)) {
            Some(DeniableOption::Skin) => Err(NotPermitted {
                field: "skin",
                reason: "only the built-in Default skin is permitted for this client".into(),
            }),
            Some(option) => Err(NotPermitted {
                field: option.field(),
                reason: "not permitted for this client; leave it false or out".into(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_lists_parse_and_show_in_a_fixed_order() {
        let denied = DeniedOptions::parse(" video, motion_blur ,,skin").unwrap();
        assert_eq!(denied.to_string(), "motion_blur_960fps,load_video,skin");
        assert_eq!(
            DeniedOptions::parse("loadVideo,showScoreboard"),
            DeniedOptions::parse("load_video,show_scoreboard")
        );
        assert_eq!(DeniedOptions::parse(&denied.to_string()), Ok(denied));
        assert_eq!(DeniedOptions::parse(""), Ok(DeniedOptions::default()));
        assert_eq!(
            DeniedOptions::parse("video,slider_snaking_in"),
            Err(UnknownOption("slider_snaking_in".into()))
        );
        for option in DeniableOption::ALL {
            assert!(DeniableOption::NAMES.contains(option.field()));
            assert_eq!(DeniableOption::parse(option.field()), Some(option));
        }
    }

    #[test]
    fn everything_is_permitted_by_default() {
        let options = RenderOptions {
            skin: SkinName::parse("Custom").unwrap(),
            resolution: Resolution::Uhd4k,
            motion_blur_960fps: true,
            load_storyboard: true,
            load_video: true,
            show_avatars_on_scoreboard: true,
            ..RenderOptions::default()
        };
        assert_eq!(Entitlements::default().permit(&options), Ok(()));
    }

    #[test]
    fn an_option_beyond_the_entitlements_is_named() {
        let entitlements = Entitlements {
            max_resolution: Some(Resolution::Hd1080),
            denied: DeniedOptions::parse("motion_blur,skin").unwrap(),
        };
        let refused = |options: RenderOptions| entitlements.permit(&options).map_err(|e| e.field);
        assert_eq!(refused(RenderOptions::default()), Ok(()));
        for option in DeniableOption::ALL {
            assert!(
                RenderOptions::SPECS
                    .iter()
                    .any(|spec| spec.name == option.field()),
                "{} is an option",
                option.field()
            );
        }
        let with = |change: fn(&mut RenderOptions)| {
            let mut options = RenderOptions::default();
            change(&mut options);
            refused(options)
        };
        assert_eq!(with(|o| o.resolution = Resolution::Hd720), Ok(()));
        assert_eq!(with(|o| o.load_video = true), Ok(()));
        assert_eq!(with(|o| o.slider_snaking_in = false), Ok(()));
        assert_eq!(
            with(|o| o.resolution = Resolution::Qhd1440),
            Err("resolution")
        );
        assert_eq!(
            with(|o| o.motion_blur_960fps = true),
            Err("motion_blur_960fps")
        );
        assert_eq!(
            with(|o| o.skin = SkinName::parse("Other").unwrap()),
            Err("skin")
        );
        let both = with(|o| {
            o.resolution = Resolution::Uhd4k;
            o.motion_blur_960fps = true;
        });
        assert_eq!(both, Err("resolution"), "the resolution is checked first");
    }

    #[test]
    fn an_unasked_resolution_is_the_default_within_the_entitlement() {
        let capped = |max| Entitlements {
            max_resolution: Some(max),
            ..Entitlements::default()
        };
        assert_eq!(
            Entitlements::default().default_resolution(),
            Resolution::Hd1080
        );
        assert_eq!(
            capped(Resolution::Hd720).default_resolution(),
            Resolution::Hd720
        );
        assert_eq!(
            capped(Resolution::Uhd4k).default_resolution(),
            Resolution::Hd1080
        );
    }

    /// A denied option a render did not name is turned off, not refused; one it named is kept
    /// (and refused by `permit`).
    #[test]
    fn an_unnamed_denied_option_is_turned_off() {
        let entitlements = Entitlements {
            max_resolution: Some(Resolution::Hd720),
            denied: DeniedOptions::parse("show_scoreboard,skin").unwrap(),
        };
        let mut options = RenderOptions::default();
        entitlements.fit_unnamed(&mut options, |_| false);
        assert!(!options.show_scoreboard);
        assert_eq!(options.resolution, Resolution::Hd720);
        assert_eq!(entitlements.permit(&options), Ok(()));

        let mut named = RenderOptions::from_fields([("showScoreboard", "true")]).unwrap();
        entitlements.fit_unnamed(&mut named, |name| name == "showScoreboard");
        assert!(named.show_scoreboard);
        let refused = entitlements.permit(&named).unwrap_err();
        assert_eq!(refused.field, "show_scoreboard");
        let refused = refused.as_sent(|name| name == "showScoreboard");
        assert_eq!(refused.field, "showScoreboard");
        assert!(refused.to_string().starts_with("showScoreboard: "));
    }
}
