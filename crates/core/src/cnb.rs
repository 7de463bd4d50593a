//! CNB builder and app images as their config labels describe them, and `classify`, which decides
//! what a builder move means for app images (rebase, rebuild, unknown, none). Pure: no I/O.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::packages::{self, PackageDiff, Packages};
use crate::reference::ImageRef;
use crate::text::escape;

mod app;
mod classify;
mod limits;
mod run_image;

pub use app::*;
pub use classify::{classify, describe};
pub use run_image::{BaseRelease, base_release, classify_run_image, is_base_image};

use limits::{Bounded, OVER_LIMIT, bounded, over_limit};
pub use limits::{MAX_ENTRIES, MAX_LABEL_BYTES, MAX_PINNED_BYTES, json_size};

pub const BUILDER_METADATA: &str = "io.buildpacks.builder.metadata";
pub const STACK_ID: &str = "io.buildpacks.stack.id";
pub const STACK_MIXINS: &str = "io.buildpacks.stack.mixins";
pub const BUILDPACK_ORDER: &str = "io.buildpacks.buildpack.order";
pub const BUILDPACK_LAYERS: &str = "io.buildpacks.buildpack.layers";
pub const LIFECYCLE_VERSION: &str = "io.buildpacks.lifecycle.version";
pub const LIFECYCLE_APIS: &str = "io.buildpacks.lifecycle.apis";
pub const LIFECYCLE_METADATA: &str = "io.buildpacks.lifecycle.metadata";
pub const BUILD_METADATA: &str = "io.buildpacks.build.metadata";
const BASE_PREFIX: &str = "io.buildpacks.base.";

// ---- the change object ----------------------------------------------------------------------

/// The cheapest correct reaction to a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Nothing that affects app images moved.
    None,
    /// Only the run image / base layers moved: app images can be rebased.
    Rebase,
    /// Metadata missing or unreadable on either side: policies decide (default rebuild).
    Unknown,
    /// Buildpacks, lifecycle, order or stack identity changed: app images must be rebuilt.
    Rebuild,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::None => "none",
            ChangeKind::Rebase => "rebase",
            ChangeKind::Rebuild => "rebuild",
            ChangeKind::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "none" => ChangeKind::None,
            "rebase" => ChangeKind::Rebase,
            "rebuild" => ChangeKind::Rebuild,
            "unknown" => ChangeKind::Unknown,
            _ => return None,
        })
    }
}

/// Why a change is what it is, in kpack's vocabulary where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Reason {
    /// Base layers (everything but buildpack layers) or the run image changed.
    Stack,
    /// A buildpack was added, removed, changed version or was republished (new layer, same version).
    Buildpack,
    /// The lifecycle version changed.
    Lifecycle,
    /// The detection order changed.
    Order,
    /// Stack id, target (os/arch/variant/distro), mixins or the CNB user/group changed.
    StackId,
    /// The run image itself moved (always with STACK).
    RunImage,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BuildpackChange {
    pub id: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Same version, different layer: the buildpack was republished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub republished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromTo {
    pub from: Option<String>,
    pub to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformChange {
    pub kind: ChangeKind,
    pub reasons: Vec<Reason>,
}

/// Package moves a summary line names before `; N more`.
const SUMMARY_PACKAGES: usize = 3;

/// The `change` object of `builder.changed` and `run_image.changed` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    #[serde(default)]
    pub reasons: Vec<Reason>,
    #[serde(default)]
    pub buildpacks: Vec<BuildpackChange>,
    #[serde(default)]
    pub lifecycle: Option<FromTo>,
    #[serde(default)]
    pub run_image: Option<FromTo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<FromTo>,
    /// The OS release a run image moved between (`ubuntu 22.04` → `ubuntu 24.04`), from its
    /// `io.buildpacks.base.distro.*` labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro: Option<FromTo>,
    /// Per-platform kinds and reasons, when the builder has platforms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<String, PlatformChange>,
    /// Why the kind is `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Which OS packages moved, when the base or run image moved and both sides list them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<PackageDiff>,
    /// Why a base move has no (or only a partial) package diff: a list unreadable or cut at its
    /// cap, a side without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_note: Option<String>,
    /// What was left unread or not kept on the new side (an index cut to `max_platforms`, parts of
    /// a pin over its ledger budget), so the change was decided on less than the whole image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Change {
    fn of_kind(kind: ChangeKind) -> Self {
        Change {
            kind,
            reasons: Vec::new(),
            buildpacks: Vec::new(),
            lifecycle: None,
            run_image: None,
            stack_id: None,
            distro: None,
            platforms: BTreeMap::new(),
            note: None,
            packages: None,
            packages_note: None,
            notes: Vec::new(),
        }
    }

    /// Adds the package diff of a base move from `before` to `after` (platform → list); `names`
    /// (before, after) name the images in the note of a cut list.
    pub fn with_packages(
        mut self,
        before: &BTreeMap<String, Packages>,
        after: &BTreeMap<String, Packages>,
        names: (&str, &str),
    ) -> Self {
        (self.packages, self.packages_note) = packages::diff_platforms(before, after, names);
        self
    }

    /// A move whose meaning cannot be told, and why.
    pub fn unknown(note: impl Into<String>) -> Self {
        let mut change = Change::of_kind(ChangeKind::Unknown);
        change.note = Some(note.into());
        change
    }

    /// A run image move: app images on it can be rebased.
    pub fn run_image_moved(from: String, to: String) -> Self {
        let mut change = Change::of_kind(ChangeKind::Rebase);
        change.reasons = vec![Reason::Stack, Reason::RunImage];
        change.run_image = Some(FromTo { from: Some(from), to: Some(to) });
        change
    }

    /// What moved, for people: `heroku/nodejs 3.2.1 → 3.3.0; lifecycle 0.21.13 → 0.21.14`. The
    /// names come from registries, so their control characters are escaped.
    pub fn details(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        fn v(s: &Option<String>) -> Cow<'_, str> {
            s.as_deref().map(escape).unwrap_or(Cow::Borrowed("?"))
        }
        for b in &self.buildpacks {
            let id = escape(&b.id);
            let (from, to) = (b.from.as_deref().map(escape), b.to.as_deref().map(escape));
            parts.push(match (from, to) {
                (Some(f), Some(t)) if b.republished => format!("{id} {f} republished ({t})"),
                (Some(f), Some(t)) => format!("{id} {f} → {t}"),
                (None, Some(t)) => format!("{id} {t} added"),
                (Some(f), None) => format!("{id} {f} removed"),
                (None, None) => format!("{id} changed"),
            });
        }
        if let Some(l) = &self.lifecycle {
            parts.push(format!("lifecycle {} → {}", v(&l.from), v(&l.to)));
        }
        if let Some(s) = &self.stack_id {
            parts.push(format!("stack {} → {}", v(&s.from), v(&s.to)));
        } else if self.reasons.contains(&Reason::StackId) && self.distro.is_none() {
            parts.push("target, mixins or CNB user changed".into());
        }
        if let Some(d) = &self.distro {
            parts.push(format!("distro {} → {}", v(&d.from), v(&d.to)));
        }
        if self.reasons.contains(&Reason::Order) {
            parts.push("detection order changed".into());
        }
        if let Some(r) = &self.run_image {
            let short = |s: &Option<String>| crate::text::short_reference(&v(s)).into_owned();
            parts.push(format!("run image {} → {}", short(&r.from), short(&r.to)));
        } else if self.reasons.contains(&Reason::Stack) {
            parts.push("base layers changed".into());
        }
        if let Some(packages) = &self.packages {
            parts.push(packages.brief(SUMMARY_PACKAGES));
        }
        if let Some(note) = &self.note {
            parts.push(escape(note).into_owned());
        }
        if parts.is_empty() {
            parts.push(match self.kind {
                ChangeKind::None => "nothing that affects app images changed".into(),
                _ => "no details".into(),
            });
        }
        parts.join("; ")
    }

    /// One line for people: `rebuild: heroku/nodejs 3.2.1 → 3.3.0; lifecycle 0.21.13 → 0.21.14`.
    pub fn summary(&self) -> String {
        format!("{}: {}", self.kind.as_str(), self.details())
    }
}

// ---- the builder model ----------------------------------------------------------------------

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
    fn buildpack_set(&self) -> BTreeMap<(String, String), Option<String>> {
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

// ---- parsing ----------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("image config is not valid JSON: {0}")]
    Config(String),
    #[error("label {label} is malformed: {detail}")]
    Label { label: &'static str, detail: String },
    /// Kept as this note instead of the metadata itself.
    #[error("metadata over the size limits, not kept: {0}")]
    OverLimit(String),
}

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

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize, Default)]
struct ImageConfigDoc {
    #[serde(default, deserialize_with = "null_default")]
    architecture: String,
    #[serde(default, deserialize_with = "null_default")]
    os: String,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    config: ContainerConfigDoc,
    #[serde(default, deserialize_with = "null_default")]
    rootfs: RootFsDoc,
}

#[derive(Deserialize, Default)]
struct ContainerConfigDoc {
    #[serde(rename = "Labels", default, deserialize_with = "cnb_labels")]
    labels: BTreeMap<String, String>,
    #[serde(rename = "Env", default, deserialize_with = "bounded")]
    env: Vec<String>,
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
struct ModuleDoc {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    homepage: Option<String>,
}

#[derive(Deserialize, Default)]
struct StackDoc {
    #[serde(rename = "runImage", default)]
    run_image: Option<RunImageDoc>,
}

#[derive(Deserialize, Default)]
struct RunImageDoc {
    #[serde(default)]
    image: Option<String>,
    #[serde(default, deserialize_with = "bounded")]
    mirrors: Vec<String>,
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

fn label<T: DeserializeOwned>(
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

fn parse_config(config: &[u8]) -> Result<ImageConfigDoc, MetadataError> {
    serde_json::from_slice(config).map_err(|e| metadata_error(e, MetadataError::Config))
}

fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

fn target(doc: &ImageConfigDoc) -> Target {
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

#[cfg(test)]
mod tests;
