//! `status`: pins, last checks, recent changes and pending actions, from the ledger.

use std::path::PathBuf;

use anyhow::Context;

use super::common::load_config;
use super::failure::Failure;
use builder_monitor::config::Secrets;
use builder_monitor::daemon::{self, Access};
use builder_monitor::schedule::Clock;
use builder_monitor::status;

/// Print pins, last checks, recent changes and pending actions.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
    /// Recent changes shown per builder.
    #[arg(long, default_value_t = 10)]
    changes: usize,
    /// Ask the Kubernetes cluster now whether it answers, instead of showing why actions wait for
    /// it as the daemon last noted.
    #[arg(long)]
    cluster: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, json, changes, cluster } = args;
    let config = load_config(&config, Secrets::Skip)?;
    let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
    let cluster = if cluster { status::ClusterWaits::Asked } else { status::ClusterWaits::Noted };
    let report = status::collect_with(&config, &ledger, changes, cluster).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
    } else {
        out!("{}", status::render_text(&report));
    }
    Ok(0)
}
