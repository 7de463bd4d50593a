//! The commands behind the CLI: each loads what it needs, calls the library and prints; errors
//! carry the exit code (2 for usage and invalid config, 1 for runtime failures).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

#[macro_use]
pub mod out;
mod deploy;
mod rollout;

use crate::cli::{AlertCommand, Command, SpecAction, SpecOutput};
use builder_monitor::alert::{self, SendOutcome};
use builder_monitor::cluster;
use builder_monitor::config::{Config, RegistrySettings, Secrets, StateLocation};
use builder_monitor::daemon::{self, Access};
use builder_monitor::inspect;
use builder_monitor::ledger::WriterLock;
use builder_monitor::ledger::{LedgerError, Verdict};
use builder_monitor::metrics::Metrics;
use builder_monitor::reaction::{self, Reaction};
use builder_monitor::rebase::{self, RebaseError, RebaseRequest};
use builder_monitor::registry::Registry;
use builder_monitor::rollback;
use builder_monitor::runner::{self, carrier::ActionRef};
use builder_monitor::schedule::Clock;
use builder_monitor::status;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::reference::{ImageRef, is_sha256_digest};
use builder_monitor_core::text;
use rollout::Request;

/// A command's failure and its exit code.
/// A failure with the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure { code: 1, error: error.into() }
    }
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure { code: 2, error: error.into() }
}

/// The error and its causes, `: `-separated, each said once: many of our messages (and other
/// crates') already end with their cause's text, which `{:#}` would then print a second time.
pub fn error_text(error: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut previous = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text.clone();
        } else if !text.is_empty() && !previous.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        previous = text;
    }
    out
}

/// Loads a config, reading only the `secrets` the command uses.
fn load_config(path: &Path, secrets: Secrets) -> Result<Config, Failure> {
    let config = Config::load_with(path, secrets).map_err(usage);
    release_freed_memory();
    config
}

/// Gives the heap that reading the config used back to the kernel: the config is parsed a table
/// at a time, but glibc still keeps freed fragments between the allocations that stay.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_freed_memory() {
    // SAFETY: malloc_trim is thread-safe, takes no pointer and only returns free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

/// Keeps glibc to one malloc arena. By default every thread that meets a locked arena gets its
/// own (up to 8 per core), and memory freed in one is never reused by another: at 10,000 builders
/// the daemon's heap was spread over nine arenas, 2.2 MiB more than with one (measured with
/// `MALLOC_ARENA_MAX=1`). Small allocations go through glibc's per-thread cache without the
/// arena's lock, so two cores' workers do not queue on it. Call before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn use_one_malloc_arena() {
    // SAFETY: mallopt takes no pointer; M_ARENA_MAX only caps arenas created from now on.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn use_one_malloc_arena() {}

/// The configured pools' names, for an error.
fn pool_names(config: &Config) -> String {
    let names: Vec<&str> = config.runner.pools.iter().map(|p| p.name.as_str()).collect();
    if names.is_empty() { "no pools are configured".into() } else { format!("configured: {}", names.join(", ")) }
}

/// `config` with `image` building in `pool` (`build-spec --pool`).
fn in_pool(config: &mut Config, image: &str, pool: &str) -> anyhow::Result<()> {
    if config.runner.pool(pool).is_none() {
        anyhow::bail!("no pool named \"{pool}\" ({})", pool_names(config));
    }
    if let Some(i) = config.images.iter_mut().find(|i| i.name == image) {
        i.pool = Some(pool.to_string());
    }
    Ok(())
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

/// Whether an action of `kind` goes to the pools (the `kubernetes` and `kpack` runners).
fn uses_pools(config: &Config, kind: ActionKind) -> bool {
    config.runner.carrier(kind).pools
}

pub async fn execute(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Check { config, expect } => {
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
            for warning in unserved_apps(&config).await {
                builder_monitor::log_stream::line(&format!("warning: {warning}\n"));
            }
            Ok(0)
        }
        Command::Run { config: path, once } => {
            let config = Arc::new(load_config(&path, Secrets::Resolve)?);
            watches_something(&config)?;
            let shutdown = CancellationToken::new();
            if once {
                return Ok(daemon::run(config, once, shutdown).await?);
            }
            tokio::spawn(daemon::stop_on_signal(shutdown.clone()));
            run_reloading(&path, config, shutdown).await
        }
        Command::Resolve { image, json, insecure, config } => {
            let image = parse_image(&image)?;
            let (registry, max_platforms) = reader_for(config.as_deref(), insecure, &[&image])?;
            let resolution = inspect::resolve(&registry, &image, max_platforms).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&resolution).context("encoding JSON")?);
            } else {
                out!("{}", resolution.render_text());
            }
            Ok(0)
        }
        Command::Diff { old, new, json, insecure, config } => {
            let (old, new) = (parse_image(&old)?, parse_image(&new)?);
            let (registry, max_platforms) = reader_for(config.as_deref(), insecure, &[&old, &new])?;
            let change = inspect::diff(&registry, &old, &new, max_platforms).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&change).context("encoding JSON")?);
            } else {
                outln!("{}", change.summary());
                if change.platforms.len() > 1 {
                    for (platform, p) in &change.platforms {
                        let reasons = serde_json::to_string(&p.reasons).context("encoding JSON")?;
                        outln!("  {}: {} {reasons}", text::escape(platform), p.kind.as_str());
                    }
                }
                out!("{}", packages_text(&change));
                for note in &change.notes {
                    outln!("note: {}", text::escape(note));
                }
            }
            Ok(0)
        }
        Command::Rebase { image, run_image, config, dry_run, force, json } => {
            let (image, run_image) = (parse_image(&image)?, parse_image(&run_image)?);
            let registry = registry_for(config.as_deref(), false, &[])?;
            let known_run_images = match config.as_deref() {
                Some(path) => rebase_history(path, &image, &run_image).await?,
                None => Vec::new(),
            };
            let request = RebaseRequest { image, run_image, force, dry_run, known_run_images };
            let report = match rebase::rebase(&registry, &request, &rebase::Unguarded).await {
                Ok(report) => report,
                Err(RebaseError::Refused(refusal)) => {
                    return Err(anyhow::anyhow!("rebase refused, nothing written: {refusal}").into());
                }
                Err(e) => return Err(e.into()),
            };
            if json {
                outln!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
            } else {
                out!("{}", report.render_text(dry_run));
            }
            Ok(0)
        }
        Command::Alert { command: AlertCommand::Test { config, name } } => {
            let Some(name) = name else {
                let config = load_config(&config, Secrets::Skip)?;
                let known: Vec<String> =
                    config.alerts.iter().map(|a| format!("{} ({})", a.name, a.kind.as_str())).collect();
                return Err(usage(match known.is_empty() {
                    true => anyhow::anyhow!("no [[alerts]] configured: add one to send a test event to"),
                    false => anyhow::anyhow!("which alert? pass --name NAME; configured: {}", known.join(", ")),
                }));
            };
            let config = load_config(&config, Secrets::Resolve)?;
            let Some(settings) = config.alert(&name) else {
                let known: Vec<&str> = config.alerts.iter().map(|a| a.name.as_str()).collect();
                return Err(usage(anyhow::anyhow!("no alert named \"{name}\" (configured: {})", known.join(", "))));
            };
            let sent = alert::send_test(settings, chrono::Utc::now()).await?;
            let elapsed = sent.elapsed.as_millis();
            let target = format!("{name} ({} {})", settings.kind.as_str(), settings.url);
            match sent.outcome {
                SendOutcome::Delivered { status } => {
                    outln!("{target}: delivered test event {}, HTTP {status} in {elapsed} ms", sent.event_id);
                    Ok(0)
                }
                other => Err(Failure {
                    code: 1,
                    error: anyhow::anyhow!(
                        "{target}: test event not delivered: {} (after {elapsed} ms)",
                        other.describe()
                    ),
                }),
            }
        }
        Command::BuildSpec { config, image, action, pool, output } => {
            let mut config = load_config(&config, Secrets::Skip)?;
            // Before the ledger is opened: a misspelt name is a usage error, whatever the ledger.
            reaction::configured_image(&config, &image).map_err(usage)?;
            if let Some(pool) = &pool {
                in_pool(&mut config, &image, pool).map_err(usage)?;
            }
            let config = Arc::new(config);
            let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
            let metrics = Metrics::new();
            let registry = Registry::new(config.registries.values().cloned(), metrics);
            let reaction = Reaction { config: &config, ledger: &ledger, registry: &registry };
            let kind = match action {
                SpecAction::Rebuild => ActionKind::Rebuild,
                SpecAction::Rebase => ActionKind::Rebase,
            };
            let preview = reaction.preview(&image, kind).await?;
            let reference = ActionRef { key: &preview.key, change_id: &preview.change_id, image: &image, kind };
            let object = if uses_pools(&config, kind) {
                // The pool the runner would pick now: the image's (or --pool), or by the app's platforms.
                let platforms =
                    runner::pool::platforms_of(&registry, &preview.target.image, config.monitor.max_platforms).await;
                let mut config = (*config).clone();
                if pool.is_none() {
                    let chosen = runner::pool::choose(&config, &image, platforms.as_deref())
                        .map_err(|e| anyhow::anyhow!("{image}: {e}"))?
                        .name
                        .clone();
                    in_pool(&mut config, &image, &chosen).map_err(usage)?;
                }
                runner::pool::preview_on(&config, &reference, &preview.target, platforms.as_deref())?
            } else {
                runner::preview(&config, &reference, &preview.target)?
            };
            match output {
                SpecOutput::Json => outln!("{}", serde_json::to_string_pretty(&object).context("encoding JSON")?),
                SpecOutput::Yaml => out!("{}", cluster::to_yaml(&object)),
            }
            Ok(0)
        }
        Command::Crd => {
            out!("{}", cluster::crd::CRD_YAML);
            Ok(0)
        }
        Command::Rbac { config, service_account, pool, output } => {
            let config = load_config(&config, Secrets::Skip)?;
            if let Err(problem) = cluster::check_object_name(&service_account) {
                return Err(usage(anyhow::anyhow!("--service-account \"{service_account}\": {problem}")));
            }
            let (permissions, namespace) = match &pool {
                None => (cluster::required_permissions(&config), config.kubernetes.namespace.clone()),
                Some(name) => {
                    let Some(pool) = config.runner.pool(name) else {
                        return Err(usage(anyhow::anyhow!("no pool named \"{name}\" ({})", pool_names(&config))));
                    };
                    (cluster::pool_permissions(pool), pool.settings.namespace.clone())
                }
            };
            let objects = cluster::rbac_objects(&permissions, &service_account, &namespace);
            match output {
                SpecOutput::Json => outln!("{}", serde_json::to_string_pretty(&objects).context("encoding JSON")?),
                SpecOutput::Yaml if objects.is_empty() => outln!("# this config uses no Kubernetes permissions"),
                SpecOutput::Yaml => {
                    for object in &objects {
                        out!("---\n{}", cluster::to_yaml(object));
                    }
                }
            }
            Ok(0)
        }
        Command::Plan { config, json } => {
            let config = Arc::new(load_config(&config, Secrets::Skip)?);
            let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
            let metrics = Metrics::new();
            let registry = Registry::new(config.registries.values().cloned(), metrics);
            let mut assessments = Reaction { config: &config, ledger: &ledger, registry: &registry }.assess().await?;
            let (open, _) = status::open_actions(&config, &ledger, chrono::Utc::now()).await?;
            for a in &mut assessments {
                a.open = open.iter().rev().find(|o| o.image == a.image).cloned();
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
                    outln!("{} (builder {}, policy {}): {action} — {}", a.image, a.builder, a.policy.as_str(), a.why);
                    match a.deploy.first() {
                        Some(reaction::PlannedDeploy::Exec { .. }) => outln!("  then run [runner.exec] deploy"),
                        Some(_) => {
                            let to: Vec<String> =
                                a.deploy.iter().map(|d| text::escape(&d.to_string()).into_owned()).collect();
                            outln!("  then deploy to {}", to.join(", "));
                        }
                        None => {}
                    }
                    if let Some(o) = &a.open {
                        let why =
                            o.waiting_for.as_deref().map(|w| format!(": {}", text::escape(w))).unwrap_or_default();
                        outln!(
                            "  open: {} for change {} (wave {}, {}){why}",
                            o.action,
                            o.change,
                            o.wave,
                            o.shown_state()
                        );
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
                    outln!(
                        "gitops {} ({} {}): then commit the new digests; {last}",
                        t.name,
                        text::escape(&t.repo),
                        t.branch
                    );
                }
            }
            Ok(0)
        }
        Command::Rollback { image, to, config: path } => {
            let config = load_config(&path, Secrets::Skip)?;
            rollback::configured_image(&config, &image).map_err(usage)?;
            if let Some(to) = to.as_deref().filter(|d| !is_sha256_digest(d)) {
                return Err(usage(rollback::RollbackError::InvalidDigest(to.to_string())));
            }
            // A write to the ledger: one writer at a time, as for `run`; while a daemon holds it,
            // the rollback goes to that daemon (its credentials, its ledger).
            let clock = Clock::System;
            let _writer = match &config.monitor.state {
                StateLocation::Sqlite(ledger) => match WriterLock::acquire(ledger, clock.now()) {
                    Ok(writer) => Some(writer),
                    Err(LedgerError::Locked { holder, .. }) => {
                        let path = format!("images/{}/rollback", rollout::encode_segment(&image));
                        let body = serde_json::json!({ "to": to });
                        let text = rollout::call_daemon(&config, &holder, reqwest::Method::POST, &path, body).await?;
                        let done: rollback::Rollback =
                            serde_json::from_str(&text).context("reading the daemon's answer")?;
                        print_rollback(&done);
                        return Ok(0);
                    }
                    Err(e) => return Err(e.into()),
                },
                StateLocation::Kubernetes => None,
            };
            let config = load_config(&path, Secrets::Registries)?;
            let settings = rollback::configured_image(&config, &image).map_err(usage)?;
            let ledger = daemon::open_ledger(&config, Access::Write, &clock).await?;
            let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
            let done = rollback::rollback(&config, &ledger, &registry, settings, to.as_deref(), clock.now()).await?;
            print_rollback(&done);
            Ok(0)
        }
        Command::Deploy { image, to, dry_run, json, config } => {
            let args = deploy::Args { image: &image, to: to.as_deref(), dry_run, json, config: &config };
            deploy::run(args).await
        }
        Command::Approve(v) => {
            rollout::run(
                &v.config,
                Request::Decide { change: v.change, image: v.image, verdict: Verdict::Approve },
                v.json,
            )
            .await
        }
        Command::Reject(v) => {
            rollout::run(
                &v.config,
                Request::Decide { change: v.change, image: v.image, verdict: Verdict::Reject },
                v.json,
            )
            .await
        }
        Command::Release { change, config, json } => {
            rollout::run(&config, Request::Decide { change, image: None, verdict: Verdict::Release }, json).await
        }
        Command::Freeze { reason, config, json } => rollout::run(&config, Request::Freeze { reason }, json).await,
        Command::Unfreeze { config, json } => rollout::run(&config, Request::Unfreeze, json).await,
        Command::Status { config, json, changes } => {
            let config = load_config(&config, Secrets::Skip)?;
            let ledger = daemon::open_ledger(&config, Access::Read, &Clock::System).await?;
            let report = status::collect(&config, &ledger, changes).await?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
            } else {
                out!("{}", status::render_text(&report));
            }
            Ok(0)
        }
    }
}

/// What a rollback did, for people.
fn print_rollback(done: &rollback::Rollback) {
    let why = match &done.undone {
        Some(m) => format!(
            "the digest before its last {}{}",
            m.kind.as_str(),
            m.action.as_deref().map(|a| format!(" (action {a})")).unwrap_or_default()
        ),
        None => "as asked with --to".to_string(),
    };
    if done.moved {
        let from = done.from.as_deref().unwrap_or("nothing (the tag did not exist)");
        outln!("{}: moved {} from {from} to {}, {why}; recorded in the ledger", done.image, done.reference, done.to);
    } else {
        outln!("{}: {} already points at {} ({why}); nothing changed", done.image, done.reference, done.to);
    }
}

/// Runs the daemon until it stops; on SIGHUP reads the config again and, when it is valid, stops
/// the daemon's parts and starts them with it (a restart within the process: running commands
/// get their grace period and run again, as after a restart). An invalid config is refused with
/// its errors, and the running daemon goes on with the config it has.
async fn run_reloading(path: &Path, mut config: Arc<Config>, shutdown: CancellationToken) -> Result<u8, Failure> {
    let mut hangups = daemon::hangups();
    loop {
        let term = shutdown.child_token();
        let running = daemon::run(config.clone(), false, term.clone());
        tokio::pin!(running);
        let next = loop {
            tokio::select! {
                code = &mut running => return Ok(code?),
                Some(()) = hangups.recv() => {
                    let loaded = load_config(path, Secrets::Resolve).and_then(|c| watches_something(&c).map(|()| c));
                    match loaded {
                        Ok(next) => {
                            tracing::info!(config = %path.display(), "SIGHUP: the config is valid; restarting with it");
                            term.cancel();
                            break next;
                        }
                        Err(failure) => tracing::error!(
                            config = %path.display(),
                            error = %error_text(&failure.error),
                            "SIGHUP: the config is not valid; still running with the one loaded before (fix it and send SIGHUP again)"
                        ),
                    }
                }
            }
        };
        running.await?;
        if shutdown.is_cancelled() {
            return Ok(0);
        }
        config = Arc::new(next);
    }
}

fn parse_image(text: &str) -> Result<ImageRef, Failure> {
    ImageRef::parse(text).map_err(|e| usage(anyhow::anyhow!("invalid image reference \"{text}\": {e}")))
}

/// A registry client with the config's registry settings, or the defaults; with `insecure`, plain
/// HTTP for the registries of `images`.
fn registry_for(config: Option<&Path>, insecure: bool, images: &[&ImageRef]) -> Result<Registry, Failure> {
    reader_for(config, insecure, images).map(|(registry, _)| registry)
}

/// The registry of [`registry_for`] and how many platforms of an index to read (`[monitor]
/// max_platforms`, or its default without a config).
fn reader_for(config: Option<&Path>, insecure: bool, images: &[&ImageRef]) -> Result<(Registry, usize), Failure> {
    let (mut registries, max_platforms) = match config {
        Some(path) => {
            let config = load_config(path, Secrets::Registries)?;
            (config.registries, config.monitor.max_platforms)
        }
        None => (Default::default(), builder_monitor::config::DEFAULT_MAX_PLATFORMS),
    };
    for image in images.iter().filter(|_| insecure) {
        let host = image.registry();
        registries.entry(host.to_string()).or_insert_with(|| RegistrySettings::defaults_for(host)).insecure = true;
    }
    Ok((Registry::new(registries.into_values(), Metrics::new()), max_platforms))
}

/// The ledger's run image pin histories a `rebase --config` answers to (never onto an older run
/// image): none when the ledger does not exist yet.
async fn rebase_history(
    path: &Path,
    image: &ImageRef,
    run_image: &ImageRef,
) -> Result<Vec<Vec<builder_monitor_core::rebase::order::KnownPin>>, Failure> {
    let config = load_config(path, Secrets::Skip)?;
    let ledger = match daemon::open_ledger(&config, Access::Read, &Clock::System).await {
        Ok(ledger) => ledger,
        Err(daemon::DaemonError::Ledger(builder_monitor::ledger::LedgerError::Missing { .. })) => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    let tag = image.with_tag_only();
    let builder = config.images.iter().find(|i| i.image.with_tag_only() == tag).map(|i| i.builder.as_str());
    Ok(rebase::known_run_images(&config, &ledger, builder, run_image).await?)
}

/// `run` refuses a config without builders: a daemon that watches nothing looks healthy while
/// doing nothing (an empty or truncated config file, say).
fn watches_something(config: &Config) -> Result<(), Failure> {
    if config.builders.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{}: no [[builders]] configured, so there is nothing to watch (`run` refuses this config)",
            config.source.display()
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that says its cause and also returns it from `source()`, as many crates' do.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}: {source}")]
    struct Wrapped {
        path: &'static str,
        source: std::io::Error,
    }

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn each_cause_is_printed_once() {
        let io = not_found().to_string();
        let wrapped = anyhow::Error::new(Wrapped { path: "x", source: not_found() });
        assert_eq!(error_text(&wrapped), format!("cannot read x: {io}"));
        // A context that does not say its cause still gets it.
        let context = anyhow::Error::new(not_found()).context("cannot listen on 127.0.0.1:1");
        assert_eq!(error_text(&context), format!("cannot listen on 127.0.0.1:1: {io}"));
        let both = anyhow::Error::new(Wrapped { path: "y", source: not_found() }).context("starting");
        assert_eq!(error_text(&both), format!("starting: cannot read y: {io}"));
    }

    /// The typed errors at the boundaries: a cause in the message and in `source()` is said once,
    /// and the ledger's and the cluster's kube causes stay out of `source()` (their convention).
    #[test]
    fn typed_boundary_errors_say_each_cause_once() {
        use builder_monitor::cluster::ClusterError;
        use builder_monitor::config::KubeValueError;
        use builder_monitor::daemon::DaemonError;
        use builder_monitor::ledger::LedgerError;
        use builder_monitor::runner::{PreviewError, RunnerError};
        use std::error::Error as _;

        let setup = anyhow::Error::new(DaemonError::Runner(RunnerError::NoClient("kpack")));
        assert_eq!(error_text(&setup), "cannot set up the runner: runner type \"kpack\" needs a Kubernetes client");
        let invalid = RunnerError::InvalidJob { source: KubeValueError::UnknownField("spec.x".into()) };
        let preview = anyhow::Error::new(PreviewError::Object(invalid));
        assert_eq!(error_text(&preview), "the generated Job is not valid: unknown field `spec.x`");

        let io = not_found().to_string();
        let kube = || kube::Error::ReadEvents(not_found());
        let ledger = LedgerError::Kubernetes(kube());
        assert!(ledger.source().is_none());
        let ledger = anyhow::Error::new(DaemonError::Ledger(ledger));
        assert_eq!(error_text(&ledger), format!("ledger on Kubernetes: Error reading events stream: {io}"));
        let cluster = ClusterError::Apply { name: "jammy".into(), error: kube() };
        assert!(cluster.source().is_none());
        assert_eq!(
            error_text(&anyhow::Error::new(DaemonError::Cluster(cluster))),
            format!("Kubernetes API: cannot apply ClusterBuilder jammy: Error reading events stream: {io}")
        );
    }
}
