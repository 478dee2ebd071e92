//! Domain types, each validated once at the edge so the rest of the code can trust it.

pub mod archive;
pub mod callback;
pub mod caller;
pub mod client;
pub mod deadline;
pub mod entitlement;
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
