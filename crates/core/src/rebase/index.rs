//! Multi-platform images: an app config's platform, the matching child of a run image index, and the
//! app index rewritten to point at the rebased manifests.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::image::{DOCKER_LIST, OCI_INDEX, Side, compact, digest_of, parse_object};
use super::{Platform, Refusal, malformed};

/// The app config's platform ("linux/amd64", "linux/arm64/v8") as index entries name it.
pub fn config_platform(config: &[u8]) -> Result<Platform, Refusal> {
    let what = Side::App.config();
    let config = parse_object(config, what)?;
    let field = |key: &str| config.get(key).and_then(Value::as_str).filter(|v| !v.is_empty()).map(str::to_string);
    let (Some(os), Some(architecture)) = (field("os"), field("architecture")) else {
        return malformed(what, "no os or architecture");
    };
    Ok(Platform { os, architecture, variant: field("variant"), os_version: field("os.version") })
}

/// `arm64` images are `v8` whether or not they say so (containerd's normalisation).
fn normal_variant<'a>(architecture: &str, variant: Option<&'a str>) -> Option<&'a str> {
    variant.filter(|v| !(v.is_empty() || (architecture == "arm64" && *v == "v8")))
}

/// The child of a run image index matching `platform` (os, architecture, variant): its digest. An
/// equal variant wins over a child without one; among equals, one with the same os.version.
pub fn select_platform(index: &[u8], platform: &Platform) -> Result<String, Refusal> {
    let what = "run image index";
    let index = parse_object(index, what)?;
    let Some(Value::Array(entries)) = index.get("manifests") else { return malformed(what, "no manifests array") };
    let wanted_variant = normal_variant(&platform.architecture, platform.variant.as_deref());
    let mut best: Option<(u8, &str)> = None;
    let mut available = Vec::new();
    for entry in entries {
        let media_type = entry.get("mediaType").and_then(Value::as_str).unwrap_or_default();
        let (Some(digest), Some(p)) = (entry.get("digest").and_then(Value::as_str), entry.get("platform")) else {
            continue;
        };
        if media_type == OCI_INDEX || media_type == DOCKER_LIST {
            continue;
        }
        let field = |key: &str| p.get(key).and_then(Value::as_str);
        let (os, architecture) = (field("os").unwrap_or_default(), field("architecture").unwrap_or_default());
        let variant = normal_variant(architecture, field("variant"));
        available.push(match variant {
            Some(v) => format!("{os}/{architecture}/{v}"),
            None => format!("{os}/{architecture}"),
        });
        if os != platform.os || architecture != platform.architecture {
            continue;
        }
        let variant_score = match (wanted_variant, variant) {
            (a, b) if a == b => 2,
            (None, _) | (_, None) => 1,
            _ => continue,
        };
        let os_version_score =
            u8::from(platform.os_version.is_some() && field("os.version") == platform.os_version.as_deref());
        let score = variant_score * 2 + os_version_score;
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, digest));
        }
    }
    match best {
        Some((_, digest)) => Ok(digest.to_string()),
        None => Err(Refusal::NoMatchingPlatform {
            platform: platform.to_string(),
            available: if available.is_empty() { "no platform".to_string() } else { available.join(", ") },
        }),
    }
}

/// A new index: every entry and annotation kept, the entries whose digest is a key of `replaced`
/// pointing at the new manifest (digest, size, media type); returns (bytes, digest).
pub fn rebased_index(
    index: &[u8],
    replaced: &BTreeMap<String, (String, u64, String)>,
) -> Result<(Vec<u8>, String), Refusal> {
    let what = "app index";
    let mut index = parse_object(index, what)?;
    let Some(Value::Array(entries)) = index.get_mut("manifests") else { return malformed(what, "no manifests array") };
    let mut found = BTreeSet::new();
    for entry in entries.iter_mut() {
        let Value::Object(entry) = entry else { return malformed(what, "an entry is not an object") };
        let Some(digest) = entry.get("digest").and_then(Value::as_str) else { continue };
        let Some((new_digest, size, media_type)) = replaced.get(digest) else { continue };
        found.insert(digest.to_string());
        entry.insert("digest".into(), Value::String(new_digest.clone()));
        entry.insert("size".into(), Value::from(*size));
        entry.insert("mediaType".into(), Value::String(media_type.clone()));
    }
    if let Some(missing) = replaced.keys().find(|k| !found.contains(*k)) {
        return malformed(what, format!("no entry {missing}"));
    }
    let bytes = compact(&index);
    let digest = digest_of(&bytes);
    Ok((bytes, digest))
}
