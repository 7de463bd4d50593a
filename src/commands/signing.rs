//! `signing public-key`: the public key of `[signing]`'s key, for admission policies and
//! `cosign verify --key`.

use std::path::PathBuf;

use super::common::signing_key;
use super::failure::{Failure, usage};

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
        /// The config file (TOML; see docs/configuration.md).
        #[arg(long, env = "BUILDER_MONITOR_CONFIG")]
        config: PathBuf,
    },
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { command: SigningCommand::PublicKey { config: path } } = args;
    let Some(signer) = signing_key(&path)?.and_then(|key| key.signer().cloned()) else {
        return Err(usage(anyhow::anyhow!(
            "{}: no key to sign with: add a [signing] table with key = \"PATH\" (or key_env = \"VAR\")",
            path.display()
        )));
    };
    out!("{}", signer.public_key_pem());
    Ok(0)
}
