//! `approve`: a change's actions that wait for a person may start.

use super::failure::Failure;
use super::rollout::{self, Request};
use crate::cli::Verdict;
use builder_monitor::ledger;

/// Approve a change's rebases and rebuilds that wait for a person (`[rollout] approve`,
/// `[[images]] approve`): they start, in their waves and windows.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    verdict: Verdict,
}

pub async fn run(Args { verdict: v }: Args) -> Result<u8, Failure> {
    rollout::run(
        &v.config,
        Request::Decide { change: v.change, image: v.image, verdict: ledger::Verdict::Approve },
        v.json,
    )
    .await
}
