//! The `builder-monitor` command: argument parsing, logging set-up and exit codes
//! (0 ok, 1 runtime failure, 2 usage or invalid config).
// One audited exception: `release_freed_memory`.
#![deny(unsafe_code)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use builder_monitor::alert::{self, Dispatcher, SendOutcome};
use builder_monitor::cluster::{self, lease::LeaseElector, publish::Publisher};
use builder_monitor::config::{Config, RegistrySettings, Secrets, StateLocation};
use builder_monitor::inspect;
use builder_monitor::install_crypto_provider;
use builder_monitor::ledger::{Ledger, WriterLock};
use builder_monitor::metrics::Metrics;
use builder_monitor::monitor::Monitor;
use builder_monitor::monitor::reaction::Reaction;
use builder_monitor::registry::Registry;
use builder_monitor::runner::kubernetes::ActionRef;
use builder_monitor::runner::{self, Backend, Runner};
use builder_monitor::schedule::Clock;
use builder_monitor::server::{self, ServerState};
use builder_monitor::status;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::text;

#[derive(Parser)]
#[command(
    name = "builder-monitor",
    version,
    about = "Watch floating CNB builder tags and pin them to immutable digests"
)]
struct Cli {
    /// Log line format (level from BUILDER_MONITOR_LOG, EnvFilter syntax).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon: check every builder on its schedule until SIGINT/SIGTERM.
    Run {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// Check every builder once, record what moved, and exit (1 if a check failed).
        #[arg(long)]
        once: bool,
    },
    /// Validate the config and print what would be watched.
    Check {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
    },
    /// Print the immutable reference and per-platform digests an image reference points at now.
    Resolve {
        image: String,
        #[arg(long)]
        json: bool,
        /// Plain HTTP to the image's registry, as `insecure = true` for it in a config would.
        #[arg(long)]
        insecure: bool,
        /// Registry settings (credentials, TLS) come from this config when given.
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Classify the move from one builder image to another: rebase, rebuild, unknown or none.
    Diff {
        old: String,
        new: String,
        /// Print the `change` object of a builder.changed event.
        #[arg(long)]
        json: bool,
        /// Plain HTTP to the images' registries, as `insecure = true` for them in a config would.
        #[arg(long)]
        insecure: bool,
        /// Registry settings (credentials, TLS) come from this config when given.
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: Option<PathBuf>,
    },
    /// For the current pins and app images, print what each image would get and why.
    Plan {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Print exactly the object (Job, kpack Build or command) the configured runner would create
    /// for an image now, to review or commit.
    BuildSpec {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// The `[[images]]` name.
        #[arg(long)]
        image: String,
        #[arg(long, value_enum)]
        action: SpecAction,
        #[arg(long, value_enum, default_value_t = SpecOutput::Yaml)]
        output: SpecOutput,
    },
    /// Print the ClusterBuilder CustomResourceDefinition (YAML).
    Crd,
    /// Print the ServiceAccount, Roles and RoleBindings (and the ClusterRole and its binding for
    /// ClusterBuilders) granting exactly the Kubernetes permissions this config uses, ready for
    /// `kubectl apply -f -`. The namespace is the config's `[kubernetes] namespace`.
    Rbac {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// The daemon's ServiceAccount, also the name of its Roles and bindings (as the Helm chart
        /// names them for a release called builder-monitor).
        #[arg(long, default_value = "builder-monitor")]
        service_account: String,
        #[arg(long, value_enum, default_value_t = SpecOutput::Yaml)]
        output: SpecOutput,
    },
    /// Alert receivers.
    Alert {
        #[command(subcommand)]
        command: AlertCommand,
    },
    /// Print pins, last checks, recent changes and pending actions.
    Status {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
        /// Recent changes shown per builder.
        #[arg(long, default_value_t = 10)]
        changes: usize,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum SpecAction {
    Rebuild,
    Rebase,
}

#[derive(Clone, Copy, ValueEnum)]
enum SpecOutput {
    Yaml,
    Json,
}

#[derive(Subcommand)]
enum AlertCommand {
    /// Send a clearly marked test event (type `alert.test`) to one alert and report the outcome.
    Test {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// The `[[alerts]]` name.
        #[arg(long)]
        name: String,
    },
}

/// A failure with the exit code it maps to.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure { code: 1, error: error.into() }
    }
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure { code: 2, error: error.into() }
}

fn main() -> ExitCode {
    install_crypto_provider();
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Run { .. }) { "info" } else { "warn" };
    init_logging(cli.log_format, default_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(execute(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(Failure { code, error }) => {
            // Errors may carry a registry's words; the lines are ours, other controls are escaped.
            eprintln!("error: {}", text::escape_keep_newlines(&error_text(&error)));
            ExitCode::from(code)
        }
    }
}

/// The error and its causes, `: `-separated, each said once: many of our messages (and other
/// crates') already end with their cause's text, which `{:#}` would then print a second time.
fn error_text(error: &anyhow::Error) -> String {
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

fn init_logging(format: LogFormat, default_level: &str) {
    use tracing_subscriber::field::MakeExt;
    let filter = EnvFilter::try_from_env("BUILDER_MONITOR_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colour codes are noise in a file, a pipe or a log collector (and our own would be
    // indistinguishable from injected ones); NO_COLOR (no-color.org) wins.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        // Field values can carry registry strings: a newline or escape sequence in a buildpack id
        // must not forge a log line or repaint the terminal (JSON lines escape them already).
        LogFormat::Text => builder
            .fmt_fields(
                tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
                    let rendered = format!("{value:?}");
                    match field.name() {
                        "message" => write!(writer, "{}", text::escape(&rendered)),
                        name => write!(writer, "{name}={}", text::escape(&rendered)),
                    }
                })
                .delimited(" "),
            )
            .init(),
        LogFormat::Json => {
            builder_monitor::event_log::log_documents(true);
            builder.json().flatten_event(true).with_current_span(false).init()
        }
    }
}

/// Loads a config, reading only the `secrets` the command uses.
fn load_config(path: &Path, secrets: Secrets) -> Result<Config, Failure> {
    let config = Config::load_with(path, secrets).map_err(usage);
    release_freed_memory();
    config
}

/// Gives the heap that parsing the config used back to the kernel. toml holds the whole document
/// with spans while we read it (~20 bytes per byte of config: 24 MiB for 10,000 builders), and
/// glibc keeps freed fragments between the allocations that stay, for the life of the daemon.
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

/// How a command uses the ledger.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// The daemon: creates and migrates it (holding the [`WriterLock`]).
    Write,
    /// Everything else: an existing ledger, read-only, never created, migrated or locked.
    Read,
}

async fn open_ledger(config: &Config, access: Access) -> Result<Ledger, Failure> {
    match &config.monitor.state {
        StateLocation::Sqlite(path) if access == Access::Write => Ok(Ledger::open(path)?),
        StateLocation::Sqlite(path) => Ok(Ledger::open_read_only(path)?),
        StateLocation::Kubernetes => {
            let client = cluster::client(&config.kubernetes).await?;
            Ok(Ledger::kubernetes(client, &config.kubernetes.namespace))
        }
    }
}

async fn execute(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Check { config } => {
            let config = load_config(&config, Secrets::Resolve)?;
            print!("{}", config.summary());
            // Still a valid config (for resolve, diff, alert test), but not one to run.
            if let Err(Failure { error, .. }) = watches_something(&config) {
                eprintln!("warning: {error}");
            }
            Ok(0)
        }
        Command::Run { config, once } => run_daemon(&config, once).await,
        Command::Resolve { image, json, insecure, config } => {
            let image = parse_image(&image)?;
            let registry = registry_for(config.as_deref(), insecure, &[&image])?;
            let resolution = inspect::resolve(&registry, &image).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&resolution).context("encoding JSON")?);
            } else {
                print!("{}", resolution.render_text());
            }
            Ok(0)
        }
        Command::Diff { old, new, json, insecure, config } => {
            let (old, new) = (parse_image(&old)?, parse_image(&new)?);
            let registry = registry_for(config.as_deref(), insecure, &[&old, &new])?;
            let change = inspect::diff(&registry, &old, &new).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&change).context("encoding JSON")?);
            } else {
                println!("{}", change.summary());
                if change.platforms.len() > 1 {
                    for (platform, p) in &change.platforms {
                        let reasons = serde_json::to_string(&p.reasons).context("encoding JSON")?;
                        println!("  {}: {} {reasons}", text::escape(platform), p.kind.as_str());
                    }
                }
            }
            Ok(0)
        }
        Command::Alert { command: AlertCommand::Test { config, name } } => {
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
                    println!("{target}: delivered test event {}, HTTP {status} in {elapsed} ms", sent.event_id);
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
        Command::BuildSpec { config, image, action, output } => {
            let config = Arc::new(load_config(&config, Secrets::Skip)?);
            if !config.images.iter().any(|i| i.name == image) {
                let known: Vec<&str> = config.images.iter().map(|i| i.name.as_str()).collect();
                return Err(usage(anyhow::anyhow!("no image named \"{image}\" (configured: {})", known.join(", "))));
            }
            let ledger = open_ledger(&config, Access::Read).await?;
            let metrics = Metrics::new();
            let registry = Registry::new(config.registries.values().cloned(), metrics);
            let reaction = Reaction { config: &config, ledger: &ledger, registry: &registry };
            let kind = match action {
                SpecAction::Rebuild => ActionKind::Rebuild,
                SpecAction::Rebase => ActionKind::Rebase,
            };
            let failed = |e: String| Failure { code: 1, error: anyhow::anyhow!(e) };
            let (key, change_id, target) = reaction.preview(&image, kind).await.map_err(failed)?;
            let reference = ActionRef { key: &key, change_id: &change_id, image: &image, kind };
            let object = runner::preview(&config, &reference, &target)?;
            match output {
                SpecOutput::Json => println!("{}", serde_json::to_string_pretty(&object).context("encoding JSON")?),
                SpecOutput::Yaml => print!("{}", cluster::to_yaml(&object)),
            }
            Ok(0)
        }
        Command::Crd => {
            print!("{}", cluster::crd::crd_yaml());
            Ok(0)
        }
        Command::Rbac { config, service_account, output } => {
            let config = load_config(&config, Secrets::Skip)?;
            if let Err(problem) = cluster::check_object_name(&service_account) {
                return Err(usage(anyhow::anyhow!("--service-account \"{service_account}\": {problem}")));
            }
            let permissions = cluster::required_permissions(&config);
            let objects = cluster::rbac_objects(&permissions, &service_account, &config.kubernetes.namespace);
            match output {
                SpecOutput::Json => println!("{}", serde_json::to_string_pretty(&objects).context("encoding JSON")?),
                SpecOutput::Yaml if objects.is_empty() => println!("# this config uses no Kubernetes permissions"),
                SpecOutput::Yaml => {
                    for object in &objects {
                        print!("---\n{}", cluster::to_yaml(object));
                    }
                }
            }
            Ok(0)
        }
        Command::Plan { config, json } => {
            let config = Arc::new(load_config(&config, Secrets::Skip)?);
            let ledger = open_ledger(&config, Access::Read).await?;
            let metrics = Metrics::new();
            let registry = Registry::new(config.registries.values().cloned(), metrics);
            let assessments = Reaction { config: &config, ledger: &ledger, registry: &registry }.assess().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&assessments).context("encoding JSON")?);
            } else if assessments.is_empty() {
                println!("no [[images]] configured");
            } else {
                for a in &assessments {
                    let action = a.action.map_or("nothing", |k| k.as_str());
                    println!("{} (builder {}, policy {}): {action} — {}", a.image, a.builder, a.policy.as_str(), a.why);
                }
            }
            Ok(0)
        }
        Command::Status { config, json, changes } => {
            let config = load_config(&config, Secrets::Skip)?;
            let ledger = open_ledger(&config, Access::Read).await?;
            let report = status::collect(&config, &ledger, changes).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).context("encoding JSON")?);
            } else {
                print!("{}", status::render_text(&report));
            }
            Ok(0)
        }
    }
}

fn parse_image(text: &str) -> Result<ImageRef, Failure> {
    ImageRef::parse(text).map_err(|e| usage(anyhow::anyhow!("invalid image reference \"{text}\": {e}")))
}

/// A registry client with the config's registry settings, or the defaults; with `insecure`, plain
/// HTTP for the registries of `images`.
fn registry_for(config: Option<&Path>, insecure: bool, images: &[&ImageRef]) -> Result<Registry, Failure> {
    let mut registries = match config {
        Some(path) => load_config(path, Secrets::Registries)?.registries,
        None => Default::default(),
    };
    for image in images.iter().filter(|_| insecure) {
        let host = image.registry();
        registries.entry(host.to_string()).or_insert_with(|| RegistrySettings::defaults_for(host)).insecure = true;
    }
    Ok(Registry::new(registries.into_values(), Metrics::new()))
}

/// Cancels `shutdown` on SIGINT or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                let _ = tokio::signal::ctrl_c().await;
                shutdown.cancel();
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    shutdown.cancel();
}

/// Everything a replica needs to act, built once at start.
struct Parts {
    config: Arc<Config>,
    ledger: Ledger,
    monitor: Arc<Monitor>,
    dispatcher: Arc<Dispatcher>,
    client: Option<kube::Client>,
    metrics: Arc<Metrics>,
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

async fn run_daemon(path: &Path, once: bool) -> Result<u8, Failure> {
    let config = Arc::new(load_config(path, Secrets::Resolve)?);
    watches_something(&config)?;
    // Held until this function returns: one writer per SQLite ledger (Kubernetes has the lease).
    let _writer = match &config.monitor.state {
        StateLocation::Sqlite(path) => Some(WriterLock::acquire(path)?),
        StateLocation::Kubernetes => None,
    };
    let ledger = open_ledger(&config, Access::Write).await?;
    let metrics = Metrics::new();
    let registry = Arc::new(Registry::new(config.registries.values().cloned(), metrics.clone()));
    let monitor = Arc::new(Monitor::new(config.clone(), registry, ledger.clone(), Clock::System, metrics.clone()));
    let dispatcher = Arc::new(Dispatcher::new(
        &config.alerts,
        ledger.clone(),
        Clock::System,
        monitor.delivery_wake(),
        metrics.clone(),
    )?);
    let permissions = cluster::required_permissions(&config);
    let client = if permissions.is_empty() {
        None
    } else {
        let client = cluster::client(&config.kubernetes).await?;
        cluster::check_access(&client, &permissions).await?;
        Some(client)
    };
    let election = config.kubernetes.leader_election && !once;
    tracing::info!(builders = config.builders.len(), alerts = config.alerts.len(), runner = config.runner.kind.as_str(), state = %ledger.location(), publish = config.kubernetes.publish, leader_election = election, once, "builder-monitor starting");
    let parts = Arc::new(Parts {
        config: config.clone(),
        ledger: ledger.clone(),
        monitor: monitor.clone(),
        dispatcher,
        client,
        metrics: metrics.clone(),
    });
    if once {
        return run_once(&parts).await;
    }

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let (leading_tx, mut leading) = tokio::sync::watch::channel(!election);
    let resign = CancellationToken::new();
    let mut no_election = None;
    let elector = match (&parts.client, election) {
        (Some(client), true) => {
            let elector = LeaseElector::new(client.clone(), &config.kubernetes);
            tracing::info!(lease = %config.kubernetes.lease_name, namespace = %config.kubernetes.namespace, identity = elector.identity(), "campaigning for the lease; standing by until it is ours");
            Some(tokio::spawn(elector.run(leading_tx, resign.clone())))
        }
        _ => {
            // Without election this replica always leads.
            no_election = Some(leading_tx);
            None
        }
    };
    let server = match &config.server {
        Some(settings) => {
            let listener = tokio::net::TcpListener::bind(settings.listen)
                .await
                .with_context(|| format!("cannot listen on {} ([server] listen)", settings.listen))?;
            tracing::info!(listen = %settings.listen, "serving health, metrics, API and hooks");
            if settings.api_token.is_some() && settings.public_read {
                tracing::warn!(
                    listen = %settings.listen,
                    "the read API (/api/v1/...) is public: an API token is configured, but only for checks and hooks; set [server] public_read = false to require it for reads too"
                );
            }
            let state = ServerState::new(config.clone(), settings.clone(), monitor.handle(), ledger)
                .with_leadership(leading.clone());
            Some(tokio::spawn(server::serve(Arc::new(state), listener, shutdown.clone())))
        }
        None => None,
    };

    let mut failure = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = leading.wait_for(|l| *l) => if changed.is_err() { break },
        }
        metrics.leader.set(1);
        let term = shutdown.child_token();
        let mut acting = tokio::spawn(act(parts.clone(), term.clone()));
        let lost = tokio::select! {
            _ = shutdown.cancelled() => false,
            _ = leading.wait_for(|l| !*l) => true,
            result = &mut acting => {
                metrics.leader.set(0);
                match result {
                    Ok(Err(err)) => failure = Some(err),
                    Err(err) => failure = Some(Failure::from(anyhow::anyhow!("the acting task failed: {err}"))),
                    Ok(Ok(())) => {}
                }
                break;
            }
        };
        term.cancel();
        metrics.leader.set(0);
        if lost {
            // The lease may pass to another replica once it expires: whatever still runs by then is cut off.
            let cap = config.kubernetes.lease_duration.saturating_sub(config.kubernetes.renew_deadline);
            if tokio::time::timeout(cap, &mut acting).await.is_err() {
                acting.abort();
                tracing::warn!("work still running when the lease could pass on was aborted");
            }
            tracing::info!("stopped acting; standing by");
        } else if let Ok(Err(err)) = acting.await {
            failure = Some(err);
            break;
        }
        if shutdown.is_cancelled() {
            break;
        }
    }
    // Released only now, so the next leader never overlaps with this one's last checks.
    resign.cancel();
    if let Some(elector) = elector {
        let _ = elector.await;
    }
    shutdown.cancel();
    if let Some(server) = server
        && let Ok(Err(err)) = server.await
    {
        tracing::error!(error = %err, "HTTP server failed");
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    drop(no_election);
    tracing::info!("builder-monitor stopped");
    Ok(0)
}

/// `run --once`: every check once, the actions and deliveries that are due, the ClusterBuilders.
async fn run_once(parts: &Parts) -> Result<u8, Failure> {
    let stop = CancellationToken::new();
    let runner = runner_for(parts, stop.clone()).await?;
    let checks_ok = parts.monitor.run_once().await;
    runner.run_due_once().await;
    let actions_ok = runner.failures() == 0;
    parts.dispatcher.deliver_due_once().await;
    if let Some(publisher) = publisher_for(parts) {
        publisher.publish_specs().await?;
        for builder in &parts.config.builders {
            publisher.publish_status(&builder.name).await?;
        }
    }
    stop.cancel();
    Ok(if checks_ok && actions_ok { 0 } else { 1 })
}

fn publisher_for(parts: &Parts) -> Option<Publisher> {
    let client = parts.client.clone().filter(|_| parts.config.kubernetes.publish)?;
    Some(Publisher::new(client, parts.config.clone(), parts.ledger.clone(), parts.metrics.clone()))
}

async fn runner_for(parts: &Parts, stop: CancellationToken) -> Result<Arc<Runner>, Failure> {
    let backend = Backend::for_config(&parts.config, parts.client.clone(), stop)
        .map_err(|e| Failure { code: 1, error: anyhow::anyhow!(e) })?;
    let runner = Arc::new(Runner::new(
        parts.config.clone(),
        parts.ledger.clone(),
        Clock::System,
        backend,
        parts.monitor.action_wake(),
        parts.monitor.delivery_wake(),
    ));
    runner.recover().await?;
    Ok(runner)
}

/// How often `builder_monitor_actions` is brought up to date from the ledger.
const ACTION_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

/// Keeps `builder_monitor_actions{state}` current while this replica acts; a standby serves no
/// such series, so a dashboard summing replicas never counts an action twice.
async fn sample_open_actions(ledger: Ledger, metrics: Arc<Metrics>, stop: CancellationToken) {
    let mut every = tokio::time::interval(ACTION_SAMPLE_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = every.tick() => match ledger.open_actions().await {
                Ok(open) => metrics.set_open_actions(open.iter().map(|a| a.state.as_str())),
                Err(err) => tracing::debug!(error = %err, "cannot count open actions for the metrics"),
            },
        }
    }
    metrics.actions.clear();
}

/// One term of acting: checks, alert deliveries, builds and ClusterBuilder publication, until `stop`.
async fn act(parts: Arc<Parts>, stop: CancellationToken) -> Result<(), Failure> {
    let runner = runner_for(&parts, stop.clone()).await?;
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(publisher) = publisher_for(&parts) {
        let (commits, names) = tokio::sync::mpsc::unbounded_channel();
        parts.monitor.report_commits(Some(commits));
        tasks.spawn(publisher.run(names, stop.clone()));
    }
    tasks.spawn(parts.dispatcher.clone().run(stop.clone()));
    tasks.spawn(runner.run(stop.clone()));
    tasks.spawn(sample_open_actions(parts.ledger.clone(), parts.metrics.clone(), stop.clone()));
    parts.monitor.clone().run(stop).await;
    parts.monitor.report_commits(None);
    while tasks.join_next().await.is_some() {}
    Ok(())
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
}
