//! Short digests in the image references commands take (`diff REPO@sha256:0123456789ab …`): the
//! `sha256:` and 12 or more hex digits `status`, `plan` and the page show, resolved to the one
//! digest they start among those the ledger recorded for that repository (builder and run image
//! pins with their platform manifests, app tag moves) and what the registry's tag holds now (and
//! an index's platform manifests). A prefix that starts none, or several, is refused.

use std::path::Path;

use super::common::{load_config, parse_image};
use super::failure::{Failure, usage};
use builder_monitor::config::{Secrets, StateLocation};
use builder_monitor::ledger::Ledger;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::{DigestInput, ImageRef, resolve_digest};

/// An image reference as given: parsed, or its repository (and tag) with a short digest to resolve.
pub enum ImageInput {
    Parsed(ImageRef),
    Short { image: ImageRef, prefix: DigestInput },
}

impl ImageInput {
    pub fn parse(text: &str) -> Result<Self, Failure> {
        if let Some((rest, digest)) = text.rsplit_once('@')
            && let Some(prefix @ DigestInput::Prefix(_)) = DigestInput::parse(digest)
        {
            return Ok(ImageInput::Short { image: parse_image(rest)?, prefix });
        }
        parse_image(text).map(ImageInput::Parsed)
    }

    /// The reference to read the registry's client settings for (its registry is what counts).
    pub fn image(&self) -> &ImageRef {
        match self {
            ImageInput::Parsed(image) | ImageInput::Short { image, .. } => image,
        }
    }
}

/// The reference `input` names, a short digest resolved (said on stderr, with the full digest).
pub async fn resolve(
    input: ImageInput,
    config: Option<&Path>,
    registry: &Registry,
    max_platforms: usize,
) -> Result<ImageRef, Failure> {
    let (image, prefix) = match input {
        ImageInput::Parsed(image) => return Ok(image),
        ImageInput::Short { image, prefix } => (image, prefix),
    };
    let repository = format!("{}/{}", image.registry(), image.repository());
    let mut candidates = recorded(config, &repository).await?;
    // What the tag holds now, and an index's platform manifests.
    if let Ok(head) = registry.head_manifest(&image).await {
        if let Ok(seen) = builder_monitor::inspect::observe(registry, &image, &head.digest, max_platforms).await {
            candidates.extend(seen.platforms.into_values());
        }
        candidates.push(head.digest);
    }
    let tag = image.tag().unwrap_or("latest");
    let within = format!("the digests recorded for {repository} and the ones its tag {tag} holds");
    let digest = resolve_digest(&prefix, candidates.iter().map(String::as_str), &within).map_err(usage)?;
    builder_monitor::log_stream::line(&format!("{} is {digest}\n", prefix.as_str()));
    Ok(image.at_digest(&digest))
}

/// Every digest the config's ledger recorded for `repository` (none without a config or ledger).
async fn recorded(config: Option<&Path>, repository: &str) -> Result<Vec<String>, Failure> {
    let Some(path) = config else { return Ok(Vec::new()) };
    let config = load_config(path, Secrets::Skip)?;
    let StateLocation::Sqlite(state) = &config.monitor.state else { return Ok(Vec::new()) };
    if !state.exists() {
        return Ok(Vec::new());
    }
    let ledger = Ledger::open_read_only(state)?;
    let same = |image: &str| {
        ImageRef::parse(image).is_ok_and(|i| format!("{}/{}", i.registry(), i.repository()) == repository)
    };
    let mut out = Vec::new();
    let history = config.monitor.history.max(1);
    for pin in ledger.pins().await? {
        if same(&pin.image) {
            for pinned in ledger.history(&pin.name, history).await? {
                out.extend(pinned.platforms);
                out.push(pinned.digest);
            }
        }
    }
    for m in ledger.tag_moves(None, usize::MAX >> 1).await? {
        if same(&m.reference) {
            out.extend(m.before.into_iter().chain(m.after));
        }
    }
    Ok(out)
}
