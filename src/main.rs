//! The `builder-monitor` command: argument parsing, logging set-up and exit codes
//! (0 ok, 1 runtime failure, 2 usage or invalid config).
// One audited exception: `commands::release_freed_memory`.
#![deny(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

use builder_monitor::install_crypto_provider;
use builder_monitor_core::text;
use commands::{Failure, error_text, execute};

mod commands;

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
    /// Rebase an app image onto a new run image in the registry itself (no pod, no layer bytes when
    /// both live on one registry): per platform, the run image's layers swapped under the app's.
    Rebase {
        /// The app image, by tag: the tag moves, last.
        image: String,
        /// The new run image (a tag or digest; an index or a single manifest).
        #[arg(long)]
        run_image: String,
        /// Registry settings (credentials, TLS) come from this config when given.
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: Option<PathBuf>,
        /// Decide and report, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Override what the lifecycle rebaser's -force overrides (rebasable, target, run image name).
        #[arg(long)]
        force: bool,
        #[arg(long)]
        json: bool,
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
    /// Move an app image's tag back to the digest before its last rebase or rebuild (or to another
    /// digest the ledger recorded for it), by a manifest PUT: nothing is rebuilt.
    Rollback {
        /// The `[[images]]` name, or its tag.
        image: String,
        /// A digest recorded for the image (see `status`).
        #[arg(long)]
        to: Option<String>,
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
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
