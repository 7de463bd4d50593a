//! The pure decisions of a registry rebase, as the CNB lifecycle's rebaser makes them: from the app's
//! and the new run image's manifests and configs, the new config, manifest and index bytes, or a refusal.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use crate::cnb::{LIFECYCLE_METADATA, STACK_ID, STACK_MIXINS};
use crate::reference::{ImageRef, is_sha256_digest};

const REBASABLE: &str = "io.buildpacks.rebasable";
const STACK_PREFIX: &str = "io.buildpacks.stack.";
const BASE_PREFIX: &str = "io.buildpacks.base.";
const DISTRO_NAME: &str = "io.buildpacks.base.distro.name";
const DISTRO_VERSION: &str = "io.buildpacks.base.distro.version";
const PLATFORM_API_ENV: &str = "CNB_PLATFORM_API";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

/// Layer media types with the same bytes under both schemes: (Docker v2, OCI).
const LAYER_TYPE_PAIRS: [(&str, &str); 3] = [
    ("application/vnd.docker.image.rootfs.diff.tar.gzip", "application/vnd.oci.image.layer.v1.tar+gzip"),
    (
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    ),
    ("application/vnd.docker.image.rootfs.diff.tar", "application/vnd.oci.image.layer.v1.tar"),
];

/// A blob a rebased manifest names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub digest: String,
    pub size: u64,
    pub media_type: String,
}

/// What the rebase of one platform needs besides the two images: the rebaser's --force, the new
/// run image as the user named it (for the mirror check; a tag reference, digest dropped for the
/// comparison, a missing tag meaning `latest`), and the immutable `repo@sha256:…` of the new base's
/// platform manifest (becomes `runImage.reference`).
///
/// `known_run_images` are the pin histories of the run image watches the ledger keeps (each newest
/// first): the rebase refuses to move an app onto a run image pinned before the one it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebaseOptions {
    pub force: bool,
    pub run_image_name: String,
    pub run_image_reference: String,
    pub known_run_images: Vec<Vec<order::KnownPin>>,
}

/// One platform of the rebase, decided: new config and manifest bytes and digests, which blobs the
/// app repository must hold, and the counts the report shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformRebase {
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    pub manifest_media_type: String,
    /// The new base's layers (must be present in the app repository: HEAD / mount / copy).
    pub base_blobs: Vec<Blob>,
    /// The app's layers kept above the cut (already in the app repository).
    pub app_blobs: Vec<Blob>,
    pub base_layers_from: usize,
    pub base_layers_to: usize,
    pub app_layers: usize,
    /// The app already sits on exactly this base: nothing to write (idempotent re-run). `config` and
    /// `manifest` are then the app's own bytes.
    pub already_rebased: bool,
}

/// An image platform as index entries name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
    pub os_version: Option<String>,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(variant) = &self.variant {
            write!(f, "/{variant}")?;
        }
        Ok(())
    }
}

/// Why a rebase is refused; Display is the reason the CLI prints. The variants that say
/// "(use --force)" are the ones `force` overrides.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no io.buildpacks.lifecycle.metadata label")]
    NoLifecycleMetadata,
    #[error("io.buildpacks.lifecycle.metadata has no runImage.topLayer")]
    NoTopLayer,
    #[error("top layer {0} not in the image")]
    TopLayerNotInImage(String),
    /// The side without a stack id: "app image" or "run image".
    #[error("no io.buildpacks.stack.id on the {0}")]
    NoStackId(&'static str),
    #[error("stack id {app} differs from {run_image}")]
    StackIdDiffers { app: String, run_image: String },
    #[error("missing required mixin(s) {}", .0.join(", "))]
    MissingMixins(Vec<String>),
    #[error("io.buildpacks.rebasable is false (use --force)")]
    NotRebasable,
    /// `what` is "os/architecture", "variant" or "distro".
    #[error("{what} {app} does not match the run image's {run_image} (use --force)")]
    TargetMismatch { what: &'static str, app: String, run_image: String },
    #[error(
        "run image {name} is not io.buildpacks.lifecycle.metadata's runImage.image or one of its mirrors (use --force)"
    )]
    NameNotInMetadata { name: String },
    #[error(
        "the app is on run image {on}, pinned after {target}: the rebase would move it onto an older run image (use --force)"
    )]
    OlderRunImage { on: String, target: String },
    #[error("the run image has no layers")]
    RunImageWithoutLayers,
    #[error("the run image has no {platform} image (it has {available})")]
    NoMatchingPlatform { platform: String, available: String },
    #[error("run image layer media type {media_type} has no equivalent in a {manifest} manifest")]
    LayerMediaType { media_type: String, manifest: &'static str },
    /// Unreadable input: `what` names the document ("app config", "run image manifest", a label…).
    #[error("{what}: {reason}")]
    Malformed { what: &'static str, reason: String },
}

fn malformed<T>(what: &'static str, reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::Malformed { what, reason: reason.into() })
}

/// `sha256:<hex>` of exactly these bytes.
fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn parse_object(bytes: &[u8], what: &'static str) -> Result<Map<String, Value>, Refusal> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => malformed(what, "not a JSON object"),
        Err(e) => malformed(what, format!("not JSON ({e})")),
    }
}

fn compact(value: &Map<String, Value>) -> Vec<u8> {
    // Serialising a map of JSON values cannot fail (string keys, no foreign types).
    serde_json::to_vec(value).unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ManifestKind {
    Oci,
    Docker,
}

impl ManifestKind {
    fn name(self) -> &'static str {
        match self {
            ManifestKind::Oci => "OCI",
            ManifestKind::Docker => "Docker v2",
        }
    }

    /// The same layer bytes under this scheme's media type.
    fn layer_media_type(self, media_type: &str) -> Result<String, Refusal> {
        let (own_prefix, converted) = match self {
            ManifestKind::Oci => {
                ("application/vnd.oci.", LAYER_TYPE_PAIRS.iter().find(|(d, _)| *d == media_type).map(|(_, o)| *o))
            }
            ManifestKind::Docker => {
                ("application/vnd.docker.", LAYER_TYPE_PAIRS.iter().find(|(_, o)| *o == media_type).map(|(d, _)| *d))
            }
        };
        if media_type.starts_with(own_prefix) {
            return Ok(media_type.to_string());
        }
        converted
            .map(str::to_string)
            .ok_or_else(|| Refusal::LayerMediaType { media_type: media_type.to_string(), manifest: self.name() })
    }
}

/// Which image a document belongs to, for messages.
#[derive(Clone, Copy)]
enum Side {
    App,
    RunImage,
}

impl Side {
    fn manifest(self) -> &'static str {
        match self {
            Side::App => "app manifest",
            Side::RunImage => "run image manifest",
        }
    }
    fn config(self) -> &'static str {
        match self {
            Side::App => "app config",
            Side::RunImage => "run image config",
        }
    }
    fn image(self) -> &'static str {
        match self {
            Side::App => "app image",
            Side::RunImage => "run image",
        }
    }
}

/// A single-platform image as read: its manifest and config documents, layer descriptors and diffIDs.
struct ImageDoc {
    manifest: Map<String, Value>,
    config: Map<String, Value>,
    kind: ManifestKind,
    media_type: String,
    layers: Vec<Map<String, Value>>,
    diff_ids: Vec<String>,
}

fn read_image(manifest_bytes: &[u8], config_bytes: &[u8], side: Side) -> Result<ImageDoc, Refusal> {
    let what = side.manifest();
    let manifest = parse_object(manifest_bytes, what)?;
    let config = parse_object(config_bytes, side.config())?;
    if manifest.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return malformed(what, "schemaVersion is not 2");
    }
    let declared = manifest.get("mediaType").and_then(Value::as_str);
    if declared == Some(OCI_INDEX) || declared == Some(DOCKER_LIST) || manifest.contains_key("manifests") {
        return malformed(what, "an index, not a single-platform manifest");
    }
    let config_descriptor = match manifest.get("config") {
        Some(Value::Object(d)) => d,
        _ => return malformed(what, "no config descriptor"),
    };
    let (kind, media_type) = match manifest.get("mediaType") {
        Some(Value::String(t)) if t == OCI_MANIFEST => (ManifestKind::Oci, t.clone()),
        Some(Value::String(t)) if t == DOCKER_MANIFEST => (ManifestKind::Docker, t.clone()),
        Some(Value::String(t)) => return malformed(what, format!("unsupported media type {t}")),
        // OCI makes the field optional; Docker v2 always sets it.
        None | Some(Value::Null) => {
            if config_descriptor.get("mediaType").and_then(Value::as_str) == Some(DOCKER_CONFIG) {
                (ManifestKind::Docker, DOCKER_MANIFEST.to_string())
            } else {
                (ManifestKind::Oci, OCI_MANIFEST.to_string())
            }
        }
        Some(_) => return malformed(what, "mediaType is not a string"),
    };
    let named = config_descriptor.get("digest").and_then(Value::as_str).unwrap_or_default();
    let actual = digest_of(config_bytes);
    if named != actual {
        return malformed(what, format!("its config descriptor names {named:?}, not the config given ({actual})"));
    }
    let layers: Vec<Map<String, Value>> = match manifest.get("layers") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::Object(d) => blob(d, what).map(|_| d.clone()),
                _ => malformed(what, "a layer descriptor is not an object"),
            })
            .collect::<Result<_, _>>()?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return malformed(what, "layers is not an array"),
    };
    let diff_ids: Vec<String> = match config.get("rootfs").and_then(|r| r.get("diff_ids")) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|d| d.as_str().map(str::to_string).ok_or(()))
            .collect::<Result<_, _>>()
            .or_else(|()| malformed(side.config(), "a rootfs.diff_ids entry is not a string"))?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => return malformed(side.config(), "rootfs.diff_ids is not an array"),
    };
    if layers.len() != diff_ids.len() {
        return malformed(what, format!("{} layers, but its config has {} diffIDs", layers.len(), diff_ids.len()));
    }
    Ok(ImageDoc { manifest, config, kind, media_type, layers, diff_ids })
}

fn blob(descriptor: &Map<String, Value>, what: &'static str) -> Result<Blob, Refusal> {
    let digest = descriptor.get("digest").and_then(Value::as_str);
    let size = descriptor.get("size").and_then(Value::as_u64);
    let media_type = descriptor.get("mediaType").and_then(Value::as_str);
    match (digest, size, media_type) {
        (Some(digest), Some(size), Some(media_type)) => {
            Ok(Blob { digest: digest.to_string(), size, media_type: media_type.to_string() })
        }
        _ => malformed(what, "a layer descriptor lacks a digest, size or mediaType"),
    }
}

/// The config's `config` object (Env, Labels…), if any.
fn container_config(config: &Map<String, Value>, side: Side) -> Result<Option<&Map<String, Value>>, Refusal> {
    match config.get("config") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(c)) => Ok(Some(c)),
        Some(_) => malformed(side.config(), "config is not an object"),
    }
}

fn labels(config: &Map<String, Value>, side: Side) -> Result<BTreeMap<String, String>, Refusal> {
    let Some(container) = container_config(config, side)? else { return Ok(BTreeMap::new()) };
    match container.get("Labels") {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => malformed(side.config(), format!("label {k} is not a string")),
            })
            .collect(),
        Some(_) => malformed(side.config(), "Labels is not an object"),
    }
}

fn env_value(config: &Map<String, Value>, side: Side, name: &str) -> Result<Option<String>, Refusal> {
    let Some(container) = container_config(config, side)? else { return Ok(None) };
    let Some(env) = container.get("Env").and_then(Value::as_array) else { return Ok(None) };
    Ok(env
        .iter()
        .filter_map(Value::as_str)
        .find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')).map(str::to_string)))
}

/// Whether the app's platform API (its `CNB_PLATFORM_API`) is 0.12 or later; unset means older.
fn platform_api_at_least_0_12(api: Option<&str>) -> Result<bool, Refusal> {
    let Some(api) = api.map(str::trim).filter(|a| !a.is_empty()) else { return Ok(false) };
    let mut parts = api.split('.');
    let mut number = || -> Result<u64, Refusal> {
        match parts.next() {
            None => Ok(0),
            Some(p) => p.parse().or_else(|_| malformed("CNB_PLATFORM_API", format!("{api:?} is not a version"))),
        }
    };
    let (major, minor) = (number()?, number()?);
    Ok((major, minor) >= (0, 12))
}

/// A JSON string-array label (mixins); an unset or empty label is an empty list.
fn string_list_label(labels: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, Refusal> {
    match labels.get(key).map(String::as_str) {
        None | Some("") => Ok(Vec::new()),
        Some(text) => {
            serde_json::from_str(text).or_else(|e| malformed(key, format!("not a JSON list of strings ({e})")))
        }
    }
}

fn stage_stripped(mixins: Vec<String>) -> Vec<String> {
    mixins
        .into_iter()
        .map(|m| match m.strip_prefix("build:").or_else(|| m.strip_prefix("run:")) {
            Some(rest) => rest.to_string(),
            None => m,
        })
        .collect()
}

/// What the rebaser compares for API >= 0.12: os, arch, variant and distro (when the labels exist).
struct Target {
    os: String,
    arch: String,
    variant: Option<String>,
    distro: Option<(String, String)>,
}

fn target(config: &Map<String, Value>, labels: &BTreeMap<String, String>) -> Target {
    let field = |key: &str| config.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    let name = labels.get(DISTRO_NAME);
    let version = labels.get(DISTRO_VERSION);
    Target {
        os: field("os"),
        arch: field("architecture"),
        variant: Some(field("variant")).filter(|v| !v.is_empty()),
        distro: (name.is_some() || version.is_some())
            .then(|| (name.cloned().unwrap_or_default(), version.cloned().unwrap_or_default())),
    }
}

/// The lifecycle's `TargetSatisfiedForRebase`: empty optional fields of either side match anything;
/// a run image with a distro needs an app with the same one.
fn check_target(app: &Target, base: &Target, full: bool) -> Result<(), Refusal> {
    let os_arch = |t: &Target| format!("{}/{}", t.os, t.arch);
    if app.os != base.os || app.arch != base.arch {
        return Err(Refusal::TargetMismatch { what: "os/architecture", app: os_arch(app), run_image: os_arch(base) });
    }
    if !full {
        return Ok(());
    }
    if let (Some(a), Some(b)) = (&app.variant, &base.variant)
        && a != b
    {
        return Err(Refusal::TargetMismatch { what: "variant", app: a.clone(), run_image: b.clone() });
    }
    if let Some((base_name, base_version)) = &base.distro {
        let shown = |d: &Option<(String, String)>| match d {
            Some((n, v)) => format!("{n} {v}").trim().to_string(),
            None => "(none)".to_string(),
        };
        let fits = app.distro.as_ref().is_some_and(|(name, version)| {
            (base_name.is_empty() || base_name == name) && (base_version.is_empty() || base_version == version)
        });
        if !fits {
            return Err(Refusal::TargetMismatch {
                what: "distro",
                app: shown(&app.distro),
                run_image: shown(&base.distro),
            });
        }
    }
    Ok(())
}

/// A reference's name for comparison: digest dropped, `latest` when untagged, Docker Hub normalised.
/// An unparsable one compares as written, like the lifecycle's `ParseMaybe`.
fn comparable_name(text: &str) -> String {
    match ImageRef::parse(text) {
        Ok(r) => r.with_tag_only(),
        Err(_) => text.to_string(),
    }
}

/// Whether `name` is `image` or one of `mirrors` in a `runImage`-shaped object.
fn names_contain(run_image: Option<&Value>, name: &str) -> bool {
    let Some(run_image) = run_image else { return false };
    let wanted = comparable_name(name);
    let image = run_image.get("image").and_then(Value::as_str).filter(|i| !i.is_empty());
    let mirrors = run_image.get("mirrors").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
    image.into_iter().chain(mirrors).any(|candidate| comparable_name(candidate) == wanted)
}

/// The digest of a digest reference (`repo@sha256:…`), or the text when it is a bare digest.
fn reference_digest(reference: &str) -> Option<&str> {
    let digest = reference.rsplit_once('@').map_or(reference, |(_, d)| d);
    is_sha256_digest(digest).then_some(digest)
}

/// History entries of one image, lined up with its layers. A history whose non-empty entries do not
/// count the layers is replaced by one empty entry per layer, as imgutil's `NormalizedHistory` does.
struct History {
    entries: Vec<Value>,
    /// False when the config has no history at all (the result has none when both lack one).
    present: bool,
}

fn is_empty_layer(entry: &Value) -> bool {
    entry.get("empty_layer").and_then(Value::as_bool) == Some(true)
}

fn history(config: &Map<String, Value>, layers: usize, side: Side) -> Result<History, Refusal> {
    let entries = match config.get("history") {
        None | Some(Value::Null) => {
            return Ok(History { entries: vec![Value::Object(Map::new()); layers], present: false });
        }
        Some(Value::Array(entries)) => entries,
        Some(_) => return malformed(side.config(), "history is not an array"),
    };
    if entries.iter().filter(|e| !is_empty_layer(e)).count() == layers {
        Ok(History { entries: entries.clone(), present: true })
    } else {
        Ok(History { entries: vec![Value::Object(Map::new()); layers], present: true })
    }
}

/// The history entries above the first `lower` layers. Empty-layer entries right above the cut
/// belong to the old base (a Dockerfile's closing ENV/USER/LABEL): the new base brings its own.
fn upper_history(entries: &[Value], lower: usize) -> Vec<Value> {
    let mut seen = 0;
    let mut start = entries.len();
    for (i, entry) in entries.iter().enumerate() {
        if is_empty_layer(entry) {
            continue;
        }
        if seen == lower {
            start = i;
            break;
        }
        seen += 1;
    }
    entries[start..].to_vec()
}

fn object_mut<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map.entry(key.to_string()).or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(inner) => inner,
        _ => unreachable!("just made an object"),
    }
}

/// Decides the rebase of one platform. `app_manifest`/`app_config` and `base_manifest`/`base_config`:
/// the exact bytes read from the registry (single-platform manifests, OCI or Docker v2; media types
/// preserved in the output).
pub fn rebase_platform(
    app_manifest: &[u8],
    app_config: &[u8],
    base_manifest: &[u8],
    base_config: &[u8],
    options: &RebaseOptions,
) -> Result<PlatformRebase, Refusal> {
    let app = read_image(app_manifest, app_config, Side::App)?;
    let base = read_image(base_manifest, base_config, Side::RunImage)?;
    let app_labels = labels(&app.config, Side::App)?;
    let base_labels = labels(&base.config, Side::RunImage)?;

    // The cut: the app's layers up to and including the run image's top layer are replaced.
    let metadata_text = app_labels.get(LIFECYCLE_METADATA).map(String::as_str).unwrap_or_default();
    if metadata_text.is_empty() {
        return Err(Refusal::NoLifecycleMetadata);
    }
    let mut metadata = match serde_json::from_str::<Value>(metadata_text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return malformed(LIFECYCLE_METADATA, "not a JSON object"),
        Err(e) => return malformed(LIFECYCLE_METADATA, format!("not JSON ({e})")),
    };
    let run_image_doc = match metadata.get("runImage") {
        None | Some(Value::Null) => None,
        Some(Value::Object(r)) => Some(r),
        Some(_) => return malformed(LIFECYCLE_METADATA, "runImage is not an object"),
    };
    let top_layer = match run_image_doc.and_then(|r| r.get("topLayer")) {
        None | Some(Value::Null) => return Err(Refusal::NoTopLayer),
        Some(Value::String(t)) if t.is_empty() => return Err(Refusal::NoTopLayer),
        Some(Value::String(t)) => t.clone(),
        Some(_) => return malformed(LIFECYCLE_METADATA, "runImage.topLayer is not a string"),
    };
    let Some(top_index) = app.diff_ids.iter().position(|d| *d == top_layer) else {
        return Err(Refusal::TopLayerNotInImage(top_layer));
    };
    let lower = top_index + 1;
    let Some(base_top) = base.diff_ids.last().cloned() else { return Err(Refusal::RunImageWithoutLayers) };

    let base_blobs: Vec<Blob> = base
        .layers
        .iter()
        .map(|d| {
            let mut b = blob(d, Side::RunImage.manifest())?;
            b.media_type = app.kind.layer_media_type(&b.media_type)?;
            Ok(b)
        })
        .collect::<Result<_, Refusal>>()?;
    let app_blobs: Vec<Blob> =
        app.layers[lower..].iter().map(|d| blob(d, Side::App.manifest())).collect::<Result<_, _>>()?;
    let counts = (lower, base.diff_ids.len(), app.diff_ids.len() - lower);

    let recorded_digest =
        run_image_doc.and_then(|r| r.get("reference")).and_then(Value::as_str).and_then(reference_digest);
    if app.diff_ids[..lower] == base.diff_ids[..]
        && recorded_digest.is_some()
        && recorded_digest == reference_digest(&options.run_image_reference)
    {
        return Ok(PlatformRebase {
            config: app_config.to_vec(),
            config_digest: digest_of(app_config),
            manifest: app_manifest.to_vec(),
            manifest_digest: digest_of(app_manifest),
            manifest_media_type: app.media_type,
            base_blobs,
            app_blobs,
            base_layers_from: counts.0,
            base_layers_to: counts.1,
            app_layers: counts.2,
            already_rebased: true,
        });
    }

    // Never backwards: an app on a run image the ledger pinned after this one stays where it is.
    if !options.force
        && let (Some(on), Some(target)) = (recorded_digest, reference_digest(&options.run_image_reference))
    {
        order::not_older(&options.known_run_images, on, target)?;
    }

    // Compatibility, by the app's platform API, as the rebaser checks it.
    let api_0_12 = platform_api_at_least_0_12(env_value(&app.config, Side::App, PLATFORM_API_ENV)?.as_deref())?;
    if api_0_12 {
        if app_labels.get(REBASABLE).is_some_and(|v| v == "false") && !options.force {
            return Err(Refusal::NotRebasable);
        }
    } else {
        let app_stack =
            app_labels.get(STACK_ID).filter(|s| !s.is_empty()).ok_or(Refusal::NoStackId(Side::App.image()))?;
        let base_stack =
            base_labels.get(STACK_ID).filter(|s| !s.is_empty()).ok_or(Refusal::NoStackId(Side::RunImage.image()))?;
        if app_stack != base_stack {
            return Err(Refusal::StackIdDiffers { app: app_stack.clone(), run_image: base_stack.clone() });
        }
        let available = stage_stripped(string_list_label(&base_labels, STACK_MIXINS)?);
        let mut missing: Vec<String> = stage_stripped(string_list_label(&app_labels, STACK_MIXINS)?)
            .into_iter()
            .filter(|m| !available.contains(m))
            .collect();
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            return Err(Refusal::MissingMixins(missing));
        }
    }
    // Below 0.12 the rebaser checks no target; the os/architecture check there is ours (a run image
    // of another architecture is never what a user means), overridable like the rest.
    if !options.force {
        check_target(&target(&app.config, &app_labels), &target(&base.config, &base_labels), api_0_12)?;
    }

    // The lifecycle metadata label.
    let run_image_value = metadata.get("runImage").cloned();
    if api_0_12
        && !names_contain(run_image_value.as_ref(), &options.run_image_name)
        && !names_contain(metadata.get("stack").and_then(|s| s.get("runImage")), &options.run_image_name)
    {
        if !options.force {
            return Err(Refusal::NameNotInMetadata { name: options.run_image_name.clone() });
        }
        let run_image = object_mut(&mut metadata, "runImage");
        run_image.insert("image".into(), Value::String(options.run_image_name.clone()));
        run_image.insert("mirrors".into(), Value::Array(Vec::new()));
        let mut stack_run_image = Map::new();
        stack_run_image.insert("image".into(), Value::String(options.run_image_name.clone()));
        stack_run_image.insert("mirrors".into(), Value::Array(Vec::new()));
        let mut stack = Map::new();
        stack.insert("runImage".into(), Value::Object(stack_run_image));
        metadata.insert("stack".into(), Value::Object(stack));
    }
    let run_image = object_mut(&mut metadata, "runImage");
    run_image.insert("topLayer".into(), Value::String(base_top));
    run_image.insert("reference".into(), Value::String(options.run_image_reference.clone()));

    // The new config: the app's, with the base's layers, history, platform and base labels.
    let mut config = app.config.clone();
    let base_history = history(&base.config, base.diff_ids.len(), Side::RunImage)?;
    let app_history = history(&app.config, app.diff_ids.len(), Side::App)?;
    if base_history.present || app_history.present {
        let mut entries = base_history.entries;
        entries.extend(upper_history(&app_history.entries, lower));
        config.insert("history".into(), Value::Array(entries));
    }
    let diff_ids: Vec<Value> =
        base.diff_ids.iter().chain(&app.diff_ids[lower..]).map(|d| Value::String(d.clone())).collect();
    let rootfs = object_mut(&mut config, "rootfs");
    rootfs.entry("type").or_insert_with(|| Value::String("layers".into()));
    rootfs.insert("diff_ids".into(), Value::Array(diff_ids));
    for key in ["os", "architecture", "variant", "os.version"] {
        match base.config.get(key) {
            Some(value) => config.insert(key.into(), value.clone()),
            None => config.remove(key),
        };
    }
    let synced = |key: &str| key.starts_with(STACK_PREFIX) || (api_0_12 && key.starts_with(BASE_PREFIX));
    let labels = object_mut(object_mut(&mut config, "config"), "Labels");
    labels.retain(|key, _| !synced(key));
    for (key, value) in base_labels.iter().filter(|(k, _)| synced(k)) {
        labels.insert(key.clone(), Value::String(value.clone()));
    }
    labels.insert(LIFECYCLE_METADATA.into(), Value::String(Value::Object(metadata).to_string()));
    let config_bytes = compact(&config);
    let config_digest = digest_of(&config_bytes);

    // The new manifest: the app's, with the base's layer descriptors under the app's media types.
    let mut manifest = app.manifest.clone();
    let config_descriptor = object_mut(&mut manifest, "config");
    config_descriptor.insert("digest".into(), Value::String(config_digest.clone()));
    config_descriptor.insert("size".into(), Value::from(config_bytes.len() as u64));
    let mut layers: Vec<Value> = Vec::with_capacity(base.layers.len() + app_blobs.len());
    for (descriptor, converted) in base.layers.iter().zip(&base_blobs) {
        let mut descriptor = descriptor.clone();
        descriptor.insert("mediaType".into(), Value::String(converted.media_type.clone()));
        layers.push(Value::Object(descriptor));
    }
    layers.extend(app.layers[lower..].iter().cloned().map(Value::Object));
    manifest.insert("layers".into(), Value::Array(layers));
    let manifest_bytes = compact(&manifest);

    Ok(PlatformRebase {
        manifest_digest: digest_of(&manifest_bytes),
        manifest: manifest_bytes,
        manifest_media_type: app.media_type,
        config: config_bytes,
        config_digest,
        base_blobs,
        app_blobs,
        base_layers_from: counts.0,
        base_layers_to: counts.1,
        app_layers: counts.2,
        already_rebased: false,
    })
}

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

pub mod order;
#[cfg(test)]
mod tests;
