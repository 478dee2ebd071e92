//! What Python's `int(text)` and `float(text)` accept, decided one byte at a time.
//!
//! osrparse turns every frame and life-bar field into a number with these two built-ins, so
//! their exact grammar is part of its verdict: surrounding whitespace, a `+` sign, single
//! underscores between digits, `1.`, `.5`, exponents, `inf`/`infinity`/`nan` in any case, and
//! the 4300-digit limit of `int()` (CPython's `sys.int_info.default_max_str_digits`). Feeding
//! bytes keeps fields of any length in constant memory.

/// CPython refuses to convert decimal strings with more digits than this (since 3.11).
const MAX_INT_DIGITS: u32 = 4300;

/// The significant digits kept to compute a float's exact value: any f64 rounding boundary
/// has at most 767 significant decimal digits, so a sticky digit after 800 rounds the same.
const MAX_SIGNIFICANT_DIGITS: usize = 800;

/// What `int()` and `float()` would have made of one field.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct NumberFacts {
    pub int_ok: bool,
    pub float_ok: bool,
    /// The integer, when `int_ok` and it fits an i64.
    pub int_value: Option<i64>,
    /// The float, when `float_ok` and the lexer was asked to compute it.
    pub float_value: Option<f64>,
}

/// Python's `Py_ISSPACE`: the whitespace `int()` and `float()` strip (ASCII only).
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IntState {
    Lead,
    Sign,
    Digits,
    Trail,
    Bad,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FloatState {
    Lead,
    Sign,
    IntDigits,
    /// A `.` with no digit before it: a digit must follow.
    LoneDot,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
    /// Part of `inf`, `infinity` or `nan`: `len` letters matched so far.
    Word {
        nan: bool,
        len: u8,
    },
    Trail,
    Bad,
}

impl FloatState {
    fn accepts(self) -> bool {
        match self {
            Self::IntDigits | Self::Fraction | Self::ExponentDigits | Self::Trail => true,
            Self::Word { nan, len } => len == 3 || (!nan && len == 8),
            _ => false,
        }
    }
}

/// Decimal digits of a float, enough to round it exactly like Python does.
#[derive(Clone, Debug, Default)]
struct DecimalValue {
    negative: bool,
    /// Significant digits (no leading zeros), at most `MAX_SIGNIFICANT_DIGITS`.
    digits: Vec<u8>,
    /// A non-zero digit was dropped after the kept ones.
    sticky: bool,
    /// Integer-part digits from the first significant one (the decimal point's position).
    int_digits: i64,
    /// Zeros between the point and the first significant digit, when the integer part is 0.
    fraction_zeros: i64,
    exponent_negative: bool,
    exponent: i64,
}

impl DecimalValue {
    fn reset(&mut self) {
        self.negative = false;
        self.digits.clear();
        self.sticky = false;
        self.int_digits = 0;
        self.fraction_zeros = 0;
        self.exponent_negative = false;
        self.exponent = 0;
    }

    fn push_mantissa_digit(&mut self, digit: u8, in_fraction: bool) {
        if self.digits.is_empty() && digit == b'0' {
            if in_fraction {
                self.fraction_zeros = self.fraction_zeros.saturating_add(1);
            }
            return;
        }
        if !in_fraction {
            self.int_digits = self.int_digits.saturating_add(1);
        }
        if self.digits.len() < MAX_SIGNIFICANT_DIGITS {
            self.digits.push(digit);
        } else if digit != b'0' {
            self.sticky = true;
        }
    }

    fn push_exponent_digit(&mut self, digit: u8) {
        // Far beyond f64's range: saturating keeps the result (inf or 0) unchanged.
        self.exponent = (self.exponent * 10 + i64::from(digit - b'0')).min(1_000_000_000);
    }

    fn value(&self) -> f64 {
        let magnitude = if self.digits.is_empty() {
            0.0
        } else {
            let point = if self.int_digits > 0 {
                self.int_digits
            } else {
                -self.fraction_zeros
            };
            let exponent = if self.exponent_negative {
                point.saturating_sub(self.exponent)
            } else {
                point.saturating_add(self.exponent)
            }
            .clamp(-100_000, 100_000);
            let mut text = String::with_capacity(self.digits.len() + 16);
            text.push_str("0.");
            text.extend(self.digits.iter().map(|&d| char::from(d)));
            if self.sticky {
                text.push('1');
            }
            text.push_str(&format!("e{exponent}"));
            // The text is digits and an exponent by construction, which Rust parses (correctly
            // rounded, as CPython's dtoa does); NaN can only mean a bug and compares unequal.
            text.parse::<f64>().unwrap_or(f64::NAN)
        };
        if self.negative {
            -magnitude
        } else {
            magnitude
        }
    }
}

/// Lexes one field for both `int()` and `float()` at once.
#[derive(Clone, Debug)]
pub(super) struct NumberLexer {
    int: IntState,
    float: FloatState,
    int_digits: u32,
    int_negative: bool,
    /// `None` once the integer no longer fits a u64.
    int_magnitude: Option<u64>,
    prev_digit: bool,
    after_underscore: bool,
    underscores_ok: bool,
    want_float_value: bool,
    decimal: DecimalValue,
    /// The value of `inf`/`infinity`/`nan` once whitespace followed it.
    word_value: Option<f64>,
}

impl NumberLexer {
    pub fn new() -> Self {
        Self {
            int: IntState::Lead,
            float: FloatState::Lead,
            int_digits: 0,
            int_negative: false,
            int_magnitude: Some(0),
            prev_digit: false,
            after_underscore: false,
            underscores_ok: true,
            want_float_value: false,
            decimal: DecimalValue::default(),
            word_value: None,
        }
    }

    /// Starts a new field; `want_float_value` asks for the float's value, not just validity.
    pub fn reset(&mut self, want_float_value: bool) {
        self.int = IntState::Lead;
        self.float = FloatState::Lead;
        self.int_digits = 0;
        self.int_negative = false;
        self.int_magnitude = Some(0);
        self.prev_digit = false;
        self.after_underscore = false;
        self.underscores_ok = true;
        self.want_float_value = want_float_value;
        self.decimal.reset();
        self.word_value = None;
    }

    pub fn push(&mut self, b: u8) {
        if b == b'_' {
            // Both built-ins allow an underscore only between two ASCII digits.
            self.underscores_ok &= self.prev_digit;
            self.prev_digit = false;
            self.after_underscore = true;
            return;
        }
        let digit = b.is_ascii_digit();
        self.underscores_ok &= digit || !self.after_underscore;
        self.after_underscore = false;
        self.prev_digit = digit;
        self.step_int(b);
        self.step_float(b);
    }

    /// Whether `int()` will reject this field whatever bytes follow.
    pub fn int_rejected(&self) -> bool {
        self.int == IntState::Bad || !self.underscores_ok || self.int_digits > MAX_INT_DIGITS
    }

    pub fn finish(&self) -> NumberFacts {
        let underscores_ok = self.underscores_ok && !self.after_underscore;
        let int_ok = underscores_ok
            && matches!(self.int, IntState::Digits | IntState::Trail)
            && self.int_digits <= MAX_INT_DIGITS;
        let float_ok = underscores_ok && self.float.accepts();
        let int_value = if int_ok {
            self.int_magnitude.and_then(|m| {
                let m = i128::from(m);
                i64::try_from(if self.int_negative { -m } else { m }).ok()
            })
        } else {
            None
        };
        let float_value = if float_ok && self.want_float_value {
            Some(match self.float {
                FloatState::Word { nan, .. } => self.word(nan),
                _ => self.word_value.unwrap_or_else(|| self.decimal.value()),
            })
        } else {
            None
        };
        NumberFacts {
            int_ok,
            float_ok,
            int_value,
            float_value,
        }
    }

    fn word(&self, nan: bool) -> f64 {
        match (nan, self.decimal.negative) {
            (true, _) => f64::NAN,
            (false, true) => f64::NEG_INFINITY,
            (false, false) => f64::INFINITY,
        }
    }

    fn step_int(&mut self, b: u8) {
        self.int = match (self.int, b) {
            (IntState::Lead, b) if is_space(b) => IntState::Lead,
            (IntState::Lead, b'+') => IntState::Sign,
            (IntState::Lead, b'-') => {
                self.int_negative = true;
                IntState::Sign
            }
            (IntState::Lead | IntState::Sign | IntState::Digits, b'0'..=b'9') => {
                self.int_digits = self.int_digits.saturating_add(1);
                self.int_magnitude = self
                    .int_magnitude
                    .and_then(|m| m.checked_mul(10))
                    .and_then(|m| m.checked_add(u64::from(b - b'0')));
                IntState::Digits
            }
            (IntState::Digits | IntState::Trail, b) if is_space(b) => IntState::Trail,
            _ => IntState::Bad,
        };
    }

    fn step_float(&mut self, b: u8) {
        use FloatState as F;
        let lower = b.to_ascii_lowercase();
        let next = match (self.float, b) {
            (F::Lead, b) if is_space(b) => F::Lead,
            (F::Lead, b'+' | b'-') => {
                self.decimal.negative = b == b'-';
                F::Sign
            }
            (F::Lead | F::Sign | F::IntDigits, b'0'..=b'9') => {
                self.capture_mantissa(b, false);
                F::IntDigits
            }
            (F::Lead | F::Sign, b'.') => F::LoneDot,
            (F::IntDigits, b'.') => F::Fraction,
            (F::LoneDot | F::Fraction, b'0'..=b'9') => {
                self.capture_mantissa(b, true);
                F::Fraction
            }
            (F::IntDigits | F::Fraction, b'e' | b'E') => F::Exponent,
            (F::Exponent, b'+' | b'-') => {
                self.decimal.exponent_negative = b == b'-';
                F::ExponentSign
            }
            (F::Exponent | F::ExponentSign | F::ExponentDigits, b'0'..=b'9') => {
                if self.want_float_value {
                    self.decimal.push_exponent_digit(b);
                }
                F::ExponentDigits
            }
            (F::Lead | F::Sign, _) if lower == b'i' => F::Word { nan: false, len: 1 },
            (F::Lead | F::Sign, _) if lower == b'n' => F::Word { nan: true, len: 1 },
            (F::Word { nan, len }, _) if next_letter(nan, len) == Some(lower) => {
                F::Word { nan, len: len + 1 }
            }
            (state, b) if is_space(b) && state.accepts() => {
                if let F::Word { nan, .. } = state {
                    self.word_value = Some(self.word(nan));
                }
                F::Trail
            }
            _ => F::Bad,
        };
        self.float = next;
    }

    fn capture_mantissa(&mut self, digit: u8, in_fraction: bool) {
        if self.want_float_value {
            self.decimal.push_mantissa_digit(digit, in_fraction);
        }
    }
}

/// The letter that continues `inf`/`infinity` or `nan` after `len` matched letters.
fn next_letter(nan: bool, len: u8) -> Option<u8> {
    let word: &[u8] = if nan { b"nan" } else { b"infinity" };
    word.get(usize::from(len)).copied()
}

/// Runs `text` (already decoded from UTF-8) through the lexer the way `int(text)` and
/// `float(text)` see it: CPython first maps Unicode whitespace to a space and Unicode decimal
/// digits to ASCII ones, and gives up at any other non-ASCII character.
pub(super) fn python_number(text: &str) -> NumberFacts {
    let mut lexer = NumberLexer::new();
    for c in text.chars() {
        match ascii_equivalent(c) {
            Some(b) => lexer.push(b),
            None => return NumberFacts::default(),
        }
    }
    lexer.finish()
}

fn ascii_equivalent(c: char) -> Option<u8> {
    if c < '\u{7f}' {
        // ASCII below DEL passes through unchanged (and is judged by the lexer).
        return u8::try_from(c).ok();
    }
    if UNICODE_SPACES.contains(&c) {
        return Some(b' ');
    }
    let code = u32::from(c);
    DECIMAL_ZEROS.iter().find_map(|&zero| {
        let value = code.checked_sub(zero).filter(|&v| v <= 9)?;
        u8::try_from(value).ok().map(|v| b'0' + v)
    })
}

/// Non-ASCII characters Python's `str.isspace()` accepts (Unicode 14, CPython 3.11).
const UNICODE_SPACES: &[char] = &[
    '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}', '\u{2001}', '\u{2002}', '\u{2003}', '\u{2004}',
    '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}', '\u{2009}', '\u{200a}', '\u{2028}', '\u{2029}',
    '\u{202f}', '\u{205f}', '\u{3000}',
];

/// The digit zero of every non-ASCII run of Unicode decimal digits (category Nd) in Unicode
/// 14, CPython 3.11's database; each run holds 0..=9 consecutively.
const DECIMAL_ZEROS: &[u32] = &[
    0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66, 0xde6,
    0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90, 0x1b50,
    0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];
