//! A listing's page size, as its query names it.

use std::fmt::Display;
use std::str::FromStr;

/// The `limit` query parameter: `default` when not sent, else a whole number from 1 to `max`;
/// the reason a bad one is refused, whether out of range or no number at all.
pub fn limit<T>(sent: Option<&str>, default: T, max: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + Display + Copy + From<u8>,
{
    let Some(sent) = sent else {
        return Ok(default);
    };
    sent.parse::<T>()
        .ok()
        .filter(|limit| (T::from(1)..=max).contains(limit))
        .ok_or_else(|| format!("must be 1 to {max}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_is_a_whole_number_in_range_or_the_default() {
        assert_eq!(limit(None, 20_i64, 100), Ok(20));
        assert_eq!(limit(Some("1"), 20_i64, 100), Ok(1));
        assert_eq!(limit(Some("100"), 20_i64, 100), Ok(100));
        for bad in ["0", "101", "-1", "ten", "", "1.5", " 5"] {
            assert_eq!(
                limit(Some(bad), 20_i64, 100),
                Err("must be 1 to 100".into()),
                "{bad:?}"
            );
        }
    }
}
