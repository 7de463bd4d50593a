//! `reject`: a change's actions that wait for approval never run.

use super::failure::Failure;
use super::rollout::{self, Request};
use crate::cli::Verdict;
use builder_monitor::ledger;

/// Reject a change's actions that wait for approval: they never run (state `rejected`).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    verdict: Verdict,
}

pub async fn run(Args { verdict: v }: Args) -> Result<u8, Failure> {
    rollout::run(
        &v.config,
        Request::Decide { change: v.change, image: v.image, verdict: ledger::Verdict::Reject },
        v.json,
    )
    .await
}
