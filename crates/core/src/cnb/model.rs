//! The builder model: what a builder image says about itself, per platform, and what is kept with
//! a pin so the next move is compared without refetching.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::packages::Packages;
use crate::reference::ImageRef;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Buildpack {
    pub id: String,
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildpackLayer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_diff_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunImage {
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OrderEntry {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platform_apis: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buildpack_apis: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    pub os: String,
    pub arch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedBy {
    pub name: Option<String>,
    pub version: Option<String>,
}

/// What one platform of a builder image says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuilderMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub stack_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixins: Vec<String>,
    /// As listed in `io.buildpacks.builder.metadata`.
    #[serde(default)]
    pub buildpacks: Vec<Buildpack>,
    /// `io.buildpacks.buildpack.layers`: id → version → layer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub layers: BTreeMap<String, BTreeMap<String, BuildpackLayer>>,
    /// `io.buildpacks.buildpack.order`; `None` when the label is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<Vec<OrderEntry>>>,
    /// `images[]`, then `stack.runImage`; the first is the run image.
    #[serde(default)]
    pub run_images: Vec<RunImage>,
    #[serde(default)]
    pub lifecycle: Lifecycle,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<CreatedBy>,
    #[serde(default)]
    pub target: Target,
    /// `io.buildpacks.base.*` labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub base_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    /// Diff ids of every layer that is not a buildpack's: build image, lifecycle, order/stack files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_layers: Vec<String>,
}

impl BuilderMetadata {
    /// The run image (tag) the builder names.
    pub fn run_image(&self) -> Option<&str> {
        self.run_images.first().map(|r| r.image.as_str())
    }

    /// (id, version) → layer diff id of every buildpack, from the layers label when present.
    pub(super) fn buildpack_set(&self) -> BTreeMap<(String, String), Option<String>> {
        if !self.layers.is_empty() {
            return self
                .layers
                .iter()
                .flat_map(|(id, versions)| {
                    versions.iter().map(move |(v, l)| ((id.clone(), v.clone()), l.layer_diff_id.clone()))
                })
                .collect();
        }
        self.buildpacks.iter().map(|b| ((b.id.clone(), b.version.clone().unwrap_or_default()), None)).collect()
    }
}

/// What is known about one platform of a pinned image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum PlatformMetadata {
    Builder(Box<BuilderMetadata>),
    /// The image carries no `io.buildpacks.builder.metadata` label.
    NotBuilder,
    /// A label could not be read.
    Unreadable {
        error: String,
    },
}

/// The ledger name of a run image watch.
pub fn run_watch_name(image: &ImageRef) -> String {
    format!("run:{image}")
}

/// The run image of a pin, resolved to an immutable reference when it was pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunImagePin {
    pub image: String,
    pub reference: Option<String>,
    /// The run image's package lists at `reference` (platform → list), from its watch's pin.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, Packages>,
}

/// The metadata kept with a builder pin, so the next move is compared without refetching.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedMetadata {
    pub platforms: BTreeMap<String, PlatformMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<RunImagePin>,
    /// Platform → OS packages, for images that list theirs (run images, and builders through
    /// their build image's labels).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub packages: BTreeMap<String, Packages>,
    /// Platform → the OS release a base (run) image's labels name; builders say theirs in their
    /// metadata.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub releases: BTreeMap<String, BaseRelease>,
    /// What was not read or not kept (an index cut to `max_platforms`, pieces over the budget).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl PinnedMetadata {
    /// The builder metadata of the preferred platform (linux/amd64, else the first readable one).
    pub fn preferred(&self) -> Option<&BuilderMetadata> {
        let builders = || {
            self.platforms.iter().filter_map(|(k, p)| match p {
                PlatformMetadata::Builder(b) => Some((k, b.as_ref())),
                _ => None,
            })
        };
        builders().find(|(k, _)| k.as_str() == "linux/amd64").or_else(|| builders().next()).map(|(_, b)| b)
    }
}

/// The OS release a base image says it is, from its labels (each absent when unlabelled).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseRelease {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro_version: Option<String>,
}

impl BaseRelease {
    /// `ubuntu 22.04`, when the distro labels are there.
    pub(super) fn distro(&self) -> Option<String> {
        match (&self.distro_name, &self.distro_version) {
            (None, None) => None,
            (name, version) => {
                Some([name.as_deref(), version.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" "))
            }
        }
    }
}
