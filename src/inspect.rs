//! Reads what a digest is: an index and its platform manifests, or one image manifest whose config
//! names its platform, and the config blobs whose CNB labels say what a builder or app contains.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod index;
mod packages;

pub use index::{IndexError, IndexPlatforms, MAX_PLATFORM_KEY, read_index};
pub use packages::{LayerDoc, MAX_SBOM_LAYER_BYTES, platform_packages, read_sbom_layer};

use crate::config::Platform;
use crate::registry::{DOCKER_MANIFEST_LIST, MAX_CONFIG_BYTES, Manifest, OCI_INDEX, Registry, RegistryError};
use builder_monitor_core::cnb::{self, AppMetadata, BuilderMetadata, Change, MAX_PINNED_BYTES, PinnedMetadata};
use builder_monitor_core::packages::Packages;
use builder_monitor_core::reference::ImageRef;
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
    /// What was not read: an index's entries over `max_platforms`, its duplicates.
    pub notes: Vec<String>,
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
struct ImageManifestDoc {
    config: ConfigDescriptor,
    #[serde(default)]
    layers: Vec<LayerDoc>,
}

#[derive(Deserialize)]
struct ConfigDescriptor {
    digest: String,
}

fn parse_image_manifest(image: &ImageRef, manifest: &Manifest) -> Result<ImageManifestDoc, RegistryError> {
    serde_json::from_slice(&manifest.bytes).map_err(|e| RegistryError::InvalidResponse {
        registry: image.registry().to_string(),
        detail: format!("manifest {} is not an image manifest: {e}", manifest.digest),
    })
}

pub fn is_index(media_type: &str) -> bool {
    media_type == OCI_INDEX || media_type == DOCKER_MANIFEST_LIST
}

/// Fetches `digest` of `image`'s repository and lists its platforms (at most `max_platforms`).
pub async fn observe(
    registry: &Registry,
    image: &ImageRef,
    digest: &str,
    max_platforms: usize,
) -> Result<Observation, RegistryError> {
    let manifest = registry.get_manifest(image, digest).await?;
    observation_from(registry, image, manifest, max_platforms).await
}

/// Lists the platforms of an already fetched manifest (fetching a config blob for single images):
/// of an index, its first `max_platforms` distinct platform entries (see [`read_index`]).
pub async fn observation_from(
    registry: &Registry,
    image: &ImageRef,
    manifest: Manifest,
    max_platforms: usize,
) -> Result<Observation, RegistryError> {
    if is_index(&manifest.media_type) {
        let read = read_index(&manifest.bytes, max_platforms).map_err(|e| RegistryError::InvalidResponse {
            registry: image.registry().to_string(),
            detail: format!("index {} {e}", manifest.digest),
        })?;
        return Ok(Observation {
            digest: manifest.digest,
            media_type: manifest.media_type,
            platforms: read.platforms,
            single_config: None,
            single_layers: Vec::new(),
            notes: read.note.into_iter().collect(),
        });
    }
    let doc = parse_image_manifest(image, &manifest)?;
    let config = registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?;
    let key = index::config_platform(&config).unwrap_or_else(|| "unknown".to_string());
    Ok(Observation {
        platforms: [(key, manifest.digest.clone())].into(),
        digest: manifest.digest,
        media_type: manifest.media_type,
        single_config: Some(config),
        single_layers: doc.layers,
        notes: Vec::new(),
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
    let mut metadata = PinnedMetadata { notes: observation.notes.clone(), ..PinnedMetadata::default() };
    if let Some(config) = &observation.single_config {
        let platform = cnb::platform_metadata(config);
        let release = base_release(&platform, config);
        let packages = packages_of(config, &observation.single_layers).await;
        for key in observation.platforms.keys() {
            metadata.platforms.insert(key.clone(), platform.clone());
            metadata.packages.extend(packages.clone().map(|p| (key.clone(), p)));
            metadata.releases.extend(release.clone().map(|r| (key.clone(), r)));
        }
        metadata.note_cut_lists(&image.pinned(&observation.digest));
        metadata.fit(MAX_PINNED_BYTES);
        return Ok(metadata);
    }
    // One config blob at a time, parsed and dropped: a multi-arch builder's configs (up to 8 MiB
    // each) are never all held at once. A manifest listed under several platforms is read once,
    // and the pin is cut to its budget as each platform comes, so what is held stays near it.
    type Read = (cnb::PlatformMetadata, Option<Packages>, Option<cnb::BaseRelease>);
    let mut read: BTreeMap<String, Read> = BTreeMap::new();
    for (platform, digest) in observation.selected(filter) {
        let (platform_metadata, packages, release) = match read.get(&digest) {
            Some(kept) => kept.clone(),
            None => {
                let manifest = registry.get_manifest(image, &digest).await?;
                let doc = parse_image_manifest(image, &manifest)?;
                let config = registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?;
                let platform_metadata = cnb::platform_metadata(&config);
                let release = base_release(&platform_metadata, &config);
                (platform_metadata, packages_of(&config, &doc.layers).await, release)
            }
        };
        metadata.platforms.insert(platform.clone(), platform_metadata);
        metadata.packages.extend(packages.map(|p| (platform.clone(), p)));
        metadata.releases.extend(release.clone().map(|r| (platform.clone(), r)));
        metadata.fit(MAX_PINNED_BYTES);
        let kept = (metadata.platforms[&platform].clone(), metadata.packages.get(&platform).cloned(), release);
        read.insert(digest, kept);
    }
    metadata.note_cut_lists(&image.pinned(&observation.digest));
    metadata.fit(MAX_PINNED_BYTES);
    Ok(metadata)
}

/// The OS release a platform that is not a builder says it is (a builder's is in its metadata).
fn base_release(platform: &cnb::PlatformMetadata, config: &[u8]) -> Option<cnb::BaseRelease> {
    matches!(platform, cnb::PlatformMetadata::NotBuilder).then(|| cnb::base_release(config)).flatten()
}

/// The package lists and OS releases of every selected platform of an observed run image, as its pin keeps them
/// (with the observation's notes, cut to the pin's budget): nothing more to fetch for a single
/// manifest carrying the Paketo label; a platform manifest and config per platform of an index
/// (once per digest); one layer blob per platform whose list is in an SBOM layer. A fetch that
/// fails is a note in that platform's list: a run image's move is reported whatever its lists say.
pub async fn run_image_packages(
    registry: &Registry,
    image: &ImageRef,
    observation: &Observation,
    filter: Option<&[Platform]>,
) -> PinnedMetadata {
    let mut metadata = PinnedMetadata { notes: observation.notes.clone(), ..PinnedMetadata::default() };
    if let Some(config) = &observation.single_config {
        if let Some(packages) = platform_packages(registry, image, config, &observation.single_layers).await {
            metadata.packages.extend(observation.platforms.keys().map(|k| (k.clone(), packages.clone())));
        }
        if let Some(release) = cnb::base_release(config) {
            metadata.releases.extend(observation.platforms.keys().map(|k| (k.clone(), release.clone())));
        }
        metadata.note_cut_lists(&image.pinned(&observation.digest));
        metadata.fit(MAX_PINNED_BYTES);
        return metadata;
    }
    let mut read: BTreeMap<String, (Option<Packages>, Option<cnb::BaseRelease>)> = BTreeMap::new();
    for (platform, digest) in observation.selected(filter) {
        let (packages, release) = match read.get(&digest) {
            Some(kept) => kept.clone(),
            None => {
                let config = async {
                    let manifest = registry.get_manifest(image, &digest).await?;
                    let doc = parse_image_manifest(image, &manifest)?;
                    let config = registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?;
                    Ok::<_, RegistryError>((config, doc.layers))
                };
                match config.await {
                    Ok((config, layers)) => {
                        (platform_packages(registry, image, &config, &layers).await, cnb::base_release(&config))
                    }
                    Err(err) => {
                        (Some(Packages::unreadable(format!("the image config could not be read: {err}"))), None)
                    }
                }
            }
        };
        metadata.packages.extend(packages.map(|p| (platform.clone(), p)));
        metadata.releases.extend(release.clone().map(|r| (platform.clone(), r)));
        metadata.fit(MAX_PINNED_BYTES);
        read.insert(digest, (metadata.packages.get(&platform).cloned(), release));
    }
    metadata.note_cut_lists(&image.pinned(&observation.digest));
    metadata.fit(MAX_PINNED_BYTES);
    metadata
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
pub async fn app_metadata(
    registry: &Registry,
    image: &ImageRef,
    max_platforms: usize,
) -> Result<Option<AppImage>, RegistryError> {
    let manifest = match registry.get_manifest(image, image.manifest_reference()).await {
        Ok(m) => m,
        Err(RegistryError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let observation = observation_from(registry, image, manifest, max_platforms).await?;
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
    /// What was not read or not kept: index entries over `max_platforms` or duplicated, metadata
    /// over the size limits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlatformDigest {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub digest: String,
}

/// Resolves a reference: one manifest GET, then the preferred platform's config for CNB metadata.
pub async fn resolve(registry: &Registry, image: &ImageRef, max_platforms: usize) -> Result<Resolution, RegistryError> {
    let manifest = registry.get_manifest(image, image.manifest_reference()).await?;
    let observation = observation_from(registry, image, manifest, max_platforms).await?;
    let preferred = observation
        .platforms
        .keys()
        .find(|k| k.as_str() == "linux/amd64")
        .or_else(|| observation.platforms.keys().next())
        .and_then(|k| Platform::parse(k.split('#').next().unwrap_or(k)));
    let filter = preferred.map(|p| vec![p]);
    let mut metadata = builder_metadata(registry, image, &observation, filter.as_deref()).await?;
    let builder = metadata.preferred().cloned();
    let notes = std::mem::take(&mut metadata.notes);
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
        notes,
    })
}

/// Classifies the move from one builder reference to another, as `diff` prints it. Run images are
/// compared by name: the digests they had when each builder was published are not known. Two
/// images that are not builders but list OS packages (run images) compare as a run image move.
/// Each side is read as a pin would be: at most `max_platforms` platforms, within the pin's budget;
/// what was left out on either side is in the change's `notes`. With `vulns`, the change says
/// what the move fixes.
pub async fn diff(
    registry: &Registry,
    old: &ImageRef,
    new: &ImageRef,
    max_platforms: usize,
    vulns: Option<&crate::vulns::Vulns>,
) -> Result<Change, RegistryError> {
    let mut sides = Vec::new();
    let mut notes = Vec::new();
    for (side, image) in [("old", old), ("new", new)] {
        let manifest = registry.get_manifest(image, image.manifest_reference()).await?;
        let observation = observation_from(registry, image, manifest, max_platforms).await?;
        let mut metadata = pin_metadata(registry, image, &observation, None).await?;
        notes.extend(std::mem::take(&mut metadata.notes).into_iter().map(|n| format!("{side} image: {n}")));
        sides.push((image.pinned(&observation.digest), metadata));
    }
    let not_builder = |m: &PinnedMetadata| {
        !m.platforms.is_empty() && m.platforms.values().all(|p| matches!(p, cnb::PlatformMetadata::NotBuilder))
    };
    let [(old_ref, old_meta), (new_ref, new_meta)] = <[_; 2]>::try_from(sides).expect("two sides");
    let both_base = not_builder(&old_meta) && not_builder(&new_meta);
    let change = if both_base && (cnb::is_base_image(&old_meta) || cnb::is_base_image(&new_meta)) {
        // What the daemon says of the same move of a watched run image.
        cnb::classify_run_image(old_ref, new_ref, &old_meta, &new_meta)
    } else if both_base {
        // Two run images (or any two base images) that list no packages: all there is to say.
        Change::unknown(
            "neither image is a CNB builder or run image (no io.buildpacks.stack.id or \
             io.buildpacks.base.distro.* label), and neither lists its OS packages (no io.paketo.stack.packages \
             label, no SBOM layer): only their digests can be compared",
        )
    } else {
        cnb::classify(&old_meta, &new_meta)
    };
    // What the move fixes, as the daemon matches the same move of a watch (`vulns`: the config's,
    // read for the new image's releases).
    let index = match vulns {
        Some(vulns) => {
            let mut names = cnb::package_names(&old_meta);
            names.extend(cnb::package_names(&new_meta));
            Some(vulns.index_for(cnb::releases_of(&new_meta).values(), &names).await)
        }
        None => None,
    };
    let mut change = change.with_fixes_of_pins(index.as_deref(), &old_meta, &new_meta);
    change.notes = notes;
    Ok(change)
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
        for note in &self.notes {
            out.push_str(&format!("  note:       {}\n", escape(note)));
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
            notes: Vec::new(),
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
