//! The two SHA-256 digests admission compares, typed so that one cannot be passed for the
//! other, and the MD5s a replay names its beatmap and itself by.

use std::fmt;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The SHA-256 of a replay file's bytes: a client's duplicate is the same replay, active again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplayHash([u8; 32]);

impl ReplayHash {
    pub fn of(replay: &[u8]) -> Self {
        Self(Sha256::digest(replay).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The SHA-256 of what makes two requests the same (idempotency): over the request's parts,
/// each length-prefixed so no two splits hash alike. Callers pass the file's bytes and the
/// parsed (normalized) fields, so the multipart framing — the boundary, the part order, the
/// file name — does not make two equal requests differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHash([u8; 32]);

impl RequestHash {
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// A hash as the store kept it; `None` if it is not 32 bytes.
    pub fn from_stored(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// An MD5 as osu! writes it in a replay (the beatmap file's, the replay's own): 32 hexadecimal
/// digits, kept lowercase so that one digest is one text wherever it is compared or sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Md5(String);

/// A text that is not 32 hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an MD5 (32 hexadecimal digits)")]
pub struct NotMd5;

impl Md5 {
    pub fn parse(text: &str) -> Result<Self, NotMd5> {
        match text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            true => Ok(Self(text.to_ascii_lowercase())),
            false => Err(NotMd5),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Md5 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_md5_is_32_hex_digits_kept_lowercase() {
        let upper = "0123456789ABCDEF0123456789abcdef";
        assert_eq!(
            Md5::parse(upper).map(|md5| md5.to_string()),
            Ok(upper.to_ascii_lowercase())
        );
        for bad in [
            "",
            "../../../../etc/passwd",
            "x' OR '1'='1",
            &"a".repeat(31),
            &"a".repeat(33),
            &"g".repeat(32),
            // 32 bytes, not 32 digits.
            "0123456789abcdef0123456789abcd\u{e9}",
            " 0123456789abcdef0123456789abcde",
        ] {
            assert_eq!(Md5::parse(bad), Err(NotMd5), "{bad:?}");
        }
    }

    #[test]
    fn parts_are_length_prefixed() {
        assert_ne!(
            RequestHash::of(&[b"ab", b"c"]),
            RequestHash::of(&[b"a", b"bc"])
        );
        assert_eq!(
            RequestHash::of(&[b"ab", b"c"]),
            RequestHash::of(&[b"ab", b"c"])
        );
    }

    #[test]
    fn a_stored_hash_round_trips_and_a_short_one_is_refused() {
        let hash = RequestHash::of(&[b"x"]);
        assert_eq!(RequestHash::from_stored(hash.as_bytes()), Some(hash));
        assert_eq!(RequestHash::from_stored(&[0; 31]), None);
    }
}
