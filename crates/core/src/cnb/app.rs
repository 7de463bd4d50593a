//! App images: the lifecycle metadata an app image carries (its run image, its buildpacks), read
//! from its config labels.

use serde::{Deserialize, Serialize};

use super::limits::bounded;
use super::model::{Buildpack, Target};
use super::parse::{ModuleDoc, StackDoc, env_value, label, null_default, parse_config, target};
use super::{BUILD_METADATA, LIFECYCLE_METADATA, MetadataError, STACK_ID};

/// The run image an app image was built on or last rebased onto.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRunImage {
    pub image: Option<String>,
    #[serde(default)]
    pub mirrors: Vec<String>,
    /// Diff id of the run image's top layer.
    pub top_layer: Option<String>,
    /// Digest reference (or image id) that uniquely identifies the run image.
    pub reference: Option<String>,
}

/// What an app image built by a CNB lifecycle says about how it was built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppMetadata {
    pub run_image: Option<AppRunImage>,
    pub buildpacks: Vec<Buildpack>,
    pub launcher_version: Option<String>,
    pub stack_id: Option<String>,
    pub platform_api: Option<String>,
    pub target: Target,
}

impl AppMetadata {
    /// The digest part of the run image reference, when it is a digest reference.
    pub fn run_image_digest(&self) -> Option<&str> {
        let reference = self.run_image.as_ref()?.reference.as_deref()?;
        let digest = reference.rsplit('@').next()?;
        crate::reference::is_sha256_digest(digest).then_some(digest)
    }
}

#[derive(Deserialize, Default)]
pub(super) struct LifecycleMetadataDoc {
    #[serde(rename = "runImage", default)]
    run_image: Option<AppRunImageDoc>,
    #[serde(default, deserialize_with = "null_default")]
    stack: StackDoc,
    #[serde(default, deserialize_with = "bounded")]
    buildpacks: Vec<LayersBuildpackDoc>,
}

#[derive(Deserialize, Default)]
pub(super) struct AppRunImageDoc {
    #[serde(default)]
    image: Option<String>,
    #[serde(default, deserialize_with = "bounded")]
    mirrors: Vec<String>,
    #[serde(rename = "topLayer", default)]
    top_layer: Option<String>,
    #[serde(default)]
    reference: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct LayersBuildpackDoc {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    version: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct BuildMetadataDoc {
    #[serde(default, deserialize_with = "bounded")]
    buildpacks: Vec<ModuleDoc>,
    #[serde(default, deserialize_with = "null_default")]
    launcher: LauncherDoc,
}

#[derive(Deserialize, Default)]
pub(super) struct LauncherDoc {
    #[serde(default)]
    version: Option<String>,
}

/// Reads an app image. `Ok(None)`: not built by a CNB lifecycle (no lifecycle metadata label).
pub fn parse_app(config: &[u8]) -> Result<Option<AppMetadata>, MetadataError> {
    let doc = parse_config(config)?;
    let labels = &doc.config.labels;
    let Some(lifecycle) = label::<LifecycleMetadataDoc>(labels, LIFECYCLE_METADATA)? else {
        return Ok(None);
    };
    let build: BuildMetadataDoc = label(labels, BUILD_METADATA)?.unwrap_or_default();
    let run_image = match lifecycle.run_image {
        Some(r) => {
            Some(AppRunImage { image: r.image, mirrors: r.mirrors, top_layer: r.top_layer, reference: r.reference })
        }
        None => lifecycle.stack.run_image.map(|r| AppRunImage {
            image: r.image,
            mirrors: r.mirrors,
            top_layer: None,
            reference: None,
        }),
    };
    let mut buildpacks: Vec<Buildpack> = if build.buildpacks.is_empty() {
        lifecycle
            .buildpacks
            .into_iter()
            .filter_map(|b| Some(Buildpack { id: b.key?, version: b.version, homepage: None }))
            .collect()
    } else {
        build
            .buildpacks
            .into_iter()
            .filter_map(|m| Some(Buildpack { id: m.id?, version: m.version, homepage: m.homepage }))
            .collect()
    };
    buildpacks.sort();
    Ok(Some(AppMetadata {
        run_image,
        buildpacks,
        launcher_version: build.launcher.version,
        stack_id: labels.get(STACK_ID).cloned(),
        platform_api: env_value(&doc.config.env, "CNB_PLATFORM_API").map(str::to_string),
        target: target(&doc),
    }))
}
