//! `check`: validate the config, print what would be watched, and warn about what would not run.

use std::path::PathBuf;

use super::common::{load_config, uses_pools, watches_something};
use super::failure::{Failure, usage};
use builder_monitor::cluster;
use builder_monitor::config::{Config, Secrets};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::runner;
use builder_monitor_core::plan::ActionKind;

/// Validate the config and print what would be watched.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// What the deployment expects of the config (repeatable), e.g. `listen-port=9464`,
    /// `publish=true`, `state=kubernetes`: any disagreement fails the check, naming the key to
    /// change. Keys: listen-port, namespace, in-cluster, publish, prune, leader-election, state
    /// (`kubernetes` or the SQLite ledger's directory), runner, runner-namespace,
    /// deploy-namespaces (comma-separated), pools (the kubeconfigs mounted at
    /// /etc/builder-monitor/pools/NAME/kubeconfig, comma-separated). `KEY=VALUE@NAME` names the
    /// setting the value came from, which each disagreement then names as the other fix: the Helm
    /// chart's init container passes its values so (`publish=true@features.publish`).
    #[arg(long, value_name = "KEY=VALUE[@NAME]")]
    expect: Vec<cluster::expect::Expectation>,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, expect } = args;
    let config = load_config(&config, Secrets::Resolve)?;
    out!("{}", config.summary());
    let unmet = cluster::expect::unmet(&config, &expect);
    if !unmet.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{}: the config does not fit its deployment (--expect):\n  {}",
            config.source.display(),
            unmet.join("\n  ")
        )));
    }
    // A config whose deploys or builds no daemon could carry out is not one to run.
    if let Some(no_cluster) = cluster::preflight(&config).await {
        return Err(usage(anyhow::anyhow!("{}: {no_cluster}", config.source.display())));
    }
    // Still a valid config (for resolve, diff, alert test), but not one to run.
    if let Err(Failure { error, .. }) = watches_something(&config) {
        // Through the log stream, in order with the log lines before it (eprintln! would
        // also panic on a closed stderr).
        builder_monitor::log_stream::line(&format!("warning: {error}\n"));
    }
    for warning in unserved_apps(&config).await {
        builder_monitor::log_stream::line(&format!("warning: {warning}\n"));
    }
    Ok(0)
}

/// The app images no pool builds, by the platforms their tags have now (read from the registry;
/// an image that cannot be read is left out: its first build may go to any pool). Only when some
/// pool lists its platforms.
async fn unserved_apps(config: &Config) -> Vec<String> {
    if !uses_pools(config, ActionKind::Rebuild) || config.runner.pools.iter().all(|p| p.platforms.is_none()) {
        return Vec::new();
    }
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let mut out = Vec::new();
    for image in config.images.iter().filter(|i| i.pool.is_none()) {
        let reference = image.image.to_string();
        let Some(platforms) = runner::pool::platforms_of(&registry, &reference, config.monitor.max_platforms).await
        else {
            continue;
        };
        if let Err(why) = runner::pool::choose(config, &image.name, Some(&platforms)) {
            out.push(format!("image \"{}\" ({reference}): {why}; its builds will fail until a pool lists its platform or it names one with `pool`", image.name));
        }
    }
    out
}
