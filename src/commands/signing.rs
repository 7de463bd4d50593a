//! `signing public-key`: the public key of `[signing]`'s key, for admission policies and
//! `cosign verify --key`.

use std::path::PathBuf;

use super::common::load_config;
use super::failure::{Failure, usage};
use builder_monitor::config::Secrets;

/// The signing key.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SigningCommand,
}

#[derive(clap::Subcommand)]
enum SigningCommand {
    /// Print the public key (PEM) of `[signing]`'s key: give it to admission policies (Kyverno,
    /// policy-controller) and to `cosign verify --key`.
    PublicKey {
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
    },
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { command: SigningCommand::PublicKey { config: path } } = args;
    // Only the signing key is read: the daemon's other secrets need not be set here.
    let config = load_config(&path, Secrets::Skip)?;
    let Some(settings) = &config.signing else {
        return Err(usage(anyhow::anyhow!(
            "{}: no [signing] table: add one with key = \"PATH\" (or key_env) to sign with",
            path.display()
        )));
    };
    let signer = settings.load_signer().map_err(|e| usage(anyhow::anyhow!("{}: {e}", path.display())))?;
    let Some(signer) = signer else {
        return Err(usage(anyhow::anyhow!(
            "{}: [signing] names no key: add key = \"PATH\" or key_env = \"VAR\"",
            path.display()
        )));
    };
    out!("{}", signer.public_key_pem());
    Ok(0)
}
