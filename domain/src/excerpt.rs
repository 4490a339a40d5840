//! Excerpts: how error messages quote what a person sent.
//!
//! Error messages name the offending input so a person can see what was wrong,
//! but the input is untrusted: it may be megabytes long or full of control
//! characters that would corrupt a log line or a JSON body read in a terminal.
//! An [`Excerpt`] keeps at most [`EXCERPT_CHARS`] characters and renders them
//! quoted and escaped.

use std::fmt;

/// How many characters of an input an [`Excerpt`] keeps; enough to recognise
/// the input, short enough that an error message stays one readable line.
pub const EXCERPT_CHARS: usize = 64;

/// A bounded, display-safe copy of untrusted input, quoted inside error messages.
///
/// It displays as a Rust string literal (`"every.0.seconds"`, with control
/// characters escaped), followed by `…` when the input was cut short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Excerpt {
    /// The first [`EXCERPT_CHARS`] characters of the input.
    text: String,
    /// Whether the input had more characters than `text` keeps, so the
    /// rendering can say that it is incomplete.
    truncated: bool,
}

impl Excerpt {
    /// Keeps the beginning of `input`, cut at a character boundary, so that the
    /// excerpt is always valid UTF-8 whatever the input's length.
    pub fn of(input: &str) -> Self {
        match input.char_indices().nth(EXCERPT_CHARS) {
            Some((cut, _)) => Excerpt {
                text: input[..cut].to_owned(),
                truncated: true,
            },
            None => Excerpt {
                text: input.to_owned(),
                truncated: false,
            },
        }
    }

    /// The kept characters, unescaped, for callers that render errors their own way.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether characters of the input were dropped, so a renderer can mark it.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Display for Excerpt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)?;
        if self.truncated {
            f.write_str("…")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_short_inputs_quoted_and_escaped() {
        let cases = [
            ("", r#""""#),
            ("every.0.seconds", r#""every.0.seconds""#),
            ("every.1.seconds\n", r#""every.1.seconds\n""#),
            ("a\"b", r#""a\"b""#),
            ("\u{7}bell", r#""\u{7}bell""#),
        ];
        for (input, expected) in cases {
            let excerpt = Excerpt::of(input);
            assert_eq!(excerpt.to_string(), expected, "input {input:?}");
            assert!(!excerpt.is_truncated());
            assert_eq!(excerpt.as_str(), input);
        }
    }

    #[test]
    fn truncates_long_inputs_at_a_char_boundary() {
        let exact = "x".repeat(EXCERPT_CHARS);
        assert!(!Excerpt::of(&exact).is_truncated());

        let long = "é".repeat(1000);
        let excerpt = Excerpt::of(&long);
        assert!(excerpt.is_truncated());
        assert_eq!(excerpt.as_str().chars().count(), EXCERPT_CHARS);
        assert!(excerpt.to_string().ends_with("\"…"));
    }
}
