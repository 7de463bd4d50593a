//! `run`: the daemon, until SIGINT/SIGTERM; SIGHUP reloads the config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::common::{load_config, watches_something};
use super::failure::{Failure, error_text};
use builder_monitor::config::{Config, Secrets};
use builder_monitor::daemon;

/// Run the daemon: check every builder on its schedule until SIGINT/SIGTERM.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
    #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
    config: PathBuf,
    /// Check every builder once, record what moved, and exit (1 if a check failed).
    #[arg(long)]
    once: bool,
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config: path, once } = args;
    let config = Arc::new(load_config(&path, Secrets::Resolve)?);
    watches_something(&config)?;
    let shutdown = CancellationToken::new();
    if once {
        return Ok(daemon::run(config, once, shutdown).await?);
    }
    tokio::spawn(daemon::stop_on_signal(shutdown.clone()));
    run_reloading(&path, config, shutdown).await
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
