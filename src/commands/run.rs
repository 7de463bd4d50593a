//! `run`: the daemon, until SIGINT/SIGTERM; SIGHUP reloads the config.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::common::watches_something;
use super::failure::{Failure, error_text, usage};
use builder_monitor::config::Config;
use builder_monitor::daemon;
use builder_monitor::signing::SigningService;

/// A config as `run` loads it: every secret resolved, the signing key decrypted into the signing
/// service handed to the daemon beside the config (never kept in it).
type Loaded = (Arc<Config>, Option<Arc<SigningService>>);

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
    let loaded = load(&path)?;
    let shutdown = CancellationToken::new();
    if once {
        let (config, signing) = loaded;
        return Ok(daemon::run(config, signing, once, shutdown).await?);
    }
    tokio::spawn(daemon::stop_on_signal(shutdown.clone()));
    run_reloading(&path, loaded, shutdown).await
}

/// Loads and checks the config at `path` as `run` needs it.
fn load(path: &Path) -> Result<Loaded, Failure> {
    let (config, resolved) = Config::load_resolved(path).map_err(usage)?;
    builder_monitor::memory::trim_heap();
    watches_something(&config)?;
    let signing = SigningService::of(&config, resolved.signer);
    Ok((Arc::new(config), signing))
}

/// Runs the daemon until it stops; on SIGHUP reads the config again and, when it is valid, stops
/// the daemon's parts and starts them with it (a restart within the process: running commands
/// get their grace period and run again, as after a restart). An invalid config is refused with
/// its errors, and the running daemon goes on with the config it has.
async fn run_reloading(path: &Path, mut loaded: Loaded, shutdown: CancellationToken) -> Result<u8, Failure> {
    let mut hangups = daemon::hangups();
    loop {
        let term = shutdown.child_token();
        let running = daemon::run(loaded.0.clone(), loaded.1.clone(), false, term.clone());
        tokio::pin!(running);
        let next = loop {
            tokio::select! {
                code = &mut running => return Ok(code?),
                Some(()) = hangups.recv() => {
                    match load(path) {
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
        loaded = next;
    }
}
