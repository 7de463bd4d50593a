//! A duration as the config writes it, kept as text until it is validated (with its unit).

use std::fmt;

use serde::Deserialize;

/// A duration as written: a string (`"10m"`), or a bare number kept as its text, so that
/// `interval = 10` is one error that asks for a unit (not a type error that hides the table's
/// other problems).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DurationText(String);

impl DurationText {
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for DurationText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, e.g. \"30s\", \"10m\", \"1h\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
        }
        deserializer.deserialize_any(Text)
    }
}
