//! Reads what a digest is: an index and its platform manifests, or one image manifest whose config
//! names its platform, and the config blobs whose CNB labels say what a builder or app contains.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod packages;

pub use packages::{LayerDoc, MAX_SBOM_LAYER_BYTES, platform_packages, read_sbom_layer};

use crate::config::Platform;
use crate::registry::{DOCKER_MANIFEST_LIST, MAX_CONFIG_BYTES, Manifest, OCI_INDEX, Registry, RegistryError};
use builder_monitor_core::cnb::{self, AppMetadata, BuilderMetadata, Change, PinnedMetadata};
use builder_monitor_core::packages::Packages;
use builder_monitor_core::reference::{ImageRef, is_sha256_digest};
use builder_monitor_core::text::escape;

/// One resolved state of a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Digest of the top-level object (the index for multi-arch tags).
    pub digest: String,
    pub media_type: String,
    /// `os/arch[/variant]` → manifest digest.
    pub platforms: BTreeMap<String, String>,
    /// The config blob of a single-manifest image, fetched to learn its platform.
    pub single_config: Option<bytes::Bytes>,
    /// The layers of a single-manifest image (where its SBOM layer is).
    pub single_layers: Vec<LayerDoc>,
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
    #[serde(default)]
    layers: Vec<LayerDoc>,
}

fn parse_image_manifest(image: &ImageRef, manifest: &Manifest) -> Result<ImageManifestDoc, RegistryError> {
    serde_json::from_slice(&manifest.bytes).map_err(|e| RegistryError::InvalidResponse {
        registry: image.registry().to_string(),
        detail: format!("manifest {} is not an image manifest: {e}", manifest.digest),
    })
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
pub async fn observe(registry: &Registry, image: &ImageRef, digest: &str) -> Result<Observation, RegistryError> {
    let manifest = registry.get_manifest(image, digest).await?;
    observation_from(registry, image, manifest).await
}

/// Lists the platforms of an already fetched manifest (fetching a config blob for single images).
pub async fn observation_from(
    registry: &Registry,
    image: &ImageRef,
    manifest: Manifest,
) -> Result<Observation, RegistryError> {
    let invalid = |detail: String| RegistryError::InvalidResponse { registry: image.registry().to_string(), detail };
    let mut platforms = BTreeMap::new();
    let mut single_config = None;
    let mut single_layers = Vec::new();
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
                return Err(invalid(format!("index {} lists a bad digest \"{}\"", manifest.digest, entry.digest)));
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
        let doc = parse_image_manifest(image, &manifest)?;
        let config = registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?;
        let platform: PlatformDoc = serde_json::from_slice(&config).unwrap_or_default();
        let key = platform.key().unwrap_or_else(|| "unknown".to_string());
        platforms.insert(key, manifest.digest.clone());
        single_config = Some(config);
        single_layers = doc.layers;
    }
    Ok(Observation {
        digest: manifest.digest,
        media_type: manifest.media_type,
        platforms,
        single_config,
        single_layers,
    })
}

/// The config blob of every selected platform (one manifest GET and one blob GET per platform of an
/// index; nothing more for a single manifest, whose config the observation already holds).
pub async fn platform_configs(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
) -> Result<BTreeMap<String, bytes::Bytes>, RegistryError> {
    if let Some(config) = &observation.single_config {
        return Ok(observation.platforms.keys().map(|k| (k.clone(), config.clone())).collect());
    }
    let mut configs = BTreeMap::new();
    for (platform, digest) in observation.selected(filter) {
        let manifest = registry.get_manifest(image, &digest).await?;
        let doc = parse_image_manifest(image, &manifest)?;
        configs.insert(platform, registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?);
    }
    Ok(configs)
}

/// The CNB metadata of every selected platform of an observed image (run image unresolved).
pub async fn builder_metadata(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
) -> Result<PinnedMetadata, RegistryError> {
    metadata_of(registry, image, observation, filter, false).await
}

/// [`builder_metadata`] with each platform's OS package list, as a pin keeps it (an SBOM layer
/// costs a blob GET, which `resolve` has no use for).
pub async fn pin_metadata(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
) -> Result<PinnedMetadata, RegistryError> {
    metadata_of(registry, image, observation, filter, true).await
}

async fn metadata_of(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
    with_packages: bool,
) -> Result<PinnedMetadata, RegistryError> {
    let packages_of = async |config: &[u8], layers: &[LayerDoc]| match with_packages {
        true => platform_packages(registry, image, config, layers).await,
        false => None,
    };
    if let Some(config) = &observation.single_config {
        let metadata = cnb::platform_metadata(config);
        let packages = packages_of(config, &observation.single_layers).await;
        let keys = || observation.platforms.keys().cloned();
        return Ok(PinnedMetadata {
            platforms: keys().map(|k| (k, metadata.clone())).collect(),
            run_image: None,
            packages: packages.map(|p| keys().map(|k| (k, p.clone())).collect()).unwrap_or_default(),
        });
    }
    // One config blob at a time, parsed and dropped: a multi-arch builder's configs (up to 8 MiB
    // each) are never all held at once.
    let mut metadata = PinnedMetadata::default();
    for (platform, digest) in observation.selected(filter) {
        let manifest = registry.get_manifest(image, &digest).await?;
        let doc = parse_image_manifest(image, &manifest)?;
        let config = registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?;
        metadata.platforms.insert(platform.clone(), cnb::platform_metadata(&config));
        if let Some(packages) = packages_of(&config, &doc.layers).await {
            metadata.packages.insert(platform, packages);
        }
    }
    Ok(metadata)
}

/// The package lists of every selected platform of an observed run image: nothing more to fetch
/// for a single manifest carrying the Paketo label; a platform manifest and config per platform of
/// an index; one layer blob per platform whose list is in an SBOM layer. A fetch that fails is a
/// note in that platform's list: a run image's move is reported whatever its lists say.
pub async fn run_image_packages(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
) -> BTreeMap<String, Packages> {
    let mut lists = BTreeMap::new();
    if let Some(config) = &observation.single_config {
        if let Some(packages) = platform_packages(registry, image, config, &observation.single_layers).await {
            lists.extend(observation.platforms.keys().map(|k| (k.clone(), packages.clone())));
        }
        return lists;
    }
    for (platform, digest) in observation.selected(filter) {
        let config = async {
            let manifest = registry.get_manifest(image, &digest).await?;
            let doc = parse_image_manifest(image, &manifest)?;
            Ok::<_, RegistryError>((registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?, doc.layers))
        };
        let packages = match config.await {
            Ok((config, layers)) => platform_packages(registry, image, &config, &layers).await,
            Err(err) => Some(Packages::unreadable(format!("the image config could not be read: {err}"))),
        };
        if let Some(packages) = packages {
            lists.insert(platform, packages);
        }
    }
    lists
}

/// An app image as found in its registry.
#[derive(Debug, Clone)]
pub struct AppImage {
    pub digest: String,
    pub platform_digest: String,
    /// `Ok(None)`: not built by a CNB lifecycle; `Err`: labels unreadable.
    pub metadata: Result<Option<AppMetadata>, AppMetadataError>,
}

/// Why an app image's CNB metadata cannot be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppMetadataError {
    #[error(transparent)]
    Labels(#[from] cnb::MetadataError),
    #[error("{image}: no config for {platform}")]
    NoConfig { image: String, platform: String },
}

/// Reads an app image (its linux/amd64 platform when it is an index). `Ok(None)`: no such image.
pub async fn app_metadata(registry: &Registry, image: &ImageRef) -> Result<Option<AppImage>, RegistryError> {
    let manifest = match registry.get_manifest(image, image.manifest_reference()).await {
        Ok(m) => m,
        Err(RegistryError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let observation = observation_from(registry, image, manifest).await?;
    let preferred = observation
        .platforms
        .keys()
        .find(|k| k.as_str() == "linux/amd64")
        .or_else(|| observation.platforms.keys().next())
        .cloned()
        .ok_or_else(|| RegistryError::InvalidResponse {
            registry: image.registry().to_string(),
            detail: format!("{image} has no platform image"),
        })?;
    let filter = Platform::parse(&preferred).map(|p| vec![p]);
    let configs = platform_configs(registry, image, &observation, filter.as_deref()).await?;
    let metadata = match configs.get(&preferred) {
        Some(config) => cnb::parse_app(config).map_err(AppMetadataError::from),
        None => Err(AppMetadataError::NoConfig { image: image.to_string(), platform: preferred.clone() }),
    };
    Ok(Some(AppImage {
        digest: observation.digest.clone(),
        platform_digest: observation.platforms.get(&preferred).cloned().unwrap_or_default(),
        metadata,
    }))
}

/// What `resolve` prints: the immutable reference of a tag and its platforms.
#[derive(Debug, Clone, Serialize)]
pub struct Resolution {
    pub image: String,
    pub digest: String,
    pub reference: String,
    pub media_type: String,
    pub platforms: Vec<PlatformDigest>,
    /// CNB metadata of the preferred platform, when the image is a builder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builder: Option<BuilderMetadata>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlatformDigest {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub digest: String,
}

/// Resolves a reference: one manifest GET, then the preferred platform's config for CNB metadata.
pub async fn resolve(registry: &Registry, image: &ImageRef) -> Result<Resolution, RegistryError> {
    let manifest = registry.get_manifest(image, image.manifest_reference()).await?;
    let observation = observation_from(registry, image, manifest).await?;
    let preferred = observation
        .platforms
        .keys()
        .find(|k| k.as_str() == "linux/amd64")
        .or_else(|| observation.platforms.keys().next())
        .and_then(|k| Platform::parse(k.split('#').next().unwrap_or(k)));
    let filter = preferred.map(|p| vec![p]);
    let metadata = builder_metadata(registry, image, &observation, filter.as_deref()).await?;
    let builder = metadata.preferred().cloned();
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
        builder,
    })
}

/// Classifies the move from one builder reference to another, as `diff` prints it. Run images are
/// compared by name: the digests they had when each builder was published are not known. Two
/// images that are not builders but list OS packages (run images) compare as a run image move.
pub async fn diff(registry: &Registry, old: &ImageRef, new: &ImageRef) -> Result<Change, RegistryError> {
    let mut sides = Vec::new();
    for image in [old, new] {
        let manifest = registry.get_manifest(image, image.manifest_reference()).await?;
        let observation = observation_from(registry, image, manifest).await?;
        let metadata = pin_metadata(registry, image, &observation, None).await?;
        sides.push((image.pinned(&observation.digest), metadata));
    }
    let base_image = |m: &PinnedMetadata| {
        !m.platforms.is_empty() && m.platforms.values().all(|p| matches!(p, cnb::PlatformMetadata::NotBuilder))
    };
    let [(old_ref, old_meta), (new_ref, new_meta)] = <[_; 2]>::try_from(sides).expect("two sides");
    if base_image(&old_meta) && base_image(&new_meta) && !(old_meta.packages.is_empty() && new_meta.packages.is_empty())
    {
        return Ok(Change::run_image_moved(old_ref, new_ref).with_packages(&old_meta.packages, &new_meta.packages));
    }
    Ok(cnb::classify(&old_meta, &new_meta))
}

impl Resolution {
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "{}\n  digest:     {}\n  reference:  {}\n  media type: {}\n",
            self.image,
            self.digest,
            self.reference,
            escape(&self.media_type)
        );
        for p in &self.platforms {
            let mut platform = format!("{}/{}", p.os, p.architecture);
            if let Some(v) = &p.variant {
                platform = format!("{platform}/{v}");
            }
            out.push_str(&format!("  {:<11} {}\n", format!("{}:", escape(&platform)), p.digest));
        }
        if let Some(b) = &self.builder {
            out.push_str(&cnb::describe(b));
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
            single_config: None,
            single_layers: Vec::new(),
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
        assert_eq!(obs.selected(Some(&arm64)).keys().collect::<Vec<_>>(), ["linux/arm64/v8"]);
        let v6 = [Platform::parse("linux/arm/v6").unwrap()];
        assert!(obs.selected(Some(&v6)).is_empty());
    }
}
