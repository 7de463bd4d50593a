//! `build-spec`: exactly the object the configured runner would create for an image now.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::ValueEnum;

use super::common::{load_config, pool_names, uses_pools};
use super::failure::{Failure, usage};
use crate::cli::SpecOutput;
use builder_monitor::cluster;
use builder_monitor::config::{Config, Secrets};
use builder_monitor::daemon::{self, Access};
use builder_monitor::metrics::Metrics;
use builder_monitor::reaction::{self, Reaction};
use builder_monitor::registry::Registry;
use builder_monitor::runner::{self, carrier::ActionRef};
use builder_monitor::schedule::Clock;
use builder_monitor_core::plan::ActionKind;

/// Print exactly the object (Job, kpack Build or command) the configured runner would create
/// for an image now, to review or commit.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// The `[[images]]` name.
    #[arg(long)]
    image: String,
    #[arg(long, value_enum)]
    action: SpecAction,
    /// The `[[runner.pools]]` entry to show it in (default: the pool it would go to now, by
    /// its `pool` or the app image's platforms).
    #[arg(long)]
    pool: Option<String>,
    #[arg(long, value_enum, default_value_t = SpecOutput::Yaml)]
    output: SpecOutput,
}

#[derive(Clone, Copy, ValueEnum)]
enum SpecAction {
    Rebuild,
    Rebase,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, image, action, pool, output } = args;
    let mut config = load_config(&config, Secrets::Skip)?;
    // Before the ledger is opened: a misspelt name is a usage error, whatever the ledger.
    reaction::configured_image(&config, &image).map_err(usage)?;
    if let Some(pool) = &pool {
        in_pool(&mut config, &image, pool).map_err(usage)?;
    }
    let config = Arc::new(config);
    let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
    let metrics = Metrics::new();
    let registry = Registry::new(config.registries.values().cloned(), metrics);
    let reaction = Reaction { config: &config, ledger: &ledger, registry: &registry };
    let kind = match action {
        SpecAction::Rebuild => ActionKind::Rebuild,
        SpecAction::Rebase => ActionKind::Rebase,
    };
    let preview = reaction.preview(&image, kind).await?;
    let reference = ActionRef { key: &preview.key, change_id: &preview.change_id, image: &image, kind };
    let object = if uses_pools(&config, kind) {
        // The pool the runner would pick now: the image's (or --pool), or by the app's platforms.
        let platforms =
            runner::pool::platforms_of(&registry, &preview.target.image, config.monitor.max_platforms).await;
        let mut config = (*config).clone();
        if pool.is_none() {
            let chosen = runner::pool::choose(&config, &image, platforms.as_deref())
                .map_err(|e| anyhow::anyhow!("{image}: {e}"))?
                .name
                .clone();
            in_pool(&mut config, &image, &chosen).map_err(usage)?;
        }
        runner::pool::preview_on(&config, &reference, &preview.target, platforms.as_deref())?
    } else {
        runner::preview(&config, &reference, &preview.target)?
    };
    match output {
        SpecOutput::Json => outln!("{}", serde_json::to_string_pretty(&object).context("encoding JSON")?),
        SpecOutput::Yaml => out!("{}", cluster::to_yaml(&object)),
    }
    Ok(0)
}

/// `config` with `image` building in `pool` (`build-spec --pool`).
fn in_pool(config: &mut Config, image: &str, pool: &str) -> anyhow::Result<()> {
    if config.runner.pool(pool).is_none() {
        anyhow::bail!("no pool named \"{pool}\" ({})", pool_names(config));
    }
    if let Some(i) = config.images.iter_mut().find(|i| i.name == image) {
        i.pool = Some(pool.to_string());
    }
    Ok(())
}
