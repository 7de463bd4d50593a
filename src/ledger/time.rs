//! The ledger's two text forms of a time — whole seconds for what people read, milliseconds for
//! times that order work — as serde field codecs, so stored and shown text stays as it always was.

use builder_monitor_core::schedule::{parse_timestamp, timestamp, timestamp_millis};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serializer};

fn parse<E: serde::de::Error>(text: &str) -> Result<DateTime<Utc>, E> {
    parse_timestamp(text).ok_or_else(|| E::custom(format!("not an RFC 3339 time: {text:?}")))
}

/// RFC 3339, whole seconds (`timestamp`).
pub mod seconds {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&timestamp(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        parse(&String::deserialize(d)?)
    }
}

/// [`seconds`] for an optional time (`null` when absent).
pub mod seconds_opt {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&timestamp(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(d)?.map(|t| parse(&t)).transpose()
    }
}

/// RFC 3339 with milliseconds (`timestamp_millis`): compared as text by the SQLite ledger.
pub mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&timestamp_millis(*t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        parse(&String::deserialize(d)?)
    }
}
