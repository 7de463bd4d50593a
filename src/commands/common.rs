//! What several commands share: reading the config, image references and registry clients from
//! arguments, and the pools.

use std::path::Path;

use builder_monitor::config::{Config, RegistrySettings, Secrets};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::reference::ImageRef;

use super::failure::{Failure, usage};

/// Loads a config, reading only the `secrets` the command uses.
pub fn load_config(path: &Path, secrets: Secrets) -> Result<Config, Failure> {
    let config = Config::load_with(path, secrets).map_err(usage);
    builder_monitor::memory::trim_heap();
    config
}

/// The configured pools' names, for an error.
pub fn pool_names(config: &Config) -> String {
    let names: Vec<&str> = config.runner.pools.iter().map(|p| p.name.as_str()).collect();
    if names.is_empty() { "no pools are configured".into() } else { format!("configured: {}", names.join(", ")) }
}

/// Whether an action of `kind` goes to the pools (the `kubernetes` and `kpack` runners).
pub fn uses_pools(config: &Config, kind: ActionKind) -> bool {
    config.runner.carrier(kind).pools
}

pub fn parse_image(text: &str) -> Result<ImageRef, Failure> {
    ImageRef::parse(text).map_err(|e| usage(anyhow::anyhow!("invalid image reference \"{text}\": {e}")))
}

/// A registry client with the config's registry settings, or the defaults; with `insecure`, plain
/// HTTP for the registries of `images`.
pub fn registry_for(config: Option<&Path>, insecure: bool, images: &[&ImageRef]) -> Result<Registry, Failure> {
    reader_for(config, insecure, images).map(|(registry, _)| registry)
}

/// The registry of [`registry_for`] and how many platforms of an index to read (`[monitor]
/// max_platforms`, or its default without a config).
pub fn reader_for(config: Option<&Path>, insecure: bool, images: &[&ImageRef]) -> Result<(Registry, usize), Failure> {
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

/// `run` refuses a config without builders: a daemon that watches nothing looks healthy while
/// doing nothing (an empty or truncated config file, say).
pub fn watches_something(config: &Config) -> Result<(), Failure> {
    if config.builders.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "{}: no [[builders]] configured, so there is nothing to watch (`run` refuses this config)",
            config.source.display()
        )));
    }
    Ok(())
}

/// `[signing]`'s key of the config at `path` (only the key is read: the daemon's other secrets
/// need not be set), with whether to attest and whose layers to keep; `None` when the config names
/// no key to sign with.
pub fn signing_key(path: &Path) -> Result<Option<SigningKey>, Failure> {
    let mut config = load_config(path, Secrets::Skip)?;
    load_signing_key(path, &mut config)?;
    Ok(config.signing.and_then(|s| {
        let keep = builder_monitor::signing::trusted(&s).into_iter().map(|k| k.verifier).collect();
        Some(SigningKey { signer: s.signer?, attest: s.attest, keep })
    }))
}

/// `[signing]`'s key as a command signs with it.
pub struct SigningKey {
    pub signer: builder_monitor_core::signing::Signer,
    /// `attest`.
    pub attest: bool,
    /// The keys whose layers a replaced `.sig` or `.att` keeps (`trusted_keys` and the key's own).
    pub keep: Vec<builder_monitor_core::signing::Verifier>,
}

/// Reads `[signing]`'s key into `config` (loaded from `path`), for a command that signs what it
/// writes without resolving the daemon's other secrets.
pub fn load_signing_key(path: &Path, config: &mut Config) -> Result<(), Failure> {
    if let Some(settings) = config.signing.as_mut() {
        settings.signer = settings.load_signer().map_err(|e| usage(anyhow::anyhow!("{}: {e}", path.display())))?;
    }
    Ok(())
}
