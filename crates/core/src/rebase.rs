//! The pure decisions of a registry rebase, as the CNB lifecycle's rebaser makes them: from the app's
//! and the new run image's manifests and configs, the new config, manifest and index bytes, or a refusal.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::cnb::{LIFECYCLE_METADATA, STACK_ID, STACK_MIXINS};

mod checks;
mod history;
mod image;
mod index;
pub mod order;
#[cfg(test)]
mod tests;

use checks::{
    BASE_PREFIX, PLATFORM_API_ENV, REBASABLE, STACK_PREFIX, check_target, names_contain, platform_api_at_least_0_12,
    reference_digest, stage_stripped, string_list_label, target,
};
use history::{history, upper_history};
use image::{ImageDoc, Side, blob, compact, digest_of, env_value, labels, object_mut, read_image};
pub use index::{config_platform, rebased_index, select_platform};

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
    let mut metadata = lifecycle_metadata(&app_labels)?;
    let (top_layer, recorded_digest) = recorded_run_image(&metadata)?;
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

    let api_0_12 = compatible(&app, &base, &app_labels, &base_labels, options.force)?;
    rewrite_metadata(&mut metadata, api_0_12, base_top, options)?;
    let config_bytes = new_config(&app, &base, &base_labels, lower, api_0_12, metadata)?;
    let config_digest = digest_of(&config_bytes);
    let manifest_bytes = new_manifest(&app, &base, &base_blobs, lower, &config_digest, config_bytes.len());

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

/// The app's lifecycle metadata label, as a JSON object.
fn lifecycle_metadata(app_labels: &BTreeMap<String, String>) -> Result<Map<String, Value>, Refusal> {
    let metadata_text = app_labels.get(LIFECYCLE_METADATA).map(String::as_str).unwrap_or_default();
    if metadata_text.is_empty() {
        return Err(Refusal::NoLifecycleMetadata);
    }
    match serde_json::from_str::<Value>(metadata_text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => malformed(LIFECYCLE_METADATA, "not a JSON object"),
        Err(e) => malformed(LIFECYCLE_METADATA, format!("not JSON ({e})")),
    }
}

/// The run image the lifecycle metadata records: its top layer (where the cut is), and the digest
/// of its reference when it names one.
fn recorded_run_image(metadata: &Map<String, Value>) -> Result<(String, Option<&str>), Refusal> {
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
    let recorded = run_image_doc.and_then(|r| r.get("reference")).and_then(Value::as_str).and_then(reference_digest);
    Ok((top_layer, recorded))
}

/// Whether the run image fits the app, by the app's platform API as the rebaser checks it (0.12
/// and later: `io.buildpacks.rebasable`; before: the stack id and mixins), then the os and
/// architecture (ours below 0.12). Answers whether the app's platform API is 0.12 or later.
fn compatible(
    app: &ImageDoc,
    base: &ImageDoc,
    app_labels: &BTreeMap<String, String>,
    base_labels: &BTreeMap<String, String>,
    force: bool,
) -> Result<bool, Refusal> {
    let api_0_12 = platform_api_at_least_0_12(env_value(&app.config, Side::App, PLATFORM_API_ENV)?.as_deref())?;
    if api_0_12 {
        if app_labels.get(REBASABLE).is_some_and(|v| v == "false") && !force {
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
        let available = stage_stripped(string_list_label(base_labels, STACK_MIXINS)?);
        let mut missing: Vec<String> = stage_stripped(string_list_label(app_labels, STACK_MIXINS)?)
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
    if !force {
        check_target(&target(&app.config, app_labels), &target(&base.config, base_labels), api_0_12)?;
    }
    Ok(api_0_12)
}

/// The lifecycle metadata label rewritten for the run image: its top layer and reference, and
/// (forced, at platform API 0.12 and later) its name where the metadata does not list it.
fn rewrite_metadata(
    metadata: &mut Map<String, Value>,
    api_0_12: bool,
    base_top: String,
    options: &RebaseOptions,
) -> Result<(), Refusal> {
    let run_image_value = metadata.get("runImage").cloned();
    if api_0_12
        && !names_contain(run_image_value.as_ref(), &options.run_image_name)
        && !names_contain(metadata.get("stack").and_then(|s| s.get("runImage")), &options.run_image_name)
    {
        if !options.force {
            return Err(Refusal::NameNotInMetadata { name: options.run_image_name.clone() });
        }
        let run_image = object_mut(metadata, "runImage");
        run_image.insert("image".into(), Value::String(options.run_image_name.clone()));
        run_image.insert("mirrors".into(), Value::Array(Vec::new()));
        let mut stack_run_image = Map::new();
        stack_run_image.insert("image".into(), Value::String(options.run_image_name.clone()));
        stack_run_image.insert("mirrors".into(), Value::Array(Vec::new()));
        let mut stack = Map::new();
        stack.insert("runImage".into(), Value::Object(stack_run_image));
        metadata.insert("stack".into(), Value::Object(stack));
    }
    let run_image = object_mut(metadata, "runImage");
    run_image.insert("topLayer".into(), Value::String(base_top));
    run_image.insert("reference".into(), Value::String(options.run_image_reference.clone()));
    Ok(())
}

/// The new config: the app's, with the base's layers, history, platform and base labels, and the
/// rewritten lifecycle metadata.
fn new_config(
    app: &ImageDoc,
    base: &ImageDoc,
    base_labels: &BTreeMap<String, String>,
    lower: usize,
    api_0_12: bool,
    metadata: Map<String, Value>,
) -> Result<Vec<u8>, Refusal> {
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
    Ok(compact(&config))
}

/// The new manifest: the app's, with the new config and the base's layer descriptors under the
/// app's media types.
fn new_manifest(
    app: &ImageDoc,
    base: &ImageDoc,
    base_blobs: &[Blob],
    lower: usize,
    config_digest: &str,
    config_size: usize,
) -> Vec<u8> {
    let mut manifest = app.manifest.clone();
    let config_descriptor = object_mut(&mut manifest, "config");
    config_descriptor.insert("digest".into(), Value::String(config_digest.to_string()));
    config_descriptor.insert("size".into(), Value::from(config_size as u64));
    let mut layers: Vec<Value> = Vec::with_capacity(base.layers.len() + app.layers.len() - lower);
    for (descriptor, converted) in base.layers.iter().zip(base_blobs) {
        let mut descriptor = descriptor.clone();
        descriptor.insert("mediaType".into(), Value::String(converted.media_type.clone()));
        layers.push(Value::Object(descriptor));
    }
    layers.extend(app.layers[lower..].iter().cloned().map(Value::Object));
    manifest.insert("layers".into(), Value::Array(layers));
    compact(&manifest)
}
