//! `freeze`: no rebase or rebuild starts until `unfreeze`.

use std::path::PathBuf;

use super::failure::Failure;
use super::rollout::{self, Request};

/// Stop every rebase and rebuild from starting (running ones finish); checks, pins and alerts
/// go on. Kept in the ledger until `unfreeze`.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    reason: Option<String>,
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { reason, config, json } = args;
    rollout::run(&config, Request::Freeze { reason }, json).await
}
