//! `rollback`: an app image's tag moved back to an earlier digest, by a manifest PUT; sent to the
//! running daemon while it holds the ledger.

use std::path::PathBuf;

use anyhow::Context;

use super::common::{load_config, signing_service};
use super::daemon_api;
use super::failure::{Failure, usage};
use builder_monitor::config::{Secrets, StateLocation};
use builder_monitor::daemon::{self, Access};
use builder_monitor::ledger::{LedgerError, WriterLock};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::rollback;
use builder_monitor::schedule::Clock;
use builder_monitor_core::reference::DigestInput;
use builder_monitor_core::text;

/// Move an app image's tag back to an earlier recorded digest, by a manifest PUT.
///
/// To the digest before its last rebase or rebuild, or to another digest the ledger recorded for
/// it (--to): nothing is rebuilt. Recorded with who asked, and announced as `image.rolled_back`.
#[derive(clap::Args)]
pub struct Args {
    /// The `[[images]]` name, or its tag.
    image: String,
    /// A digest recorded for the image (see `status`), or its first 12 or more hex digits.
    #[arg(long)]
    to: Option<String>,
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Print what was done as JSON, full digests (fields are added, never renamed).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { image, to, config: path, json } = args;
    let config = load_config(&path, Secrets::Skip)?;
    rollback::configured_image(&config, &image).map_err(usage)?;
    if let Some(to) = to.as_deref().filter(|d| DigestInput::parse(d).is_none()) {
        return Err(usage(rollback::RollbackError::InvalidDigest(to.to_string())));
    }
    // A write to the ledger: one writer at a time, as for `run`; while a daemon holds it,
    // the rollback goes to that daemon (its credentials, its ledger).
    let clock = Clock::System;
    let by = builder_monitor::rollout::cli_user();
    let _writer = match &config.monitor.state {
        StateLocation::Sqlite(ledger) => match WriterLock::acquire(ledger, clock.now()) {
            Ok(writer) => Some(writer),
            Err(LedgerError::Locked { holder, .. }) => {
                let path = format!("images/{}/rollback", daemon_api::encode_segment(&image));
                let body = serde_json::json!({ "to": to, "by": by });
                let text = daemon_api::call_daemon(&config, &holder, reqwest::Method::POST, &path, body).await?;
                let done: rollback::Rollback = serde_json::from_str(&text).context("reading the daemon's answer")?;
                print_resolved(to.as_deref(), &done);
                print_rollback(&done, json)?;
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        },
        StateLocation::Kubernetes => None,
    };
    let config = load_config(&path, Secrets::Registries)?;
    let signing = signing_service(&path, &config)?;
    let settings = rollback::configured_image(&config, &image).map_err(usage)?;
    let ledger = daemon::open_ledger(&config, Access::Write, &clock).await?;
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let done =
        rollback::rollback(&config, &ledger, &registry, signing.as_ref(), settings, to.as_deref(), &by, clock.now())
            .await;
    // What the registry said about the referrers API while signing, as the daemon records it.
    ledger.record_referrers_answers(&registry, clock.now()).await;
    let done = done?;
    print_resolved(to.as_deref(), &done);
    print_rollback(&done, json)?;
    Ok(0)
}

/// The full digest a short `--to` named, said on stderr (as every command says what a short digest
/// resolved to), before what was done with it.
fn print_resolved(to: Option<&str>, done: &rollback::Rollback) {
    if let Some(to) = to.filter(|to| !to.eq_ignore_ascii_case(&done.to)) {
        builder_monitor::log_stream::line(&format!("--to {to} is {}\n", done.to));
    }
}

/// What a rollback did: for people, digests short and no line over [`text::LINE`]; with `json`,
/// the whole record.
fn print_rollback(done: &rollback::Rollback, json: bool) -> Result<(), Failure> {
    if json {
        outln!("{}", serde_json::to_string_pretty(done).context("encoding JSON")?);
        return Ok(());
    }
    let why = match &done.undone {
        Some(m) => format!(
            "the digest before its last {}{}",
            m.kind.as_str(),
            m.action.as_deref().map(|a| format!(" (action {a})")).unwrap_or_default()
        ),
        None => "as asked with --to".to_string(),
    };
    let (reference, to) = (text::fit(&done.reference, text::LINE / 2), text::short_reference(&done.to));
    if done.moved {
        let from = done.from.as_deref().map_or("nothing (the tag did not exist)".into(), text::short_reference);
        outln!("{}: moved {reference} from {from} to {to}", done.image);
        let by = done.by.as_deref().map(|by| format!(" (by {by})")).unwrap_or_default();
        outln!("  {}", text::fit(&format!("{why}; recorded in the ledger{by}"), text::LINE - 2));
        if let Some(signed) = &done.signed {
            outln!(
                "  signed {} (it carried no signature by [signing]'s key): {}",
                text::short_reference(&signed.digest),
                text::short_reference(&signed.signature)
            );
        }
    } else {
        outln!("{}: {reference} already points at {to}", done.image);
        outln!("  {why}; nothing changed");
    }
    Ok(())
}
