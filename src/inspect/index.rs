//! An index read with bounds: a 4 MiB index may list ~20,000 entries, all naming one manifest, and
//! everything read per platform (a config, its metadata, a package list) would be multiplied by
//! them. So at most `max_platforms` distinct platform entries are kept, in index order; an entry
//! listing a platform and digest already kept is a duplicate; the rest are counted, never
//! collected, and the cut is a note.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::config::MAX_MAX_PLATFORMS;
use builder_monitor_core::reference::is_sha256_digest;
use builder_monitor_core::text::escape;

/// Longest `os/architecture/variant` taken as a platform (real ones: under 20 bytes); an entry with
/// a longer one is skipped like one without a platform, so no registry string of megabytes becomes
/// a key of the pin.
pub const MAX_PLATFORM_KEY: usize = 128;

/// The platforms an index lists, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPlatforms {
    /// `os/arch[/variant]` (`#2`, `#3`… for another digest under the same platform) → digest.
    pub platforms: BTreeMap<String, String>,
    /// What was left out, when anything was: `index lists 200 entries; read the first 16
    /// distinct platforms, 184 ignored (160 duplicates, 24 over max_platforms = 16)`.
    pub note: Option<String>,
}

/// Why an index cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("is not valid JSON: {0}")]
    Json(String),
    #[error("lists a bad digest \"{0}\"")]
    BadDigest(String),
}

#[derive(Deserialize, Default)]
struct PlatformDoc {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

/// `os/arch[/variant]`, or `None` for no usable platform (missing, `unknown`, over
/// [`MAX_PLATFORM_KEY`]).
pub fn platform_key(os: &str, architecture: &str, variant: Option<&str>) -> Option<String> {
    if os.is_empty() || architecture.is_empty() || os == "unknown" {
        return None;
    }
    let mut key = format!("{os}/{architecture}");
    if let Some(v) = variant.filter(|v| !v.is_empty()) {
        key.push('/');
        key.push_str(v);
    }
    Some(key).filter(|k| k.len() <= MAX_PLATFORM_KEY)
}

/// The platform key of an image config (`os`, `architecture`, `variant` at its top level).
pub fn config_platform(config: &[u8]) -> Option<String> {
    let doc: PlatformDoc = serde_json::from_slice(config).unwrap_or_default();
    platform_key(&doc.os, &doc.architecture, doc.variant.as_deref())
}

/// Whether an entry's annotations mark it as an attestation (or another artifact riding along).
struct Attestation(bool);

impl<'de> Deserialize<'de> for Attestation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnnotationsVisitor;
        impl<'de> Visitor<'de> for AnnotationsVisitor {
            type Value = Attestation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attestation, A::Error> {
                let mut found = false;
                while let Some(key) = map.next_key::<std::borrow::Cow<'_, str>>()? {
                    found |= key == "vnd.docker.reference.type";
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(Attestation(found))
            }
        }
        d.deserialize_map(AnnotationsVisitor)
    }
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<PlatformDoc>,
    #[serde(default)]
    annotations: Option<Attestation>,
}

/// The `manifests` list, read one entry at a time: distinct (platform, digest) pairs are kept up to
/// [`MAX_MAX_PLATFORMS`], everything else is only counted.
#[derive(Default)]
struct Entries {
    kept: Vec<(String, String)>,
    listed: usize,
    duplicates: usize,
    over: usize,
    /// The first bad digest of a platform entry (cut short: it is the registry's text).
    bad_digest: Option<String>,
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;
        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of descriptors")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
                let mut out = Entries::default();
                let mut seen: HashSet<(String, String)> = HashSet::new();
                while let Some(entry) = seq.next_element::<Descriptor>()? {
                    out.listed += 1;
                    if entry.annotations.is_some_and(|a| a.0) {
                        continue;
                    }
                    let Some(platform) = entry.platform else { continue };
                    let Some(key) = platform_key(&platform.os, &platform.architecture, platform.variant.as_deref())
                    else {
                        continue;
                    };
                    if !is_sha256_digest(&entry.digest) {
                        if out.bad_digest.is_none() {
                            out.bad_digest = Some(builder_monitor_core::text::clip(&entry.digest, 100).into_owned());
                        }
                        continue;
                    }
                    let pair = (key, entry.digest);
                    if seen.contains(&pair) {
                        out.duplicates += 1;
                    } else if out.kept.len() < MAX_MAX_PLATFORMS {
                        seen.insert(pair.clone());
                        out.kept.push(pair);
                    } else {
                        out.over += 1;
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_seq(EntriesVisitor)
    }
}

#[derive(Deserialize)]
struct IndexDoc {
    #[serde(default)]
    manifests: Option<Entries>,
}

/// The platforms of an index document, at most `max_platforms` of them (see the module docs).
pub fn read_index(bytes: &[u8], max_platforms: usize) -> Result<IndexPlatforms, IndexError> {
    let doc: IndexDoc = serde_json::from_slice(bytes).map_err(|e| IndexError::Json(e.to_string()))?;
    let mut entries = doc.manifests.unwrap_or_default();
    if let Some(bad) = entries.bad_digest {
        return Err(IndexError::BadDigest(escape(&bad).into_owned()));
    }
    let max_platforms = max_platforms.clamp(1, MAX_MAX_PLATFORMS);
    if entries.kept.len() > max_platforms {
        entries.over += entries.kept.len() - max_platforms;
        entries.kept.truncate(max_platforms);
    }
    let read = entries.kept.len();
    let mut platforms = BTreeMap::new();
    for (key, digest) in entries.kept {
        let mut unique = key.clone();
        let mut n = 2;
        while platforms.contains_key(&unique) {
            unique = format!("{key}#{n}");
            n += 1;
        }
        platforms.insert(unique, digest);
    }
    let ignored = entries.duplicates + entries.over;
    let note = (ignored > 0).then(|| {
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut why = Vec::new();
        if entries.duplicates > 0 {
            why.push(plural(entries.duplicates, "duplicate", "duplicates"));
        }
        if entries.over > 0 {
            why.push(format!("{} over max_platforms = {max_platforms}", entries.over));
        }
        let read = match entries.over {
            0 => plural(read, "distinct platform", "distinct platforms"),
            _ => format!("the first {read} distinct platforms"),
        };
        format!("index lists {} entries; read {read}, {ignored} ignored ({})", entries.listed, why.join(", "))
    });
    Ok(IndexPlatforms { platforms, note })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn digest(n: usize) -> String {
        format!("sha256:{n:064x}")
    }

    fn entry(os: &str, arch: &str, n: usize) -> serde_json::Value {
        json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(n), "size": 1,
               "platform": {"os": os, "architecture": arch}})
    }

    fn index(entries: Vec<serde_json::Value>) -> Vec<u8> {
        json!({"schemaVersion": 2, "manifests": entries}).to_string().into_bytes()
    }

    #[test]
    fn duplicates_are_read_once_and_extra_platforms_cut_with_a_note() {
        let same = index(vec![entry("linux", "amd64", 1); 200]);
        let read = read_index(&same, 16).unwrap();
        assert_eq!(read.platforms, [("linux/amd64".to_string(), digest(1))].into());
        assert_eq!(
            read.note.as_deref(),
            Some("index lists 200 entries; read 1 distinct platform, 199 ignored (199 duplicates)")
        );
        // 200 entries naming 40 platforms of one manifest: the first 16 in index order.
        let many = index((0..200).map(|i| entry("linux", &format!("arch{:02}", i % 40), 1)).collect());
        let read = read_index(&many, 16).unwrap();
        assert_eq!(read.platforms.len(), 16);
        assert!(read.platforms.contains_key("linux/arch15") && !read.platforms.contains_key("linux/arch16"));
        assert_eq!(
            read.note.as_deref(),
            Some(
                "index lists 200 entries; read the first 16 distinct platforms, 184 ignored (160 duplicates, 24 over max_platforms = 16)"
            )
        );
    }

    #[test]
    fn ordinary_indexes_have_no_note() {
        let mut entries = vec![entry("linux", "amd64", 1), entry("linux", "arm64", 2), entry("linux", "amd64", 3)];
        let mut attestation = entry("unknown", "unknown", 4);
        attestation["annotations"] = json!({"vnd.docker.reference.type": "attestation-manifest"});
        entries.push(attestation);
        entries.push(entry("linux", &"x".repeat(MAX_PLATFORM_KEY), 5));
        let read = read_index(&index(entries), 16).unwrap();
        let keys: Vec<_> = read.platforms.keys().map(String::as_str).collect();
        assert_eq!(keys, ["linux/amd64", "linux/amd64#2", "linux/arm64"]);
        assert_eq!(read.note, None);
    }

    #[test]
    fn bad_indexes_are_errors() {
        let mut bad = entry("linux", "amd64", 1);
        bad["digest"] = json!("sha256:\u{1b}[31mnope");
        assert_eq!(read_index(&index(vec![bad]), 16), Err(IndexError::BadDigest("sha256:\\x1b[31mnope".into())));
        assert!(matches!(read_index(b"{\"manifests\": 5}", 16), Err(IndexError::Json(_))));
        assert!(matches!(read_index(b"[", 16), Err(IndexError::Json(_))));
        assert_eq!(read_index(b"{}", 16).unwrap().platforms.len(), 0);
    }
}
