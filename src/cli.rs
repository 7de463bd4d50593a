//! The command line: the commands, their arguments and the log format (`main` parses them).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "builder-monitor",
    version,
    about = "Watch floating CNB builder tags and pin them to immutable digests"
)]
pub struct Cli {
    /// Log line format (level from BUILDER_MONITOR_LOG, EnvFilter syntax).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
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
        /// What the deployment expects of the config (repeatable), e.g. `listen-port=9464`,
        /// `publish=true`, `state=kubernetes`: any disagreement fails the check, naming the key to
        /// change. Keys: listen-port, namespace, in-cluster, publish, prune, leader-election, state
        /// (`kubernetes` or the SQLite ledger's directory), runner, runner-namespace,
        /// deploy-namespaces (comma-separated), pools (the kubeconfigs mounted at
        /// /etc/builder-monitor/pools/NAME/kubeconfig, comma-separated). The Helm chart's init
        /// container passes its values.
        #[arg(long, value_name = "KEY=VALUE")]
        expect: Vec<builder_monitor::cluster::expect::Expectation>,
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
        /// The `[[runner.pools]]` entry to show it in (default: the pool it would go to now, by
        /// its `pool` or the app image's platforms).
        #[arg(long)]
        pool: Option<String>,
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
        /// What the `[[runner.pools]]` entry NAME needs in its own cluster (the Roles there, bound
        /// to the ServiceAccount its kubeconfig's credentials belong to) instead.
        #[arg(long)]
        pool: Option<String>,
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
    /// Deploy an app image by hand to its workloads (`[[images]] deploy`) or through `[runner.exec]
    /// deploy`: the digest its tag holds now, or --to. Recorded as a deploy action, which the
    /// daemon carries out (through its API while it holds the ledger).
    Deploy {
        /// The `[[images]]` name.
        image: String,
        /// The digest to deploy (sha256:<64 hex digits>); without it, the one the tag holds now.
        #[arg(long)]
        to: Option<String>,
        /// Print what would be written where, and record nothing (the cluster is not read).
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
    },
    /// Approve a change's rebases and rebuilds that wait for a person (`[rollout] approve`,
    /// `[[images]] approve`): they start, in their waves and windows.
    Approve(Verdict),
    /// Reject a change's actions that wait for approval: they never run (state `rejected`).
    Reject(Verdict),
    /// Let a change's later waves go after a failure in a lower wave held them.
    Release {
        change: String,
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Stop every rebase and rebuild from starting (running ones finish); checks, pins and alerts
    /// go on. Kept in the ledger until `unfreeze`.
    Freeze {
        #[arg(long)]
        reason: Option<String>,
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Lift the freeze: waiting actions start (the newest target of each image).
    Unfreeze {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        #[arg(long)]
        json: bool,
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
pub enum SpecAction {
    Rebuild,
    Rebase,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SpecOutput {
    Yaml,
    Json,
}

#[derive(Subcommand)]
pub enum AlertCommand {
    /// Send a clearly marked test event (type `alert.test`) to one alert and report the outcome.
    Test {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// The `[[alerts]]` name (without it, the configured alerts are listed).
        #[arg(long)]
        name: Option<String>,
    },
}

/// A person's verdict on a change's actions.
#[derive(clap::Args)]
pub struct Verdict {
    /// The change's id (see `status`).
    pub change: String,
    /// Only this `[[images]]` name's action.
    #[arg(long)]
    pub image: Option<String>,
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    pub config: PathBuf,
    #[arg(long)]
    pub json: bool,
}
