//! `diff`: how one builder image moved to another (rebase, rebuild, unknown or none), with its OS
//! packages.

use std::path::PathBuf;

use anyhow::Context;

use super::common::{load_config, reader_for};
use super::digests::{self, ImageInput};
use super::failure::Failure;
use builder_monitor::config::Secrets;
use builder_monitor::inspect;
use builder_monitor_core::{cnb, text};

/// Classify the move from one builder image to another: rebase, rebuild, unknown or none.
#[derive(clap::Args)]
pub struct Args {
    /// The builder before: `REPO:TAG`, `REPO@sha256:…`, or `REPO@` the first 12 or more hex digits
    /// of a digest the ledger (with --config) or the tag knows.
    old: String,
    /// The builder after, written as OLD.
    new: String,
    /// Print the `change` object of a builder.changed event.
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
    /// Plain HTTP to the images' registries, as `insecure = true` for them in a config would.
    #[arg(long)]
    insecure: bool,
    /// Registry settings (credentials, TLS) come from this config when given.
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: Option<PathBuf>,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { old, new, json, insecure, config } = args;
    let (old, new) = (ImageInput::parse(&old)?, ImageInput::parse(&new)?);
    let (registry, max_platforms) = reader_for(config.as_deref(), insecure, &[old.image(), new.image()])?;
    let old = digests::resolve(old, config.as_deref(), &registry, max_platforms).await?;
    let new = digests::resolve(new, config.as_deref(), &registry, max_platforms).await?;
    let vulns = vulnerability_data(config.as_deref()).await?;
    let change = inspect::diff(&registry, &old, &new, max_platforms, vulns.as_ref()).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&change).context("encoding JSON")?);
    } else {
        outln!("{}", builder_monitor_core::cnb::explain(&change));
        if change.platforms.len() > 1 {
            for (platform, p) in &change.platforms {
                let reasons = serde_json::to_string(&p.reasons).context("encoding JSON")?;
                outln!("  {}: {} {reasons}", text::escape(platform), p.kind.as_str());
            }
        }
        out!("{}", packages_text(&change));
        out!("{}", fixes_text(&change));
        for note in &change.notes {
            outln!("note: {}", text::escape(note));
        }
    }
    Ok(0)
}

/// The vulnerability data of `[vulnerabilities]` in `config`, loaded once as the daemon loads it
/// at start (a URL mirror: its kept download, no request); none without it.
async fn vulnerability_data(
    config: Option<&std::path::Path>,
) -> Result<Option<builder_monitor::vulns::Vulns>, Failure> {
    let Some(path) = config else { return Ok(None) };
    let config = load_config(path, Secrets::Skip)?;
    let metrics = builder_monitor::metrics::Metrics::new();
    let started = builder_monitor::vulns::start(&config, metrics, Default::default()).await;
    let started = started.context("loading the vulnerability data")?;
    Ok(started.map(|(vulns, _)| vulns))
}

/// `diff`'s fixes: `fixes USN-7000-1 (high): CVE-…` per notice, `fixes: none known`, or why
/// nothing could be matched; nothing without vulnerability data.
fn fixes_text(change: &builder_monitor_core::cnb::Change) -> String {
    let mut out = match (&change.fixes, &change.fixes_note) {
        (Some(fixes), _) if fixes.is_empty() => "fixes: no known notice\n".into(),
        (Some(fixes), _) => {
            fixes.iter().map(|f| format!("fixes {}\n  {}\n", cnb::fix_line(f), cnb::fix_origin_line(f))).collect()
        }
        (None, Some(note)) => format!("fixes: {}\n", text::escape(note)),
        (None, None) => String::new(),
    };
    for unknown in &change.fixes_unknown {
        out.push_str(&format!("fixes {}\n", cnb::unknown_fix_line(unknown)));
    }
    out
}

/// Package moves most `diff` lists per table.
const DIFF_PACKAGE_ROWS: usize = 200;

/// `diff`'s OS package tables (one per platform when their moves differ), or why there are none.
fn packages_text(change: &builder_monitor_core::cnb::Change) -> String {
    let indent = |table: String| table.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let mut out = String::new();
    if let Some(packages) = &change.packages {
        out.push_str(&format!("OS packages ({}):\n", packages.source.as_str()));
        if packages.platforms.is_empty() {
            out.push_str(&indent(packages.table(DIFF_PACKAGE_ROWS)));
        }
        for (platform, diff) in &packages.platforms {
            out.push_str(&format!("  {}:\n{}", text::escape(platform), indent(diff.table(DIFF_PACKAGE_ROWS))));
        }
    }
    if let Some(note) = &change.packages_note {
        out.push_str(&format!("OS packages: {}\n", text::escape(note)));
    }
    out
}
