//! Text a client wrote that the service shows or sends on to others (a replay's player name, in
//! job reads, listings, the workers' queue message and callbacks).

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Whether `c` is left out of a text shown to others: a control character (General Category
/// Cc: NUL cannot be stored, and none belongs in a name), or a format character (Cf: bidi
/// overrides and isolates, zero-width space, joiner and non-joiner, the BOM, the soft hyphen,
/// tags), which is invisible and changes how the text around it reads or compares.
pub fn is_hidden(c: char) -> bool {
    c.is_control() || c.general_category() == GeneralCategory::Format
}

/// `text` without its hidden characters, cut to `max_chars`.
pub fn shown(text: &str, max_chars: usize) -> String {
    text.chars()
        .filter(|c| !is_hidden(*c))
        .take(max_chars)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_format_characters_are_stripped_and_the_text_bounded() {
        assert_eq!(shown("evil\0na\u{7}me\n", 64), "evilname");
        for hidden in [
            "\u{202e}",  // right-to-left override
            "\u{2066}",  // left-to-right isolate
            "\u{200b}",  // zero-width space
            "\u{200c}",  // zero-width non-joiner
            "\u{200d}",  // zero-width joiner
            "\u{feff}",  // byte order mark
            "\u{ad}",    // soft hyphen
            "\u{e0041}", // tag latin capital letter A
        ] {
            assert_eq!(
                shown(&format!("Cook{hidden}iezi"), 64),
                "Cookiezi",
                "{hidden:?}"
            );
        }
        // Letters of every script, emoji and markup are text: shown as sent, JSON-escaped.
        for kept in ["Éa日本🎵", "Сookiezi", "<b>Mrekk</b>", "x' OR '1'='1"] {
            assert_eq!(shown(kept, 64), kept);
        }
        assert_eq!(shown(&"x".repeat(300), 64).chars().count(), 64);
        assert_eq!(shown(&"\u{200b}x".repeat(100), 64), "x".repeat(64));
    }
}
