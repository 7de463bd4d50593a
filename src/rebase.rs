//! A rebase in the registry itself: reads the app image and the new run image, lets the core decide
//! each platform (`builder_monitor_core::rebase`), then writes blobs, configs, manifests, the index and, last, the tag.
//!
//! Every decision is made before the first write, so a refusal writes nothing; every write names
//! content by digest until the final tag PUT, so a failure at any step leaves the tag as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::inspect::is_index;
use crate::registry::{
    BlobTransfer, DOCKER_MANIFEST, MAX_CONFIG_BYTES, Manifest, OCI_MANIFEST, Registry, RegistryError,
};
use builder_monitor_core::cnb::run_watch_name;
use builder_monitor_core::rebase::order::KnownPin;
use builder_monitor_core::rebase::{self as decide, Blob, PlatformRebase, RebaseOptions, Refusal};
use builder_monitor_core::reference::{ImageRef, is_sha256_digest};
use builder_monitor_core::text::escape;

mod sign;
mod tag;
mod writes;
pub use sign::{SignPlan, SigningReport};

/// Bytes of run image manifests and configs a [`RunImageDocs`] keeps: a handful of run images
/// (an index, its platforms' manifests and configs each), however many apps rebase onto them.
const RUN_IMAGE_DOCS_BYTES: u64 = 16 << 20;
/// Documents it keeps at most, whatever their size.
const RUN_IMAGE_DOCS_ENTRIES: usize = 64;

/// The run image's manifests and configs a rebase reads, kept by digest for the next rebase onto
/// the same run image: a fleet patch reads them once, not once per app. Content-addressed (and
/// keyed by registry and repository too, so a read proves access to that repository only), hence
/// never stale; a run image named by tag is read every time. Concurrent first reads of one
/// document are one request. Bounded by bytes and entries; errors are not kept.
#[derive(Clone)]
pub struct RunImageDocs {
    docs: moka::future::Cache<String, Manifest>,
}

impl Default for RunImageDocs {
    fn default() -> Self {
        let docs = moka::future::Cache::builder()
            .max_capacity(RUN_IMAGE_DOCS_BYTES)
            .weigher(|_: &String, m: &Manifest| {
                // Weighed by size, with a floor that bounds the number of entries too.
                let floor = RUN_IMAGE_DOCS_BYTES / RUN_IMAGE_DOCS_ENTRIES as u64;
                u32::try_from((m.bytes.len() as u64).max(floor)).unwrap_or(u32::MAX)
            })
            .build();
        RunImageDocs { docs }
    }
}

impl RunImageDocs {
    /// The manifest `reference` of `run`: kept when `reference` is a digest.
    async fn manifest(&self, registry: &Registry, run: &ImageRef, reference: &str) -> Result<Manifest, RegistryError> {
        if !is_sha256_digest(reference) {
            return registry.get_manifest(run, reference).await;
        }
        let key = format!("manifest {}/{}@{reference}", run.registry(), run.repository());
        self.docs.try_get_with(key, registry.get_manifest(run, reference)).await.map_err(|e| (*e).clone())
    }

    /// The config blob a run image `manifest` names (its digest checked by `get_blob`).
    async fn config(
        &self,
        registry: &Registry,
        run: &ImageRef,
        manifest: &Manifest,
    ) -> Result<bytes::Bytes, RebaseError> {
        let doc: ManifestDoc = parse(&manifest.bytes, run, "run image manifest")?;
        let digest = doc.config.digest;
        if !is_sha256_digest(&digest) {
            return Err(unusable(run, format!("its manifest names a bad config digest \"{}\"", escape(&digest))));
        }
        let key = format!("blob {}/{}@{digest}", run.registry(), run.repository());
        let fetch = async {
            let bytes = registry.get_blob(run, &digest, MAX_CONFIG_BYTES).await?;
            Ok::<_, RegistryError>(Manifest { digest: digest.clone(), media_type: String::new(), bytes })
        };
        Ok(self.docs.try_get_with(key, fetch).await.map_err(|e| (*e).clone())?.bytes)
    }
}

/// What to rebase onto what.
#[derive(Debug, Clone)]
pub struct RebaseRequest {
    /// The app image; its tag is what moves. With a digest too, the tag must still point there.
    pub image: ImageRef,
    /// The new run image (a tag or a digest reference; an index or a single manifest).
    pub run_image: ImageRef,
    /// Overrides what the lifecycle rebaser's `-force` overrides.
    pub force: bool,
    /// Reads and decides, writes nothing.
    pub dry_run: bool,
    /// The ledger's pin histories of run image watches (newest first): never onto an older one.
    pub known_run_images: Vec<Vec<KnownPin>>,
    /// Sign (and attest) what the tag will lead to, before it moves; `None` signs nothing.
    pub sign: Option<SignPlan>,
}

/// What a rebase's tag write answers to before it happens: the daemon records its intent in the
/// ledger (and learns there whether a newer change superseded it); the command line has nothing.
pub trait TagGuard: Sync {
    /// Called once everything is written by digest, with the digest the tag holds (`expected`) and
    /// the one about to be written (`new`), right before the tag's HEAD and PUT. An error stops the
    /// rebase with nothing written to the tag.
    fn before_write(&self, expected: &str, new: &str) -> impl Future<Output = Result<(), RebaseError>> + Send;
}

/// No record before the tag write (`builder-monitor rebase`).
pub struct Unguarded;

impl TagGuard for Unguarded {
    async fn before_write(&self, _expected: &str, _new: &str) -> Result<(), RebaseError> {
        Ok(())
    }
}

/// What a rebase did (or, dry, would do): the `--json` output of `builder-monitor rebase`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebaseReport {
    /// The app image as named.
    pub image: String,
    /// The digest the tag pointed at before.
    pub previous: String,
    /// The digest the tag points at now; `None` for a dry run.
    pub digest: Option<String>,
    /// The new run image, pinned: `registry/repository@sha256:…` of what `--run-image` named.
    pub reference: String,
    pub platforms: Vec<PlatformReport>,
    pub blobs: BlobCounts,
    /// What was signed (dry, would be): present when the rebase signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing: Option<SigningReport>,
}

/// One platform of the app image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformReport {
    /// `os/architecture[/variant]`.
    pub platform: String,
    /// The platform manifest before.
    pub previous: String,
    /// The platform manifest after (the one a dry run would write).
    pub digest: String,
    pub base_layers: LayerCounts,
    /// The app's layers kept above the run image's.
    pub app_layers: usize,
    /// Already on exactly this run image: nothing written for it.
    #[serde(skip)]
    pub already_rebased: bool,
}

/// Run image layers replaced: `from` old ones by `to` new ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LayerCounts {
    pub from: usize,
    pub to: usize,
}

/// The new run image's layers as the app repository got them. A dry run counts what it would do:
/// a mount within one registry, a copy across two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlobCounts {
    pub present: usize,
    pub mounted: usize,
    pub copied: usize,
    pub bytes_copied: u64,
}

impl BlobCounts {
    fn add(&mut self, transfer: BlobTransfer) {
        match transfer {
            BlobTransfer::Present => self.present += 1,
            BlobTransfer::Mounted => self.mounted += 1,
            BlobTransfer::Copied { bytes } => {
                self.copied += 1;
                self.bytes_copied += bytes;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RebaseError {
    /// Unsafe to rebase (the lifecycle rebaser would refuse too); nothing was written.
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The images are not something a rebase applies to as named (no tag, not an image…).
    #[error("{0}")]
    Unusable(String),
    /// A signature of what the tag would lead to could not be written: the tag was left alone.
    #[error("{0}; the tag was left alone")]
    Sign(#[from] Box<crate::signing::SignError>),
    /// Someone else moved the tag while we rebased; nothing of ours is under it.
    #[error("{image} moved from {expected} to {found} during the rebase; the tag was left alone")]
    TagMoved { image: String, expected: String, found: String },
    /// A newer change has an action for this image: only its target may be written.
    #[error("superseded by change {by}: a newer change has an action for this image; the tag was left alone")]
    Superseded { by: String },
    /// The action is no longer `running` in the ledger (the daemon stopped or requeued it).
    #[error("the action is no longer running; the tag was left alone")]
    NotRunning,
    /// The write-ahead record could not be made, so the tag was not written.
    #[error("cannot record the tag write before making it; the tag was left alone: {0}")]
    Record(#[source] crate::ledger::LedgerError),
    /// The tag PUT failed in a way that leaves open whether it landed.
    #[error("writing the tag {image} ({previous} -> {wrote}) failed and may or may not have landed: {source}")]
    TagWriteUnknown { image: String, previous: String, wrote: String, source: Box<RegistryError> },
    /// Another writer's PUT landed right after ours (between our PUT and the HEAD after it).
    #[error(
        "tag_race: {image} holds {found} right after we wrote {wrote} over {previous}: another writer moved it at the same moment"
    )]
    TagRace { image: String, previous: String, wrote: String, found: String },
}

#[derive(Deserialize)]
struct ManifestDoc {
    config: Descriptor,
}

/// The layers an app's platform manifest lists: blobs its repository has.
#[derive(Deserialize)]
struct LayersDoc {
    #[serde(default)]
    layers: Vec<LayerDescriptor>,
}

#[derive(Deserialize)]
struct LayerDescriptor {
    digest: String,
    #[serde(default, rename = "mediaType")]
    media_type: String,
}

impl LayersDoc {
    /// The digests of the layers the registry holds in the manifest's repository: all but foreign
    /// (non-distributable) ones, which live elsewhere.
    fn held(bytes: &[u8]) -> BTreeSet<String> {
        let doc: LayersDoc = serde_json::from_slice(bytes).unwrap_or(LayersDoc { layers: Vec::new() });
        doc.layers
            .into_iter()
            .filter(|l| !l.media_type.contains("foreign") && !l.media_type.contains("nondistributable"))
            .map(|l| l.digest)
            .collect()
    }
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
}

#[derive(Deserialize)]
struct IndexDoc {
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

#[derive(Deserialize)]
struct IndexEntry {
    #[serde(default, rename = "mediaType")]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<serde_json::Value>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

impl IndexEntry {
    /// A platform image of the app (not an attestation or another artifact riding along).
    fn is_platform_image(&self) -> bool {
        let os = self.platform.as_ref().and_then(|p| p.get("os")).and_then(|o| o.as_str()).unwrap_or("unknown");
        (self.media_type == OCI_MANIFEST || self.media_type == DOCKER_MANIFEST)
            && os != "unknown"
            && !self.annotations.contains_key("vnd.docker.reference.type")
    }
}

/// One platform decided, with what it was.
struct Decided {
    previous: String,
    platform: String,
    /// The run image manifest it goes onto, pinned.
    run_image: String,
    rebase: PlatformRebase,
    /// The layers the app's manifest lists now: in its repository already, so the new run image's
    /// layers among them (unchanged between the old run image and the new) need no mount.
    held: BTreeSet<String>,
}

/// Rebases `request.image` onto `request.run_image` (see the module doc for the order of writes).
pub async fn rebase(
    registry: &Registry,
    request: &RebaseRequest,
    guard: &impl TagGuard,
) -> Result<RebaseReport, RebaseError> {
    rebase_with(registry, request, guard, &RunImageDocs::default()).await
}

/// [`rebase`], with the run image's documents read through `run_docs` (the daemon keeps one for
/// every rebase it makes).
pub async fn rebase_with(
    registry: &Registry,
    request: &RebaseRequest,
    guard: &impl TagGuard,
    run_docs: &RunImageDocs,
) -> Result<RebaseReport, RebaseError> {
    rebase_planned(registry, request, guard, run_docs, None).await
}

/// [`rebase_with`] from the app image planning read (`planned`, the digest the tag held then):
/// when a keeping view of `registry` ([`Registry::keeping`]) still has its manifest, the tag is
/// not read before the writes; the HEADs right before signing and before the tag's PUT tell
/// whether it still holds that digest. If it moved since, the rebase starts over from what the
/// tag holds now, unless `request.image` names a digest (one whose signature was verified): then
/// only that digest is rebased, and a tag that moved away from it is [`RebaseError::TagMoved`].
pub async fn rebase_planned(
    registry: &Registry,
    request: &RebaseRequest,
    guard: &impl TagGuard,
    run_docs: &RunImageDocs,
    planned: Option<&str>,
) -> Result<RebaseReport, RebaseError> {
    let pinned = request.image.digest();
    if let Some(digest) = pinned.or(planned)
        && let Some(kept) = registry.kept_manifest(&request.image, digest).await
    {
        match rebase_from(registry, request, guard, run_docs, Some(kept)).await {
            Err(RebaseError::TagMoved { found, .. }) if pinned.is_none() => {
                tracing::debug!(image = %request.image, planned = digest, %found, "the app tag moved since planning; rebasing what it holds now");
            }
            other => return other,
        }
    }
    rebase_from(registry, request, guard, run_docs, None).await
}

/// The rebase, from the app's top manifest when one is given (else read by tag).
async fn rebase_from(
    registry: &Registry,
    request: &RebaseRequest,
    guard: &impl TagGuard,
    run_docs: &RunImageDocs,
    app_top: Option<Manifest>,
) -> Result<RebaseReport, RebaseError> {
    let app = &request.image;
    let Some(tag) = app.tag() else {
        return Err(RebaseError::Unusable(format!(
            "{app} names no tag: a rebase moves a tag; name the app image by its tag"
        )));
    };
    let run = &request.run_image;
    // The tag alone: HEADs and PUTs below name it, never a digest the user added.
    let tagged = ImageRef::parse(&app.with_tag_only()).map_err(|e| unusable(app, e.to_string()))?;
    // App documents by digest: what planning read costs no request.
    let reads = registry.keeping();
    let app_top = match app_top {
        Some(top) => top,
        None => registry.get_manifest(app, tag).await?,
    };
    if let Some(expected) = app.digest().filter(|d| *d != app_top.digest) {
        return Err(RebaseError::TagMoved {
            image: app.with_tag_only(),
            expected: expected.to_string(),
            found: app_top.digest.clone(),
        });
    }
    let run_top = run_docs.manifest(registry, run, run.manifest_reference()).await?;
    let mut decided = Vec::new();
    for child in app_children(&reads, app, &app_top).await? {
        decided.push(decide_platform(registry, &reads, request, run_docs, &run_top, child).await?);
    }
    let mut report = RebaseReport::decided(app, &app_top, run.pinned(&run_top.digest), &decided);
    let rebasing = tag::Rebasing { registry, request, tag, tagged: &tagged, app_top: &app_top, decided: &decided };
    if request.dry_run {
        rebasing.preview(&mut report).await?;
    } else {
        rebasing.write(guard, &mut report).await?;
    }
    Ok(report)
}

/// The app's platform manifests: an index's platform images (read by digest), or the one manifest.
async fn app_children(reads: &Registry, app: &ImageRef, app_top: &Manifest) -> Result<Vec<Manifest>, RebaseError> {
    if !is_index(&app_top.media_type) {
        return Ok(vec![app_top.clone()]);
    }
    let index: IndexDoc = parse(&app_top.bytes, app, "app index")?;
    let mut children = Vec::new();
    for entry in index.manifests.into_iter().filter(IndexEntry::is_platform_image) {
        if !is_sha256_digest(&entry.digest) {
            return Err(unusable(app, format!("its index lists a bad digest \"{}\"", escape(&entry.digest))));
        }
        children.push(reads.get_manifest(app, &entry.digest).await?);
    }
    if children.is_empty() {
        return Err(unusable(app, "its index lists no platform image".to_string()));
    }
    Ok(children)
}

/// One app platform's rebase decided against the run image's manifest for its platform.
async fn decide_platform(
    registry: &Registry,
    reads: &Registry,
    request: &RebaseRequest,
    run_docs: &RunImageDocs,
    run_top: &Manifest,
    child: Manifest,
) -> Result<Decided, RebaseError> {
    let (app, run) = (&request.image, &request.run_image);
    let app_config = config_of(reads, app, &child, "app manifest").await?;
    let platform = decide::config_platform(&app_config)?;
    let base = if is_index(&run_top.media_type) {
        let digest = decide::select_platform(&run_top.bytes, &platform)?;
        run_docs.manifest(registry, run, &digest).await?
    } else {
        run_top.clone()
    };
    let base_config = run_docs.config(registry, run, &base).await?;
    let options = RebaseOptions {
        force: request.force,
        run_image_name: run.with_tag_only(),
        run_image_reference: run.pinned(&base.digest),
        known_run_images: request.known_run_images.clone(),
    };
    let rebase = decide::rebase_platform(&child.bytes, &app_config, &base.bytes, &base_config, &options)?;
    let held = LayersDoc::held(&child.bytes);
    Ok(Decided {
        previous: child.digest,
        platform: platform.to_string(),
        run_image: options.run_image_reference,
        rebase,
        held,
    })
}

impl RebaseReport {
    /// What was decided, before anything is written: each platform's rebase, no digest yet.
    fn decided(app: &ImageRef, app_top: &Manifest, reference: String, decided: &[Decided]) -> Self {
        RebaseReport {
            image: app.with_tag_only(),
            previous: app_top.digest.clone(),
            digest: None,
            reference,
            platforms: decided
                .iter()
                .map(|d| PlatformReport {
                    platform: d.platform.clone(),
                    previous: d.previous.clone(),
                    digest: d.rebase.manifest_digest.clone(),
                    base_layers: LayerCounts { from: d.rebase.base_layers_from, to: d.rebase.base_layers_to },
                    app_layers: d.rebase.app_layers,
                    already_rebased: d.rebase.already_rebased,
                })
                .collect(),
            blobs: BlobCounts::default(),
            signing: None,
        }
    }
}

/// The pin histories (newest first) of the run image watches that may hold `run_image`: the one of
/// `builder`'s run image (as the monitor watches it) and the one named by `run_image`'s own tag.
/// What the ledger does not have is left out: an unknown run image is not judged.
pub async fn known_run_images(
    config: &crate::config::Config,
    ledger: &crate::ledger::Ledger,
    builder: Option<&str>,
    run_image: &ImageRef,
) -> Result<Vec<Vec<KnownPin>>, crate::ledger::LedgerError> {
    let mut names = Vec::new();
    if let Some(settings) = builder.and_then(|b| config.builder(b))
        && let Some(record) = ledger.watch(&settings.name).await?
        && let Ok(Some(watch)) = crate::config::run_image_watch(settings, record.pinned_metadata().as_ref())
    {
        names.push(run_watch_name(&watch));
    }
    if run_image.digest().is_none() {
        names.push(run_watch_name(run_image));
    }
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let pins = ledger.history(&name, config.monitor.history.max(1) + 1).await?;
        if !pins.is_empty() {
            out.push(pins.into_iter().map(|p| KnownPin { digest: p.digest, platforms: p.platforms }).collect());
        }
    }
    Ok(out)
}

/// The new run image's layers the pending platforms need, each once.
fn unique_blobs(pending: &[&Decided]) -> Vec<Blob> {
    let mut seen = BTreeSet::new();
    pending.iter().flat_map(|d| d.rebase.base_blobs.iter()).filter(|b| seen.insert(b.digest.clone())).cloned().collect()
}

async fn config_of(
    registry: &Registry,
    image: &ImageRef,
    manifest: &Manifest,
    what: &str,
) -> Result<bytes::Bytes, RebaseError> {
    let doc: ManifestDoc = parse(&manifest.bytes, image, what)?;
    Ok(registry.get_blob(image, &doc.config.digest, MAX_CONFIG_BYTES).await?)
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], image: &ImageRef, what: &str) -> Result<T, RebaseError> {
    serde_json::from_slice(bytes).map_err(|e| unusable(image, format!("its {what} is not readable: {e}")))
}

fn unusable(image: &ImageRef, why: String) -> RebaseError {
    RebaseError::Unusable(format!("{image}: {why}"))
}

impl RebaseReport {
    /// Per platform, what was replaced and what kept; then the blobs and where the tag is.
    pub fn render_text(&self, dry_run: bool) -> String {
        let mut out = String::new();
        let nothing_to_do = self.platforms.iter().all(|p| p.already_rebased);
        let image = escape(&self.image);
        let _ = if nothing_to_do {
            writeln!(out, "{image} is already on {}: nothing to write", escape(&self.reference))
        } else if dry_run {
            writeln!(
                out,
                "{image} ({}) would be rebased onto {} (dry run: nothing written)",
                self.previous,
                escape(&self.reference)
            )
        } else {
            writeln!(
                out,
                "{image} rebased onto {}: {} -> {}",
                escape(&self.reference),
                self.previous,
                self.digest.as_deref().unwrap_or("?")
            )
        };
        for p in &self.platforms {
            let _ = if p.already_rebased {
                writeln!(
                    out,
                    "  {}: already on this run image ({} run image layers, {} app layers)",
                    escape(&p.platform),
                    p.base_layers.to,
                    p.app_layers
                )
            } else {
                writeln!(
                    out,
                    "  {}: {} run image layers replaced by {}, {} app layers kept; {} -> {}",
                    escape(&p.platform),
                    p.base_layers.from,
                    p.base_layers.to,
                    p.app_layers,
                    p.previous,
                    p.digest
                )
            };
        }
        if !nothing_to_do {
            let b = &self.blobs;
            let verb = if dry_run { "would be " } else { "" };
            let _ = writeln!(
                out,
                "  run image layers: {} present, {} {verb}mounted, {} {verb}copied ({} bytes)",
                b.present, b.mounted, b.copied, b.bytes_copied
            );
        }
        if let Some(signing) = &self.signing {
            let (verb, attest) =
                (if dry_run { "would sign" } else { "signed" }, if signing.attest { " and attest" } else { "" });
            let key = signing.key_id.get(..12).unwrap_or(&signing.key_id);
            let _ = writeln!(out, "  {verb}{attest} with key {key}:");
            for digest in &signing.digests {
                let _ = writeln!(out, "    {digest}");
            }
        }
        out
    }
}
