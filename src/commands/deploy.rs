//! `deploy`: a deploy by hand, written to the ledger directly when no daemon holds it, else sent to
//! the running daemon's API (the ledger has one writer); `--dry-run` reads the tag at most and
//! records nothing.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::common::load_config;
use super::daemon_api::{call_daemon, encode_segment};
use super::failure::{Failure, usage};
use builder_monitor::cluster;
use builder_monitor::config::{Config, Secrets, StateLocation};
use builder_monitor::daemon::{self, Access};
use builder_monitor::deploy::{self, Deploy, DeployError};
use builder_monitor::ledger::{Ledger, LedgerError, WriterLock};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::schedule::Clock;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::reference::is_sha256_digest;

/// Deploy an app image by hand: the digest its tag holds now, or --to.
///
/// To its workloads (`[[images]] deploy`) or through `[runner.exec] deploy`. Recorded as a deploy
/// action, which the daemon carries out (through its API while it holds the ledger).
#[derive(clap::Args)]
pub struct Args {
    /// The `[[images]]` name.
    image: String,
    /// The digest to deploy (sha256:<64 hex digits>, or its first 12 or more: one recorded for
    /// the image, or the tag's); without it, the one the tag holds now.
    #[arg(long)]
    to: Option<String>,
    /// Print what would be written where, and record nothing (the cluster is not read).
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    json: bool,
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { image, to, dry_run, json, config: path } = &args;
    let (image, to, dry_run, json) = (image.as_str(), to.as_deref(), *dry_run, *json);
    let config = load_config(path, Secrets::Skip)?;
    // Before any lock, registry or ledger: a wrong name or digest is a usage error, whatever they say.
    deploy::check(&config, image, to).map_err(usage)?;
    let clock = Clock::System;
    if dry_run {
        let config = with_registries(path, to, config)?;
        let settings = deploy::check(&config, image, to).map_err(usage)?;
        // Read only when there is one to read: a dry run writes and starts nothing.
        let ledger = match &config.monitor.state {
            StateLocation::Sqlite(state) if state.exists() => Some(Ledger::open_read_only(state)?),
            _ => None,
        };
        let digest = digest(&config, settings, to, ledger.as_ref()).await?;
        let (_, plan) = deploy::prepare(&config, settings, &digest, clock.now());
        return print(&plan, to.is_some(), json);
    }
    // A write to the ledger: one writer at a time, as for `run`; while a daemon holds it, the
    // deploy goes to that daemon (its ledger, its registry client).
    let _writer = match &config.monitor.state {
        StateLocation::Sqlite(ledger) => match WriterLock::acquire(ledger, clock.now()) {
            Ok(writer) => Some(writer),
            Err(LedgerError::Locked { holder, .. }) => {
                let path = format!("images/{}/deploy", encode_segment(image));
                let body = serde_json::json!({ "to": to });
                let text = call_daemon(&config, &holder, reqwest::Method::POST, &path, body).await?;
                let done: Deploy = serde_json::from_str(&text).context("reading the daemon's answer")?;
                print_resolved(to, &done.digest);
                return print(&done, to.is_some(), json);
            }
            Err(e) => return Err(e.into()),
        },
        StateLocation::Kubernetes => None,
    };
    // No daemon holds the ledger, so none answers for its cluster: a deploy to workloads is not
    // recorded where no daemon could write them, with no cluster to be configured at all (a
    // running daemon decides for itself, and a deploy waits there while its cluster does).
    let to_workloads =
        config.runner.carrier(ActionKind::Deploy).backend == builder_monitor::config::BackendKind::Workloads;
    if to_workloads && let Err(error) = cluster::client(&config.kubernetes).await {
        return Err(usage(anyhow::anyhow!(
            "image \"{image}\"'s deploy needs a Kubernetes cluster, and none can be configured ({error}): {}",
            cluster::CONFIGURE
        )));
    }
    let config = with_registries(path, to, config)?;
    let settings = deploy::check(&config, image, to).map_err(usage)?;
    let ledger = daemon::open_ledger(&config, Access::Write, &clock).await?;
    let digest = digest(&config, settings, to, Some(&ledger)).await?;
    let done = deploy::record(&config, &ledger, settings, &digest, clock.now()).await.map_err(failure)?;
    print(&done, to.is_some(), json)
}

/// The config again with its registry credentials when the tag is to be read (no `--to`, or a
/// short one the tag may resolve).
fn with_registries(path: &Path, to: Option<&str>, config: Config) -> Result<Config, Failure> {
    if to.is_some_and(is_sha256_digest) { Ok(config) } else { load_config(path, Secrets::Registries) }
}

/// `to` in full (a short one resolved, and said), or the digest the image's tag holds now.
async fn digest(
    config: &Config,
    image: &builder_monitor::config::ImageSettings,
    to: Option<&str>,
    ledger: Option<&Ledger>,
) -> Result<String, Failure> {
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    if let Some(to) = to {
        let digest = deploy::resolve_to(ledger, Some(&registry), image, to).await.map_err(failure)?;
        print_resolved(Some(to), &digest);
        return Ok(digest);
    }
    deploy::tag_digest(&registry, image).await.map_err(failure)
}

/// The full digest a short `--to` named, said on stderr (as every command says what a short
/// digest resolved to).
fn print_resolved(to: Option<&str>, digest: &str) {
    if let Some(to) = to.filter(|to| !to.eq_ignore_ascii_case(digest)) {
        builder_monitor::log_stream::line(&format!("--to {to} is {digest}\n"));
    }
}

fn failure(e: DeployError) -> Failure {
    if e.is_usage() { usage(e) } else { e.into() }
}

fn print(deploy: &Deploy, asked: bool, json: bool) -> Result<u8, Failure> {
    if json {
        outln!("{}", serde_json::to_string_pretty(deploy).context("encoding JSON")?);
    } else {
        out!("{}", deploy.render_text(asked));
    }
    Ok(0)
}
