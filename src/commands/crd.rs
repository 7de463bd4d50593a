//! `crd`: the ClusterBuilder CustomResourceDefinition.

use super::failure::Failure;
use builder_monitor::cluster;

/// Print the ClusterBuilder CustomResourceDefinition (YAML).
#[derive(clap::Args)]
pub struct Args {}

pub async fn run(_: Args) -> Result<u8, Failure> {
    out!("{}", cluster::crd::CRD_YAML);
    Ok(0)
}
