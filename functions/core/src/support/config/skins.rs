//! Skin uploads: the largest sent directly and the largest sent through a presigned POST.

use super::{ConfigError, Env};

#[derive(Debug, Clone)]
pub struct Skins {
    /// Direct skin uploads up to this size (`MAX_SKIN_BYTES`); larger ones go through a
    /// presigned POST.
    pub max_direct_bytes: usize,
    /// The cap of a presigned skin upload (`MAX_SKIN_UPLOAD_BYTES`; S3 enforces it).
    pub max_presigned_bytes: usize,
}

impl Skins {
    pub(super) fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            max_direct_bytes: env.parse("MAX_SKIN_BYTES", 4 * 1024 * 1024)?,
            max_presigned_bytes: env.parse("MAX_SKIN_UPLOAD_BYTES", 200 * 1024 * 1024)?,
        })
    }
}
