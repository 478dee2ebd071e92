//! Text a client wrote that the service shows or sends on to others (a replay's player name, in
//! job reads, listings, the workers' queue message and callbacks), and the form in which player
//! bans compare names.

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;
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

/// What two names that read alike have in common: the text without hidden characters, in NFKC
/// (compatibility forms: full-width `Ｃ`, ligatures, superscripts), case-folded (Unicode's full
/// folding, not `to_lowercase`: that one writes a final sigma `ς`, and keeps `ß`), trimmed, then
/// UTS #39's confusable skeleton (`unicode-security`: Cyrillic `С` for Latin `C`, and the
/// default-ignorable code points left out). Names with one skeleton are one name to a ban.
pub fn skeleton(text: &str) -> String {
    let folded: String = text
        .chars()
        .filter(|c| !is_hidden(*c))
        .nfkc()
        .default_case_fold()
        .collect();
    unicode_security::skeleton(folded.trim()).collect()
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

    #[test]
    fn names_that_read_alike_have_one_skeleton() {
        let cookiezi = skeleton("Cookiezi");
        for alike in [
            "cookiezi",
            "COOKIEZI",
            " Cookiezi ",
            "Cookiezi\u{200b}",
            "\u{feff}Cookiezi",
            "C\u{200d}o\u{200c}okiezi",
            "\u{202e}Cookiezi\u{202c}",
            "\u{421}ookiezi",       // Cyrillic capital Es
            "\u{441}\u{43e}okiezi", // Cyrillic small Es and O
            "\u{ff23}ookiezi",      // full-width C
            "Cook\u{456}ez\u{456}", // Ukrainian i
        ] {
            assert_eq!(skeleton(alike), cookiezi, "{alike:?}");
        }
        // Final sigma and ß: full case folding, not lowercasing.
        assert_eq!(skeleton("ΣΑΣ"), skeleton("σασ"));
        assert_eq!(skeleton("STRASSE"), skeleton("straße"));
        for other in ["Cookie", "Cookiezii", "WhiteCat", "Mrekk", "C ookiezi"] {
            assert_ne!(skeleton(other), cookiezi, "{other:?}");
        }
        assert_eq!(skeleton("\u{200b}\u{feff} "), "", "nothing visible");
    }
}
