//! `unfreeze`: waiting actions start again.

use std::path::PathBuf;

use super::failure::Failure;
use super::rollout::{self, Request};

/// Lift the freeze: waiting actions start (the newest target of each image).
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, json } = args;
    rollout::run(&config, Request::Unfreeze, json).await
}
