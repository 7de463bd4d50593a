//! `check`: validate the config, print what would be watched, and warn about what would not run;
//! with `--online`, also ask each registry, cluster and Git remote it names (`check::online`).

mod online;

use std::path::PathBuf;
use std::time::Duration;

use super::common::{load_config, uses_pools, watches_something};
use super::failure::{Failure, usage};
use builder_monitor::cluster;
use builder_monitor::config::{Config, OsvSource, Secrets, redact_url};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::runner;
use builder_monitor::vulns;
use builder_monitor_core::plan::ActionKind;

/// Validate the config and print what would be watched.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// What the deployment expects of the config (repeatable), e.g. `publish=true`.
    ///
    /// E.g. `listen-port=9464`, `publish=true`, `state=kubernetes`: any disagreement fails the
    /// check, naming the key to change. Keys: listen-port, namespace, in-cluster, publish, prune, leader-election, state
    /// (`kubernetes` or the SQLite ledger's directory), runner, runner-namespace,
    /// deploy-namespaces (comma-separated), pools (the kubeconfigs mounted at
    /// /etc/builder-monitor/pools/NAME/kubeconfig, comma-separated). `KEY=VALUE@NAME` names the
    /// setting the value came from, which each disagreement then names as the other fix: the Helm
    /// chart's init container passes its values so (`publish=true@features.publish`).
    #[arg(long, value_name = "KEY=VALUE[@NAME]")]
    expect: Vec<cluster::expect::Expectation>,
    /// Also ask what the config names whether it is there, as `run` would.
    ///
    /// One HEAD per builder
    /// watch, per run image watch (after reading its builder's metadata) and per app image tag
    /// (with the daemon's registry settings and credentials), one request per Kubernetes cluster
    /// the daemon would use, one `git ls-remote` per [[gitops]] target, one `HEAD /` per alert
    /// receiver's host (no event sent) and one `HEAD` of an OSV URL. Each failure is one line
    /// naming the entry and the fix, and the exit code is 1; an app image tag not pushed yet is
    /// only a note (its first build pushes it).
    #[arg(long)]
    online: bool,
    /// With --online: how long each entry's check may take (they run at once, so a hung host
    /// costs this once), e.g. `5s`.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = humantime::parse_duration, requires = "online")]
    timeout: Duration,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, expect, online, timeout } = args;
    let config = load_config(&config, Secrets::Resolve)?;
    out!("{}", config.summary());
    let unmet = cluster::expect::unmet(&config, &expect);
    if !unmet.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{}: the config does not fit its deployment (--expect):\n  {}",
            config.source.display(),
            unmet.join("\n  ")
        )));
    }
    // A config whose deploys or builds no daemon could carry out is not one to run.
    if let Some(no_cluster) = cluster::preflight(&config).await {
        return Err(usage(anyhow::anyhow!("{}: {no_cluster}", config.source.display())));
    }
    // Still a valid config (for resolve, diff, alert test), but not one to run.
    if let Err(Failure { error, .. }) = watches_something(&config) {
        // Through the log stream, in order with the log lines before it (eprintln! would
        // also panic on a closed stderr).
        builder_monitor::log_stream::line(&format!("warning: {error}\n"));
    }
    if let Some(taken) = listen_port_taken(&config) {
        return Err(usage(anyhow::anyhow!("{}: {taken}", config.source.display())));
    }
    vulnerability_data(&config).await?;
    for warning in unserved_apps(&config).await {
        builder_monitor::log_stream::line(&format!("warning: {warning}\n"));
    }
    if online { online_checks(&config, timeout).await } else { Ok(0) }
}

/// Why `run` could not listen where `[server] listen` says: another process holds the port. Not
/// when this config's own daemon holds it (it holds the ledger's writer lock too), nor for port 0.
fn listen_port_taken(config: &Config) -> Option<String> {
    let listen = config.server.as_ref()?.listen;
    if listen.port() == 0 {
        return None;
    }
    let error = std::net::TcpListener::bind(listen).err()?;
    if error.kind() != std::io::ErrorKind::AddrInUse {
        return None;
    }
    if let builder_monitor::config::StateLocation::Sqlite(ledger) = &config.monitor.state
        && ledger.exists()
        && let Err(builder_monitor::ledger::LedgerError::Locked { holder, .. }) =
            builder_monitor::ledger::WriterLock::acquire(ledger, chrono::Utc::now())
    {
        builder_monitor::log_stream::line(&format!(
            "note: [server] listen = \"{listen}\" is held, by this config's running daemon ({holder}) as it seems\n"
        ));
        return None;
    }
    Some(format!(
        "[server] listen = \"{listen}\": another process holds that port, so `run` could not serve there; \
         stop it or pick another port (0 picks a free one)"
    ))
}

/// A local OSV mirror, read as `run` reads it: what it keeps and what it skips (a URL is only
/// named: `run` downloads it).
async fn vulnerability_data(config: &Config) -> Result<(), Failure> {
    let Some(settings) = &config.vulnerabilities else { return Ok(()) };
    if let OsvSource::Url(url) = &settings.osv {
        let every = humantime::format_duration(settings.refresh);
        outln!("vulnerability data: downloaded from {} every {every} by run", redact_url(url));
        return Ok(());
    }
    let loaded = vulns::load_local(&settings.osv)
        .await
        .map_err(|e| usage(anyhow::anyhow!("{}: {e}", config.source.display())))?;
    loaded.log_skips("check");
    let skipped: Vec<String> = loaded.skipped.iter().map(|(why, (n, _))| format!("{} {n}", why.as_str())).collect();
    let skipped = if skipped.is_empty() { String::new() } else { format!(", skipped: {}", skipped.join(", ")) };
    outln!("vulnerability data: {} records kept of {} read{skipped}", loaded.index.len(), loaded.read);
    Ok(())
}

/// `--online`: what passed on stdout, notes and failures on stderr, one line each; 1 when any
/// failed.
async fn online_checks(config: &Config, within: Duration) -> Result<u8, Failure> {
    let findings = online::run(config, within).await;
    let failed = findings.iter().filter(|f| matches!(f, online::Finding::Failed(_))).count();
    outln!(
        "online ({}, each within {}):",
        builder_monitor_core::text::count(findings.len() as u64, "finding"),
        humantime::format_duration(within)
    );
    for finding in &findings {
        match finding {
            online::Finding::Ok(line) => outln!("  ok: {line}"),
            online::Finding::Note(line) => builder_monitor::log_stream::line(&format!("note: {line}\n")),
            online::Finding::Failed(line) => builder_monitor::log_stream::line(&format!("failed: {line}\n")),
        }
    }
    if failed == 0 {
        return Ok(0);
    }
    Err(anyhow::anyhow!("{}: {} of the online checks failed (above)", config.source.display(), failed).into())
}

/// The app images no pool builds, by the platforms their tags have now (read from the registry;
/// an image that cannot be read is left out: its first build may go to any pool). Only when some
/// pool lists its platforms.
async fn unserved_apps(config: &Config) -> Vec<String> {
    if !uses_pools(config, ActionKind::Rebuild) || config.runner.pools.iter().all(|p| p.platforms.is_none()) {
        return Vec::new();
    }
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let mut out = Vec::new();
    for image in config.images.iter().filter(|i| i.pool.is_none()) {
        let reference = image.image.to_string();
        let Some(platforms) = runner::pool::platforms_of(&registry, &reference, config.monitor.max_platforms).await
        else {
            continue;
        };
        if let Err(why) = runner::pool::choose(config, &image.name, Some(&platforms)) {
            out.push(format!("image \"{}\" ({reference}): {why}; its builds will fail until a pool lists its platform or it names one with `pool`", image.name));
        }
    }
    out
}
