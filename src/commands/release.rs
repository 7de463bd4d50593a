//! `release`: a change's later waves go on after a failure held them.

use std::path::PathBuf;

use super::failure::Failure;
use super::rollout::{self, Request};
use builder_monitor::ledger::Verdict;

/// Let a change's later waves go after a failure in a lower wave held them.
#[derive(clap::Args)]
pub struct Args {
    change: String,
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { change, config, json } = args;
    rollout::run(&config, Request::Decide { change, image: None, verdict: Verdict::Release }, json).await
}
