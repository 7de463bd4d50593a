//! Reading one OSV record of Ubuntu's, in either of its shapes, into a [`Record`]: only what
//! matching needs (id, CVEs, priority, and per `affected[]` entry the ecosystem, source, fixed
//! version and binaries). Everything else (summaries, details, `versions[]`, references) is
//! skipped unread by the parser, never held.
//!
//! Bounds: at most [`MAX_AFFECTED`] `affected[]` entries, [`MAX_BINARIES`] binaries per entry
//! (over all of its `binaries` items), [`MAX_CVES`] CVEs and [`MAX_EVENTS`] ranges and events are
//! read; the rest of each list is skipped unread (the record is still used, cut). The caller
//! bounds a record's size (the loader skips files over 1 MiB).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Affected, Priority, Record, RecordError};

/// Most `affected[]` entries read from one record; later ones are skipped.
pub const MAX_AFFECTED: usize = 10_000;
/// Most binaries read per `affected[]` entry; later ones are skipped.
pub const MAX_BINARIES: usize = 10_000;
/// Most CVE ids read from a USN's `upstream`; later ones are skipped.
pub const MAX_CVES: usize = 10_000;
/// Most `ranges[]` per entry, and events per range, read; later ones are skipped.
pub const MAX_EVENTS: usize = 1_000;

/// Reads one OSV record (either of Ubuntu's shapes: USN `binaries` as `[{binary_name,
/// binary_version}]`, CVE `binaries` as `[{name: version}]` with `ubuntu_priority`).
///
/// A binary listed without a version (or with `null`) keeps an empty version: no fixed version
/// is known for it. A USN's CVEs are its `upstream` with `UBUNTU-` stripped; a record without
/// `upstream` whose id is a CVE's names itself. Only `ECOSYSTEM` ranges are read, and of their
/// `fixed` events the last one.
pub fn parse_record(json: &[u8]) -> Result<Record, RecordError> {
    let raw: Raw = serde_json::from_slice(json).map_err(|e| RecordError::Malformed(e.to_string()))?;
    let id = raw.id.trim().to_string();
    if id.is_empty() {
        return Err(RecordError::Malformed("its `id` is empty".into()));
    }
    let mut cves: Vec<String> =
        raw.upstream.0.into_iter().map(|cve| cve.strip_prefix("UBUNTU-").unwrap_or(&cve).to_string()).collect();
    if cves.is_empty() {
        let own = id.strip_prefix("UBUNTU-").unwrap_or(&id);
        if own.starts_with("CVE-") {
            cves.push(own.to_string());
        }
    }
    let mut priority = None;
    let affected = raw
        .affected
        .0
        .into_iter()
        .map(|entry| {
            let specific = entry.ecosystem_specific.unwrap_or_default();
            let given = specific.ubuntu_priority.as_deref().and_then(Priority::parse);
            priority = priority.max(given);
            let fixed = entry
                .ranges
                .0
                .into_iter()
                .filter(|range| range.kind == "ECOSYSTEM")
                .flat_map(|range| range.events.0)
                .filter_map(|event| event.fixed)
                .next_back();
            Affected {
                ecosystem: entry.package.ecosystem,
                source: entry.package.name,
                fixed,
                binaries: specific.binaries.0,
            }
        })
        .collect();
    let modified = raw
        .modified
        .as_deref()
        .and_then(|text| chrono::DateTime::parse_from_rfc3339(text.trim()).ok())
        .map(|at| at.with_timezone(&chrono::Utc));
    Ok(Record { id, cves, priority, affected, modified })
}

#[derive(Deserialize)]
struct Raw {
    id: String,
    #[serde(default)]
    modified: Option<String>,
    #[serde(default)]
    upstream: Capped<String, MAX_CVES>,
    #[serde(default)]
    affected: Capped<RawAffected, MAX_AFFECTED>,
}

#[derive(Deserialize)]
struct RawAffected {
    package: RawPackage,
    #[serde(default)]
    ranges: Capped<RawRange, MAX_EVENTS>,
    #[serde(default)]
    ecosystem_specific: Option<RawSpecific>,
}

#[derive(Deserialize)]
struct RawPackage {
    ecosystem: String,
    name: String,
}

#[derive(Deserialize)]
struct RawRange {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    events: Capped<RawEvent, MAX_EVENTS>,
}

/// One event: `{introduced}`, `{fixed}`, `{last_affected}`, `{limit}`; only `fixed` is kept.
#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    fixed: Option<String>,
}

#[derive(Default, Deserialize)]
struct RawSpecific {
    #[serde(default)]
    binaries: Binaries,
    #[serde(default)]
    ubuntu_priority: Option<String>,
}

/// A JSON list of which only the first `N` items are kept (`null` reads as empty).
struct Capped<T, const N: usize>(Vec<T>);

impl<T, const N: usize> Default for Capped<T, N> {
    fn default() -> Self {
        Capped(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Capped<T, N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CappedVisitor<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for CappedVisitor<T, N> {
            type Value = Capped<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Capped(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut kept = Vec::new();
                while kept.len() < N {
                    match seq.next_element()? {
                        Some(item) => kept.push(item),
                        None => return Ok(Capped(kept)),
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Capped(kept))
            }
        }
        deserializer.deserialize_any(CappedVisitor(std::marker::PhantomData))
    }
}

/// `ecosystem_specific.binaries` in either shape, as `(binary, fixed version)` pairs, at most
/// [`MAX_BINARIES`] of them over all items.
#[derive(Default)]
struct Binaries(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Binaries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = Binaries;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of {binary_name, binary_version} or of {binary: version} objects")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Binaries, E> {
                Ok(Binaries::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Binaries, A::Error> {
                let mut out = Vec::new();
                while out.len() < MAX_BINARIES {
                    if seq.next_element_seed(ItemSeed(&mut out))?.is_none() {
                        return Ok(Binaries(out));
                    }
                }
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Binaries(out))
            }
        }
        deserializer.deserialize_any(ListVisitor)
    }
}

/// One item of `binaries`: `{"binary_name": N, "binary_version": V}` (USN) or `{N: V, …}` (CVE),
/// its pairs pushed onto the entry's list while it holds fewer than [`MAX_BINARIES`].
struct ItemSeed<'a>(&'a mut Vec<(String, String)>);

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a {binary_name, binary_version} or {binary: version} object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (mut name, mut version, mut pairs) = (None, None, Vec::new());
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<Option<String>>()?.unwrap_or_default();
            match key.as_str() {
                "binary_name" => name = Some(value),
                "binary_version" => version = Some(value),
                _ if self.0.len() + pairs.len() < MAX_BINARIES => pairs.push((key, value)),
                _ => {}
            }
        }
        match name {
            // USN shape; a stray key beside `binary_name` is not a binary.
            Some(name) if !name.is_empty() => self.0.push((name, version.unwrap_or_default())),
            Some(_) => return Err(de::Error::custom("a binary with an empty `binary_name`")),
            None => self.0.extend(pairs.into_iter().filter(|(name, _)| !name.is_empty())),
        }
        Ok(())
    }
}
