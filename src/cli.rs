//! The command line's frame: the program's name, version and global flags, and the argument
//! types several commands share (`main` parses them). Each command's own arguments live with it
//! in `commands/`; `Cli` is generic over them so that this layer names no command.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "builder-monitor",
    version,
    about = "Watch floating CNB builder tags and pin them to immutable digests"
)]
pub struct Cli<C: Subcommand> {
    /// Log line format (level from BUILDER_MONITOR_LOG, EnvFilter syntax).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: C,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How `build-spec` and `rbac` print the objects (`--output`).
#[derive(Clone, Copy, ValueEnum)]
pub enum SpecOutput {
    Yaml,
    Json,
}

/// A person's verdict on a change's actions: `approve` and `reject` (whose own doc comments, set
/// after this one's, are their help).
#[derive(clap::Args)]
pub struct Verdict {
    /// The change's id (see `status`).
    pub change: String,
    /// Only this `[[images]]` name's action.
    #[arg(long)]
    pub image: Option<String>,
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    pub config: PathBuf,
    /// Print JSON instead of text (fields are added, never renamed).
    #[arg(long)]
    pub json: bool,
}
