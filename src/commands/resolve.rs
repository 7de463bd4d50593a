//! `resolve`: the immutable reference and per-platform digests a reference points at now.

use std::path::PathBuf;

use anyhow::Context;

use super::common::reader_for;
use super::digests::{self, ImageInput};
use super::failure::Failure;
use builder_monitor::inspect;

/// Print the immutable reference and per-platform digests an image reference points at now.
#[derive(clap::Args)]
pub struct Args {
    image: String,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
    /// Plain HTTP to the image's registry, as `insecure = true` for it in a config would.
    #[arg(long)]
    insecure: bool,
    /// Registry settings (credentials, TLS) come from this config when given.
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: Option<PathBuf>,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { image, json, insecure, config } = args;
    let image = ImageInput::parse(&image)?;
    let (registry, max_platforms) = reader_for(config.as_deref(), insecure, &[image.image()])?;
    let image = digests::resolve(image, config.as_deref(), &registry, max_platforms).await?;
    let resolution = inspect::resolve(&registry, &image, max_platforms).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&resolution).context("encoding JSON")?);
    } else {
        out!("{}", resolution.render_text());
    }
    Ok(0)
}
