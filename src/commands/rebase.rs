//! `rebase`: an app image onto a new run image, in the registry itself.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::common::{load_config, parse_image, registry_for, signing_key};
use super::digests::{self, ImageInput};
use super::failure::Failure;
use builder_monitor::config::Secrets;
use builder_monitor::daemon::{self, Access};
use builder_monitor::rebase::{self, RebaseError, RebaseRequest, SignPlan};
use builder_monitor::schedule::Clock;
use builder_monitor_core::reference::ImageRef;

/// Rebase an app image onto a new run image in the registry itself.
///
/// No pod, and no layer bytes when both live on one registry: per platform, the run image's layers
/// swapped under the app's.
#[derive(clap::Args)]
pub struct Args {
    /// The app image, by tag: the tag moves, last.
    image: String,
    /// The new run image (a tag or digest, or `REPO@` a digest's first 12 or more hex digits; an
    /// index or a single manifest).
    #[arg(long)]
    run_image: String,
    /// Registry settings (credentials, TLS) come from this config when given.
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: Option<PathBuf>,
    /// Decide and report, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Override what the lifecycle rebaser's -force overrides (rebasable, target, run image name).
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { image, run_image, config, dry_run, force, json } = args;
    let (image, run_image) = (parse_image(&image)?, ImageInput::parse(&run_image)?);
    // An action by hand: paced by the registry's answers, not the watching's requests_per_second.
    let registry = registry_for(config.as_deref(), false, &[])?.actions();
    let max_platforms = builder_monitor::config::DEFAULT_MAX_PLATFORMS;
    let run_image = digests::resolve(run_image, config.as_deref(), &registry, max_platforms).await?;
    let known_run_images = match config.as_deref() {
        Some(path) => rebase_history(path, &image, &run_image).await?,
        None => Vec::new(),
    };
    let sign = match config.as_deref() {
        Some(path) => signing_key(path)?.and_then(|key| SignPlan::of(&key, None, None, chrono::Utc::now(), None)),
        None => None,
    };
    let request = RebaseRequest { image, run_image, force, dry_run, known_run_images, sign };
    let report = match rebase::rebase(&registry, &request, &rebase::Unguarded).await {
        Ok(report) => report,
        Err(RebaseError::Refused(refusal)) => {
            return Err(anyhow::anyhow!("rebase refused, nothing written: {refusal}").into());
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
    } else {
        out!("{}", report.render_text(dry_run));
    }
    Ok(0)
}

/// The ledger's run image pin histories a `rebase --config` answers to (never onto an older run
/// image): none when the ledger does not exist yet.
async fn rebase_history(
    path: &Path,
    image: &ImageRef,
    run_image: &ImageRef,
) -> Result<Vec<Vec<builder_monitor_core::rebase::order::KnownPin>>, Failure> {
    let config = load_config(path, Secrets::Skip)?;
    let ledger = match daemon::open_ledger(&config, Access::Read, &Clock::System).await {
        Ok(ledger) => ledger,
        Err(daemon::DaemonError::Ledger(builder_monitor::ledger::LedgerError::Missing { .. })) => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    let tag = image.with_tag_only();
    let builder = config.images.iter().find(|i| i.image.with_tag_only() == tag).map(|i| i.builder.as_str());
    Ok(rebase::known_run_images(&config, &ledger, builder, run_image).await?)
}
