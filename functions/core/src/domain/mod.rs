//! Domain types, each validated once at the edge so the rest of the code can trust it.

pub mod archive;
pub mod callback;
pub mod caller;
pub mod client;
pub mod deadline;
pub mod entitlement;
pub mod events;
pub mod failure;
pub mod farm;
pub mod form;
pub mod hash;
pub mod job;
pub mod key;
pub mod page;
pub mod policy;
pub mod rate;
pub mod render;
pub mod replay;
pub mod sandbox;
pub mod text;

pub use client::{resolve_client_ip, ClientKey, TrustedProxies};
pub use job::{JobId, JobStatus};
pub use key::{ApiKey, KeyHash, KeyId, KeyKind, KeyLimits, KeyName, SigningSecret};
pub use rate::{RateDecision, RateLimit};
pub use render::{FieldError, RenderOptions, Resolution, SkinName};

/// `FromStr` and `Display` for an enum whose values are named: `$name::ALL` lists them and
/// `as_str` names each, so a value shows as its name and parses from it; any other text is
/// refused as an unknown `$what`.
macro_rules! named_values {
    ($name:ty, $what:literal) => {
        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL
                    .into_iter()
                    .find(|value| value.as_str() == s)
                    .ok_or_else(|| format!(concat!("unknown ", $what, " `{}`"), s))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use named_values;
