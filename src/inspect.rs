//! Reads what a digest is: an index and its platform manifests, or one image manifest whose config
//! names its platform. The result, an `Observation`, is what the monitor pins and compares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Platform;
use crate::registry::{
    DOCKER_MANIFEST_LIST, ImageRef, MAX_CONFIG_BYTES, Manifest, OCI_INDEX, Registry, RegistryError,
    is_sha256_digest,
};

/// One resolved state of a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Digest of the top-level object (the index for multi-arch tags).
    pub digest: String,
    pub media_type: String,
    /// `os/arch[/variant]` → manifest digest.
    pub platforms: BTreeMap<String, String>,
}

impl Observation {
    /// The platform digests a `platforms` filter cares about (all of them without a filter).
    pub fn selected(&self, filter: Option<&[Platform]>) -> BTreeMap<String, String> {
        match filter {
            None => self.platforms.clone(),
            Some(filter) => self
                .platforms
                .iter()
                .filter(|(key, _)| {
                    Platform::parse(key.split('#').next().unwrap_or(key))
                        .is_some_and(|p| filter.iter().any(|f| f.matches(&p)))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

#[derive(Deserialize)]
struct IndexDoc {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct ImageManifestDoc {
    config: Descriptor,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<PlatformDoc>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
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

impl PlatformDoc {
    fn key(&self) -> Option<String> {
        if self.os.is_empty() || self.architecture.is_empty() || self.os == "unknown" {
            return None;
        }
        let mut key = format!("{}/{}", self.os, self.architecture);
        if let Some(v) = self.variant.as_deref().filter(|v| !v.is_empty()) {
            key.push('/');
            key.push_str(v);
        }
        Some(key)
    }
}

pub fn is_index(media_type: &str) -> bool {
    media_type == OCI_INDEX || media_type == DOCKER_MANIFEST_LIST
}

/// Fetches `digest` of `image`'s repository and lists its platforms.
pub async fn observe(
    registry: &Registry,
    image: &ImageRef,
    digest: &str,
) -> Result<Observation, RegistryError> {
    let manifest = registry.get_manifest(image, digest).await?;
    observation_from(registry, image, manifest).await
}

/// Lists the platforms of an already fetched manifest (fetching a config blob for single images).
pub async fn observation_from(
    registry: &Registry,
    image: &ImageRef,
    manifest: Manifest,
) -> Result<Observation, RegistryError> {
    let invalid = |detail: String| RegistryError::InvalidResponse {
        registry: image.registry().to_string(),
        detail,
    };
    let mut platforms = BTreeMap::new();
    if is_index(&manifest.media_type) {
        let index: IndexDoc = serde_json::from_slice(&manifest.bytes)
            .map_err(|e| invalid(format!("index {} is not valid JSON: {e}", manifest.digest)))?;
        for entry in index.manifests {
            // Attestations and other artifacts ride along in indexes as unknown/unknown.
            if entry.annotations.contains_key("vnd.docker.reference.type") {
                continue;
            }
            let Some(key) = entry.platform.as_ref().and_then(PlatformDoc::key) else {
                continue;
            };
            if !is_sha256_digest(&entry.digest) {
                return Err(invalid(format!(
                    "index {} lists a bad digest \"{}\"",
                    manifest.digest, entry.digest
                )));
            }
            let mut unique = key.clone();
            let mut n = 2;
            while platforms.contains_key(&unique) {
                unique = format!("{key}#{n}");
                n += 1;
            }
            platforms.insert(unique, entry.digest);
        }
    } else {
        let doc: ImageManifestDoc = serde_json::from_slice(&manifest.bytes).map_err(|e| {
            invalid(format!(
                "manifest {} is not an image manifest: {e}",
                manifest.digest
            ))
        })?;
        let config = registry
            .get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES)
            .await?;
        let platform: PlatformDoc = serde_json::from_slice(&config).unwrap_or_default();
        if let Some(key) = platform.key() {
            platforms.insert(key, manifest.digest.clone());
        }
    }
    Ok(Observation {
        digest: manifest.digest,
        media_type: manifest.media_type,
        platforms,
    })
}

/// What `resolve` prints: the immutable reference of a tag and its platforms.
#[derive(Debug, Clone, Serialize)]
pub struct Resolution {
    pub image: String,
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: Vec<PlatformDigest>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlatformDigest {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub digest: String,
}

/// Resolves a reference with one manifest GET (plus the config blob for a single image).
pub async fn resolve(registry: &Registry, image: &ImageRef) -> Result<Resolution, RegistryError> {
    let manifest = registry
        .get_manifest(image, image.manifest_reference())
        .await?;
    let observation = observation_from(registry, image, manifest).await?;
    let platforms = observation
        .platforms
        .iter()
        .map(|(key, digest)| {
            let mut parts = key.split('#').next().unwrap_or(key).splitn(3, '/');
            PlatformDigest {
                os: parts.next().unwrap_or_default().to_string(),
                architecture: parts.next().unwrap_or_default().to_string(),
                variant: parts.next().map(str::to_string),
                digest: digest.clone(),
            }
        })
        .collect();
    Ok(Resolution {
        image: image.to_string(),
        reference: image.pinned(&observation.digest),
        digest: observation.digest,
        media_type: observation.media_type,
        platforms,
    })
}

impl Resolution {
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "{}\n  digest:     {}\n  reference:  {}\n  media type: {}\n",
            self.image, self.digest, self.reference, self.media_type
        );
        for p in &self.platforms {
            let mut platform = format!("{}/{}", p.os, p.architecture);
            if let Some(v) = &p.variant {
                platform = format!("{platform}/{v}");
            }
            out.push_str(&format!("  {:<11} {}\n", format!("{platform}:"), p.digest));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_filter_matches_variants_loosely() {
        let obs = Observation {
            digest: "sha256:i".into(),
            media_type: OCI_INDEX.into(),
            platforms: [
                ("linux/amd64".to_string(), "sha256:a".to_string()),
                ("linux/arm64/v8".to_string(), "sha256:b".to_string()),
                ("linux/arm/v7".to_string(), "sha256:c".to_string()),
            ]
            .into(),
        };
        assert_eq!(obs.selected(None).len(), 3);
        let arm64 = [Platform::parse("linux/arm64").unwrap()];
        assert_eq!(
            obs.selected(Some(&arm64)).keys().collect::<Vec<_>>(),
            ["linux/arm64/v8"]
        );
        let v6 = [Platform::parse("linux/arm/v6").unwrap()];
        assert!(obs.selected(Some(&v6)).is_empty());
    }
}
