//! `approve`: a change's actions that wait for a person may start.

use super::failure::Failure;
use super::rollout::{self, Request};
use crate::cli::Verdict;
use builder_monitor::ledger;

/// Approve a change's actions that wait for a person: they start, in their waves and windows.
///
/// The actions `[rollout] approve` or `[[images]] approve` keep for a person's approval.
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
