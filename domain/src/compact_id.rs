//! How clock and queue ids are kept: a drawn id as the 128-bit number it spells, inline; any
//! other id as shared text.
//!
//! Nodes draw ids as 32 lower-case hex digits (128 random bits). Kept as text, each id was a
//! pointer to a 64-byte allocation (a 48-byte reference-counted string and the allocator's
//! header), and a clock has two of them, its own and its queue's: a quarter of an idle clock's
//! memory. As the number they spell they are 16 bytes where they are held, and nothing on the
//! heap.
//!
//! Any other id stays possible and is kept as text: a node of v0.1.0 may propose, and a backup
//! may restore, an id of any 1 to 64 URL-safe characters, and a replica that could not hold one
//! would halt on it. An id is the same value whichever way it is kept: the way is a function of
//! its text (a drawn id whose first 16 digits are all zeros, one in 2⁶⁴, is kept as text, which
//! is what frees the zero for the text form's tag and keeps the id at 16 bytes), and ids compare
//! and order by their text, so maps keyed by id iterate in the same order on every node and as
//! before.

use std::cmp::Ordering;
use std::fmt;
use std::num::NonZeroU64;
use std::ops::Deref;

use arcstr::ArcStr;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The digits of a drawn id.
const DRAWN_DIGITS: usize = 32;

/// The digits of each half of a drawn id.
const HALF_DIGITS: usize = DRAWN_DIGITS / 2;

/// Lower-case hex digits, by value.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// An id, kept in 16 bytes: see the module's documentation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum CompactId {
    /// 32 lower-case hex digits, as the number they spell: its high half (never zero) and its
    /// low half.
    Drawn(NonZeroU64, u64),
    /// Any other text.
    Text(ArcStr),
}

impl CompactId {
    /// The id whose text is `text`, kept the one way that text is kept.
    pub(crate) fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        if bytes.len() == DRAWN_DIGITS
            && let (Some(high), Some(low)) = (
                hex_value(&bytes[..HALF_DIGITS]),
                hex_value(&bytes[HALF_DIGITS..]),
            )
            && let Some(high) = NonZeroU64::new(high)
        {
            return CompactId::Drawn(high, low);
        }
        CompactId::Text(text.into())
    }

    /// The id's text, exactly as it was drawn or proposed.
    pub(crate) fn text(&self) -> IdText<'_> {
        match self {
            CompactId::Drawn(high, low) => {
                let mut digits = [0; DRAWN_DIGITS];
                write_hex(high.get(), &mut digits[..HALF_DIGITS]);
                write_hex(*low, &mut digits[HALF_DIGITS..]);
                IdText(TextOf::Drawn(digits))
            }
            CompactId::Text(text) => IdText(TextOf::Text(text)),
        }
    }
}

/// The value of `digits` (16 of them) read as lower-case hex; `None` if any is not one.
fn hex_value(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, digit| {
        let nibble = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some((value << 4) | u64::from(nibble))
    })
}

/// Writes `value` as lower-case hex into `digits` (16 of them), most significant first.
fn write_hex(value: u64, digits: &mut [u8]) {
    let count = digits.len();
    for (position, digit) in digits.iter_mut().enumerate() {
        let shift = 4 * (count - 1 - position);
        *digit = HEX[((value >> shift) & 0xf) as usize];
    }
}

/// Ids order by their text. Two drawn ids order as their numbers do: fixed-width lower-case hex
/// sorts like the number it spells, so the common case formats nothing.
impl Ord for CompactId {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (CompactId::Drawn(high, low), CompactId::Drawn(other_high, other_low)) => {
                (high, low).cmp(&(other_high, other_low))
            }
            _ => self.text().cmp(&other.text()),
        }
    }
}

impl PartialOrd for CompactId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for CompactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.text(), f)
    }
}

/// Serialized as its text, as ids always were.
impl Serialize for CompactId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for CompactId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(CompactId::new(&text))
    }
}

/// An id's text, borrowed from the id or spelled out on the stack: read it as a `&str`.
#[derive(Clone, Copy)]
pub struct IdText<'a>(TextOf<'a>);

#[derive(Clone, Copy)]
enum TextOf<'a> {
    Drawn([u8; DRAWN_DIGITS]),
    Text(&'a str),
}

impl Deref for IdText<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match &self.0 {
            // Hex digits are ASCII: never the empty fallback.
            TextOf::Drawn(digits) => std::str::from_utf8(digits).unwrap_or_default(),
            TextOf::Text(text) => text,
        }
    }
}

impl AsRef<str> for IdText<'_> {
    fn as_ref(&self) -> &str {
        self
    }
}

impl PartialEq<str> for IdText<'_> {
    fn eq(&self, other: &str) -> bool {
        **self == *other
    }
}

impl PartialEq<&str> for IdText<'_> {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

impl fmt::Display for IdText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl fmt::Debug for IdText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;

    const DRAWN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_drawn_id_is_kept_as_its_number_and_reads_back_the_same() {
        let id = CompactId::new(DRAWN);
        assert!(matches!(id, CompactId::Drawn(..)), "{id:?}");
        assert_eq!(id.text(), DRAWN);
        assert_eq!(size_of::<CompactId>(), 16, "16 bytes, nothing on the heap");
    }

    #[test]
    fn any_other_id_is_kept_as_text() {
        let zeros = "0000000000000000ffffffffffffffff";
        let upper = "0123456789ABCDEF0123456789ABCDEF";
        for text in ["c-1_x", zeros, upper, &DRAWN[1..], &format!("{DRAWN}0"), ""] {
            let id = CompactId::new(text);
            assert!(matches!(id, CompactId::Text(_)), "{text:?} kept as {id:?}");
            assert_eq!(id.text(), text);
        }
    }

    #[test]
    fn ids_serialize_as_their_text() -> Result<(), serde_json::Error> {
        for text in [DRAWN, "c-1_x"] {
            let id = CompactId::new(text);
            assert_eq!(serde_json::to_value(&id)?, serde_json::json!(text));
            assert_eq!(serde_json::from_value::<CompactId>(text.into())?, id);
        }
        Ok(())
    }

    /// Ids shaped like drawn ones or not: hex of either case, short, long, with zeros first.
    fn id_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9a-f]{32}",
            "0{16}[0-9a-f]{16}",
            "[0-9a-fA-F]{32}",
            "[0-9a-f]{30,34}",
            "[a-zA-Z0-9_-]{1,64}",
        ]
    }

    proptest! {
        #[test]
        fn ids_read_back_compare_and_order_as_their_text(a in id_text(), b in id_text()) {
            let (left, right) = (CompactId::new(&a), CompactId::new(&b));
            prop_assert_eq!(&*left.text(), a.as_str());
            prop_assert_eq!(left.cmp(&right), a.cmp(&b));
            prop_assert_eq!(left == right, a == b);
        }
    }
}
