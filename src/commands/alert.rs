//! `alert test`: one clearly marked test event to one alert receiver, and its outcome.

use std::path::PathBuf;

use super::common::load_config;
use super::failure::{Failure, usage};
use builder_monitor::alert::{self, SendOutcome};
use builder_monitor::config::Secrets;

/// Alert receivers.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AlertCommand,
}

#[derive(clap::Subcommand)]
enum AlertCommand {
    /// Send a clearly marked test event (type `alert.test`) to one alert and report the outcome.
    Test {
        /// The config file (TOML; see docs/configuration.md).
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
        /// The `[[alerts]]` name (without it, the configured alerts are listed).
        #[arg(long)]
        name: Option<String>,
    },
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { command: AlertCommand::Test { config, name } } = args;
    let Some(name) = name else {
        let config = load_config(&config, Secrets::Skip)?;
        let known: Vec<String> = config.alerts.iter().map(|a| format!("{} ({})", a.name, a.kind.as_str())).collect();
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
            error: anyhow::anyhow!("{target}: test event not delivered: {} (after {elapsed} ms)", other.describe()),
        }),
    }
}
