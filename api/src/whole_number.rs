//! Whole numbers in JSON bodies as JSON writes them: `4`, or `4.0`, which JSON Schema counts
//! as the same integer (and which some JSON encoders produce). A fraction, a negative number
//! or one beyond the field's type is refused with what was sent.

use serde::{Deserialize, Deserializer};

/// The field's number, which must be whole and fit `T`.
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let number = serde_json::Number::deserialize(deserializer)?;
    whole(&number)
        .and_then(|whole| T::try_from(whole).ok())
        .ok_or_else(|| {
            serde::de::Error::custom(format!(
                "expected a whole number from 0 to {}, not {number}",
                largest::<T>()
            ))
        })
}

/// The largest `u64` that fits `T`: found by halving, since `TryFrom` names no bound.
fn largest<T: TryFrom<u64>>() -> u64 {
    let (mut fits, mut beyond) = (0u64, u64::MAX);
    if T::try_from(u64::MAX).is_ok() {
        return u64::MAX;
    }
    while beyond - fits > 1 {
        let middle = fits + (beyond - fits) / 2;
        if T::try_from(middle).is_ok() {
            fits = middle;
        } else {
            beyond = middle;
        }
    }
    fits
}

/// [`required`] for an optional field: `null` or absent is `None`.
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    #[derive(Deserialize)]
    struct Whole<T: TryFrom<u64>>(#[serde(deserialize_with = "required")] T);
    Ok(Option::<Whole<T>>::deserialize(deserializer)?.map(|Whole(value)| value))
}

/// `number` as a `u64`, if it is a whole number within `u64`.
fn whole(number: &serde_json::Number) -> Option<u64> {
    if let Some(whole) = number.as_u64() {
        return Some(whole);
    }
    // 2^64 is the first f64 beyond u64; below it, an f64 with no fraction is a u64 exactly.
    const BEYOND_U64: f64 = 18_446_744_073_709_551_616.0;
    number
        .as_f64()
        .filter(|float| float.fract() == 0.0 && (0.0..BEYOND_U64).contains(float))
        .map(|float| float as u64)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        #[serde(default, deserialize_with = "super::optional")]
        max: Option<u32>,
        #[serde(deserialize_with = "super::required")]
        id: u64,
    }

    fn read(json: &str) -> Result<Body, String> {
        serde_json::from_str(json).map_err(|error| error.to_string())
    }

    #[test]
    fn whole_numbers_are_read_however_json_writes_them_and_others_are_refused() {
        assert_eq!(read(r#"{"id": 4}"#), Ok(Body { max: None, id: 4 }));
        assert_eq!(
            read(r#"{"id": 4.0, "max": 22.0}"#),
            Ok(Body {
                max: Some(22),
                id: 4
            })
        );
        assert_eq!(
            read(r#"{"id": 1, "max": null}"#),
            Ok(Body { max: None, id: 1 })
        );
        for (json, says) in [
            (r#"{"id": 4.5}"#, "not 4.5"),
            (r#"{"id": -1}"#, "not -1"),
            (
                r#"{"id": 1, "max": 4294967296}"#,
                "from 0 to 4294967295, not 4294967296",
            ),
            (r#"{"id": 1, "max": "ten"}"#, "invalid type"),
        ] {
            let refused = read(json).err().unwrap_or_default();
            assert!(refused.contains(says), "{json}: {refused}");
        }
    }
}
