//! `freeze`: no rebase, rebuild, deploy or Git write-back starts until `unfreeze`
//! (`builder_monitor_core::rollout::FREEZE_STOPS`, the one wording of it).

use std::path::PathBuf;

use super::failure::Failure;
use super::rollout::{self, Request};

// No doc comment: the help line is `FREEZE_HELP`, what a freeze stops worded once for every place.
#[derive(clap::Args)]
#[command(about = builder_monitor_core::rollout::FREEZE_HELP, long_about = builder_monitor_core::rollout::FREEZE_LONG_HELP)]
pub struct Args {
    /// Why (shown by `status`, the page and `rollout.frozen`); a new one replaces the old.
    #[arg(long)]
    reason: Option<String>,
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { reason, config, json } = args;
    rollout::run(&config, Request::Freeze { reason }, json).await
}
