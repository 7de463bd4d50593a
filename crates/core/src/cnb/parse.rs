//! Reading the `io.buildpacks.*` labels of an image config into the builder model, within the
//! size limits.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::Deserializer;
use serde::de::DeserializeOwned;

use super::limits::{Bounded, OVER_LIMIT, bounded, over_limit};
use super::model::{
    BuilderMetadata, Buildpack, BuildpackLayer, CreatedBy, Lifecycle, OrderEntry, PlatformMetadata, RunImage, Target,
};
use super::{
    BASE_PREFIX, BUILDER_METADATA, BUILDPACK_LAYERS, BUILDPACK_ORDER, LIFECYCLE_APIS, LIFECYCLE_VERSION, MAX_ENTRIES,
    MAX_LABEL_BYTES, MetadataError, STACK_ID, STACK_MIXINS,
};

/// The `io.buildpacks.*` labels of a config; every other label is skipped without being copied,
/// and one over [`MAX_LABEL_BYTES`] stops the parse.
fn cnb_labels<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct LabelValue;
    impl<'de> serde::de::DeserializeSeed<'de> for LabelValue {
        type Value = String;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl serde::de::Visitor<'_> for LabelValue {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            if v.len() > MAX_LABEL_BYTES {
                return Err(over_limit(format_args!("a label is {} bytes, more than {MAX_LABEL_BYTES}", v.len())));
            }
            Ok(v.to_string())
        }
    }
    struct LabelsVisitor;
    impl<'de> serde::de::Visitor<'de> for LabelsVisitor {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of labels")
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if !key.starts_with("io.buildpacks.") {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                let value = map.next_value_seed(LabelValue).map_err(|e: A::Error| {
                    let message = e.to_string();
                    match message.strip_prefix(OVER_LIMIT) {
                        Some(why) => over_limit(format_args!("label {key}: {why}")),
                        None => e,
                    }
                })?;
                if out.len() == MAX_ENTRIES {
                    return Err(over_limit(format_args!("more than {MAX_ENTRIES} io.buildpacks labels")));
                }
                out.insert(key, value);
            }
            Ok(out)
        }
    }
    d.deserialize_any(LabelsVisitor)
}

/// A serde error, as over the limits or malformed.
fn metadata_error(err: serde_json::Error, malformed: impl FnOnce(String) -> MetadataError) -> MetadataError {
    let message = err.to_string();
    match message.find(OVER_LIMIT) {
        Some(at) => MetadataError::OverLimit(message[at + OVER_LIMIT.len()..].to_string()),
        None => malformed(message),
    }
}

pub(super) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
pub(super) struct ImageConfigDoc {
    #[serde(default, deserialize_with = "null_default")]
    architecture: String,
    #[serde(default, deserialize_with = "null_default")]
    os: String,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    pub(super) config: ContainerConfigDoc,
    #[serde(default, deserialize_with = "null_default")]
    rootfs: RootFsDoc,
}

#[derive(Deserialize, Default)]
pub(super) struct ContainerConfigDoc {
    #[serde(rename = "Labels", default, deserialize_with = "cnb_labels")]
    pub(super) labels: BTreeMap<String, String>,
    #[serde(rename = "Env", default, deserialize_with = "bounded")]
    pub(super) env: Vec<String>,
}

#[derive(Deserialize, Default)]
struct RootFsDoc {
    #[serde(default, deserialize_with = "bounded")]
    diff_ids: Vec<String>,
}

#[derive(Deserialize, Default)]
struct BuilderMetadataDoc {
    #[serde(default)]
    description: Option<String>,
    #[serde(default, deserialize_with = "bounded")]
    buildpacks: Vec<ModuleDoc>,
    #[serde(default, deserialize_with = "null_default")]
    stack: StackDoc,
    #[serde(default, deserialize_with = "bounded")]
    images: Vec<RunImageDoc>,
    #[serde(default, deserialize_with = "null_default")]
    lifecycle: LifecycleDoc,
    #[serde(default, rename = "createdBy")]
    created_by: Option<CreatedBy>,
}

#[derive(Deserialize)]
pub(super) struct ModuleDoc {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) version: Option<String>,
    #[serde(default)]
    pub(super) homepage: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct StackDoc {
    #[serde(rename = "runImage", default)]
    pub(super) run_image: Option<RunImageDoc>,
}

#[derive(Deserialize, Default)]
pub(super) struct RunImageDoc {
    #[serde(default)]
    pub(super) image: Option<String>,
    #[serde(default, deserialize_with = "bounded")]
    pub(super) mirrors: Vec<String>,
}

#[derive(Deserialize, Default)]
struct LifecycleDoc {
    #[serde(default)]
    version: Option<String>,
    /// Older shape: one API version each.
    #[serde(default)]
    api: Option<LegacyApisDoc>,
    #[serde(default)]
    apis: Option<ApisDoc>,
}

#[derive(Deserialize, Default)]
struct LegacyApisDoc {
    #[serde(default)]
    buildpack: Option<String>,
    #[serde(default)]
    platform: Option<String>,
}

#[derive(Deserialize, Default)]
struct ApisDoc {
    #[serde(default, deserialize_with = "null_default")]
    buildpack: ApiSetDoc,
    #[serde(default, deserialize_with = "null_default")]
    platform: ApiSetDoc,
}

#[derive(Deserialize, Default)]
struct ApiSetDoc {
    #[serde(default, deserialize_with = "bounded")]
    deprecated: Vec<String>,
    #[serde(default, deserialize_with = "bounded")]
    supported: Vec<String>,
}

impl ApiSetDoc {
    fn all(self) -> Vec<String> {
        let mut all = self.supported;
        all.extend(self.deprecated);
        // As versions (0.7 before 0.14), not as text.
        all.sort_by_cached_key(|v| {
            (v.split('.').map(|part| part.parse::<u64>().unwrap_or(u64::MAX)).collect::<Vec<_>>(), v.clone())
        });
        all.dedup();
        all
    }
}

#[derive(Deserialize)]
struct OrderGroupDoc {
    #[serde(default, deserialize_with = "bounded")]
    group: Vec<OrderEntryDoc>,
}

#[derive(Deserialize)]
struct OrderEntryDoc {
    id: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    optional: bool,
}

#[derive(Deserialize)]
struct LayerDoc {
    #[serde(default, rename = "layerDiffID")]
    layer_diff_id: Option<String>,
    #[serde(default)]
    api: Option<String>,
    #[serde(default)]
    homepage: Option<String>,
}

pub(super) fn label<T: DeserializeOwned>(
    labels: &BTreeMap<String, String>,
    name: &'static str,
) -> Result<Option<T>, MetadataError> {
    match labels.get(name) {
        None => Ok(None),
        Some(text) if text.trim().is_empty() => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| metadata_error(e, |detail| MetadataError::Label { label: name, detail })),
    }
}

pub(super) fn parse_config(config: &[u8]) -> Result<ImageConfigDoc, MetadataError> {
    serde_json::from_slice(config).map_err(|e| metadata_error(e, MetadataError::Config))
}

pub(super) fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

pub(super) fn target(doc: &ImageConfigDoc) -> Target {
    let labels = &doc.config.labels;
    Target {
        os: doc.os.clone(),
        arch: doc.architecture.clone(),
        variant: doc.variant.clone().filter(|v| !v.is_empty()),
        distro_name: labels.get("io.buildpacks.base.distro.name").cloned(),
        distro_version: labels.get("io.buildpacks.base.distro.version").cloned(),
    }
}

/// Reads a builder from its image config. `Ok(None)`: not a builder (no builder metadata label).
pub fn parse_builder(config: &[u8]) -> Result<Option<BuilderMetadata>, MetadataError> {
    let doc = parse_config(config)?;
    let labels = &doc.config.labels;
    let Some(meta) = label::<BuilderMetadataDoc>(labels, BUILDER_METADATA)? else {
        return Ok(None);
    };
    let mixins: Vec<String> = label::<Bounded<Vec<String>>>(labels, STACK_MIXINS)?.map(|m| m.0).unwrap_or_default();
    let order = label::<Bounded<Vec<OrderGroupDoc>>>(labels, BUILDPACK_ORDER)?.map(|groups| {
        groups
            .0
            .into_iter()
            .map(|g| {
                g.group.into_iter().map(|e| OrderEntry { id: e.id, version: e.version, optional: e.optional }).collect()
            })
            .collect()
    });
    let layers: BTreeMap<String, BTreeMap<String, BuildpackLayer>> = label::<
        Bounded<BTreeMap<String, Bounded<BTreeMap<String, LayerDoc>>>>,
    >(labels, BUILDPACK_LAYERS)?
    .map(|l| l.0)
    .unwrap_or_default()
    .into_iter()
    .map(|(id, versions)| {
        let versions = versions
            .0
            .into_iter()
            .map(|(v, l)| (v, BuildpackLayer { layer_diff_id: l.layer_diff_id, api: l.api, homepage: l.homepage }))
            .collect();
        (id, versions)
    })
    .collect();
    let apis_label: Option<ApisDoc> = label(labels, LIFECYCLE_APIS)?;

    let mut run_images: Vec<RunImage> = Vec::new();
    for r in meta.images.into_iter().chain(meta.stack.run_image) {
        if let Some(image) = r.image.filter(|i| !i.trim().is_empty())
            && !run_images.iter().any(|known| known.image == image)
        {
            run_images.push(RunImage { image, mirrors: r.mirrors });
        }
    }
    let mut buildpacks: Vec<Buildpack> = meta
        .buildpacks
        .into_iter()
        .filter_map(|m| {
            Some(Buildpack { id: m.id.filter(|i| !i.is_empty())?, version: m.version, homepage: m.homepage })
        })
        .collect();
    buildpacks.sort();
    buildpacks.dedup();

    let lifecycle_doc = meta.lifecycle;
    let (platform_apis, buildpack_apis) = match lifecycle_doc.apis.or(apis_label) {
        Some(apis) => (apis.platform.all(), apis.buildpack.all()),
        None => {
            let legacy = lifecycle_doc.api.unwrap_or_default();
            (legacy.platform.into_iter().collect(), legacy.buildpack.into_iter().collect())
        }
    };
    let lifecycle = Lifecycle {
        version: lifecycle_doc.version.filter(|v| !v.is_empty()).or_else(|| labels.get(LIFECYCLE_VERSION).cloned()),
        platform_apis,
        buildpack_apis,
    };

    let buildpack_layers: BTreeSet<&str> =
        layers.values().flat_map(|v| v.values()).filter_map(|l| l.layer_diff_id.as_deref()).collect();
    let base_layers = doc.rootfs.diff_ids.iter().filter(|d| !buildpack_layers.contains(d.as_str())).cloned().collect();

    Ok(Some(BuilderMetadata {
        description: meta.description.filter(|d| !d.is_empty()),
        stack_id: labels.get(STACK_ID).cloned().filter(|s| !s.is_empty()),
        mixins,
        buildpacks,
        layers,
        order,
        run_images,
        lifecycle,
        created_by: meta.created_by,
        target: target(&doc),
        base_labels: labels
            .iter()
            .filter(|(k, _)| k.starts_with(BASE_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        user_id: env_value(&doc.config.env, "CNB_USER_ID").and_then(|v| v.trim().parse().ok()),
        group_id: env_value(&doc.config.env, "CNB_GROUP_ID").and_then(|v| v.trim().parse().ok()),
        base_layers,
    }))
}

/// Turns a parse result into what is kept per platform.
pub fn platform_metadata(config: &[u8]) -> PlatformMetadata {
    match parse_builder(config) {
        Ok(Some(b)) => PlatformMetadata::Builder(Box::new(b)),
        Ok(None) => PlatformMetadata::NotBuilder,
        Err(e) => PlatformMetadata::Unreadable { error: e.to_string() },
    }
}
