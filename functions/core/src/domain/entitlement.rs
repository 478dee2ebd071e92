//! What a client may ask a render for (issue 21): the highest resolution, and the costly render
//! options it may not turn on. A key's come with its record; an anonymous client's are the
//! configured `ANONYMOUS_MAX_RESOLUTION` and `ANONYMOUS_DENY`. Checked with the form, before
//! any quota is spent: an option beyond them is a 403 `option_not_permitted` naming the field.

use std::fmt;
use std::str::FromStr;

use super::render::{RenderOptions, Resolution};

/// A render option that can be denied: the ones that cost the workers more when asked for.
/// The cheap ones that are on by default (snaking, the hit error meter, the key overlay) and
/// `bg_dim` cannot be: a client can always ask for them or turn them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeniableOption {
    /// `motion_blur=true`: frame blending multiplies the frames rendered.
    MotionBlur,
    /// `storyboard=true`.
    Storyboard,
    /// `video=true`: the beatmap's background video decoded alongside.
    Video,
    /// A `skin` other than the built-in `Default`.
    Skin,
}

impl DeniableOption {
    pub const ALL: [Self; 4] = [Self::MotionBlur, Self::Storyboard, Self::Video, Self::Skin];
    pub const NAMES: &str = "motion_blur, storyboard, video, skin";

    /// The form field the option is asked for with.
    pub fn field(self) -> &'static str {
        match self {
            Self::MotionBlur => "motion_blur",
            Self::Storyboard => "storyboard",
            Self::Video => "video",
            Self::Skin => "skin",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|option| option.field() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether `options` asks for it.
    fn asked(self, options: &RenderOptions) -> bool {
        match self {
            Self::MotionBlur => options.motion_blur,
            Self::Storyboard => options.storyboard,
            Self::Video => options.video,
            Self::Skin => !options.skin.is_default(),
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

impl Entitlements {
    /// The resolution of a render that asks for none: the service's default, or the highest
    /// permitted when that is lower (a client that never names a resolution is not refused for
    /// one it did not ask for).
    pub fn default_resolution(&self) -> Resolution {
        self.max_resolution
            .map_or(Resolution::default(), |max| max.min(Resolution::default()))
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
                reason: "not permitted for this client; leave it false".into(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::render::SkinName;

    #[test]
    fn deny_lists_parse_and_show_in_a_fixed_order() {
        let denied = DeniedOptions::parse(" video, motion_blur ,,skin").unwrap();
        assert_eq!(denied.to_string(), "motion_blur,video,skin");
        assert_eq!(DeniedOptions::parse(&denied.to_string()), Ok(denied));
        assert_eq!(DeniedOptions::parse(""), Ok(DeniedOptions::default()));
        assert_eq!(
            DeniedOptions::parse("video,snaking_in"),
            Err(UnknownOption("snaking_in".into()))
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
            motion_blur: true,
            storyboard: true,
            video: true,
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
        let with = |change: fn(&mut RenderOptions)| {
            let mut options = RenderOptions::default();
            change(&mut options);
            refused(options)
        };
        assert_eq!(with(|o| o.resolution = Resolution::Hd720), Ok(()));
        assert_eq!(with(|o| o.video = true), Ok(()));
        assert_eq!(with(|o| o.snaking_in = false), Ok(()));
        assert_eq!(
            with(|o| o.resolution = Resolution::Qhd1440),
            Err("resolution")
        );
        assert_eq!(with(|o| o.motion_blur = true), Err("motion_blur"));
        assert_eq!(
            with(|o| o.skin = SkinName::parse("Other").unwrap()),
            Err("skin")
        );
        let both = with(|o| {
            o.resolution = Resolution::Uhd4k;
            o.motion_blur = true;
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
}
