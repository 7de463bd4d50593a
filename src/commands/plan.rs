//! `plan`: for the current pins and app images, what each image would get and why.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::common::load_config;
use super::failure::Failure;
use builder_monitor::config::Secrets;
use builder_monitor::daemon::{self, Access};
use builder_monitor::metrics::Metrics;
use builder_monitor::reaction::{self, Reaction};
use builder_monitor::registry::Registry;
use builder_monitor::schedule::Clock;
use builder_monitor::status;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::text;

/// For the current pins and app images, print what each image would get and why.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
    /// Also say where each fix's record came from: its file, `modified`, the copies of its id
    /// not used, and the data's source.
    #[arg(long)]
    explain: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, json, explain } = args;
    let config = Arc::new(load_config(&config, Secrets::Skip)?);
    let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
    let metrics = Metrics::new();
    let registry = Registry::new(config.registries.values().cloned(), metrics);
    let mut assessments = Reaction { config: &config, ledger: &ledger, registry: &registry }.assess().await?;
    let (open, _) = status::open_actions(&config, &ledger, chrono::Utc::now()).await?;
    // An open action carries out its own change, which may be older than the newest move.
    let changes = if open.is_empty() { Vec::new() } else { ledger.changes(None, 500).await? };
    for a in &mut assessments {
        a.open = open.iter().rev().find(|o| o.image == a.image).cloned();
        if let Some(o) = &a.open
            && let Some(c) = changes.iter().find(|c| c.id == o.change)
        {
            a.change = Some(reaction::PendingChange::of(c));
        }
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&assessments).context("encoding JSON")?);
    } else if assessments.is_empty() {
        outln!("no [[images]] configured");
    } else {
        for a in &assessments {
            let action = match (a.action, a.path) {
                (Some(ActionKind::Rebase), Some("registry")) => "rebase (in the registry, by the daemon)",
                (Some(ActionKind::Rebase), _) => "rebase (by the runner)",
                (action, _) => action.map_or("nothing", |k| k.as_str()),
            };
            // A reason can quote a registry's error: summarized to a line (`--json` has it whole).
            let head =
                format!("{} (builder {}, policy {}): {action} — {}", a.image, a.builder, a.policy.as_str(), a.why);
            outln!("{}", text::fit(&head, text::LINE));
            if let Some(c) = &a.change {
                outln!("  {}", text::fit(&fixes_line(c), text::LINE - 2));
                for line in unknown_lines(c, explain) {
                    outln!("    {line}");
                }
            }
            match a.deploy.first() {
                Some(reaction::PlannedDeploy::Exec { .. }) => outln!("  then run [runner.exec] deploy"),
                Some(_) => {
                    let to: Vec<String> = a.deploy.iter().map(|d| text::escape(&d.to_string()).into_owned()).collect();
                    outln!("  then deploy to {}", to.join(", "));
                }
                None => {}
            }
            if let Some(o) = &a.open {
                let why = o.waiting_for.as_deref().map(|w| format!(": {}", text::escape(w))).unwrap_or_default();
                let open =
                    format!("open: {} for change {} (wave {}, {}){why}", o.action, o.change, o.wave, o.shown_state());
                outln!("  {}", text::fit(&open, text::LINE - 2));
            }
        }
    }
    if !json && !config.gitops.is_empty() {
        // After the changes' other actions, each target gets one commit of what moved.
        let recent = ledger.actions(500).await?;
        for t in status::gitops_targets(&config, &recent) {
            let last = match (&t.commit, &t.change) {
                (Some(c), Some(change)) => format!("last commit {} (change {change})", &c[..c.len().min(12)]),
                _ => "no commit yet".into(),
            };
            outln!("gitops {} ({} {}): then commit the new digests; {last}", t.name, text::escape(&t.repo), t.branch);
        }
    }
    Ok(0)
}

/// The fixes of `change` not claimed (`unknown: why`), and with `explain` where each fix came
/// from and the data's source.
fn unknown_lines(change: &reaction::PendingChange, explain: bool) -> Vec<String> {
    let mut lines: Vec<String> = change.fixes_unknown.iter().map(builder_monitor_core::cnb::unknown_fix_line).collect();
    if explain {
        let fixes = change.fixes.as_deref().unwrap_or_default();
        lines.extend(fixes.iter().map(builder_monitor_core::cnb::fix_origin_line));
        if let Some(source) = &change.fixes_source {
            let digest = source.sha256.as_deref().map(|s| format!(", sha256 {s}")).unwrap_or_default();
            let etag = source.etag.as_deref().map(|e| format!(", ETag {}", text::escape(e))).unwrap_or_default();
            let trusted = match &source.unverified {
                None => String::new(),
                Some(why) => format!("; may not expedite: {}", text::escape(why)),
            };
            lines.push(format!("data from {}{etag}{digest}{trusted}", text::escape(&source.url)));
        }
    }
    lines
}

/// What applying the change would fix: `change ID fixes USN-… (high): CVE-…; …`, `fixes no known
/// notice`, or why nothing could be matched; without vulnerability data, only the change.
fn fixes_line(change: &reaction::PendingChange) -> String {
    let fixes = match (&change.fixes, &change.fixes_note) {
        (Some(f), _) if f.is_empty() => " fixes no known notice".to_string(),
        (Some(f), _) => {
            let lines: Vec<String> = f.iter().map(builder_monitor_core::cnb::fix_line).collect();
            format!(" fixes {}", lines.join("; "))
        }
        (None, Some(note)) => format!(" fixes: {}", text::escape(note)),
        (None, None) => String::new(),
    };
    format!("change {}{fixes}", change.id)
}
