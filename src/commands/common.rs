//! What several commands share: reading the config, image references and registry clients from
//! arguments, and the pools.

use std::path::Path;

use builder_monitor::config::{Config, RegistrySettings, Secrets};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::signing::SigningService;
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
/// need not be set), as the signing service a command signs with; `None` when the config names no
/// key to sign with.
pub fn signing_key(path: &Path) -> Result<Option<SigningService>, Failure> {
    let config = load_config(path, Secrets::Skip)?;
    Ok(signing_service(path, &config)?.filter(|s| s.signer().is_some()))
}

/// `[signing]` of `config` (loaded from `path`) with its key read and decrypted now, for a command
/// that signs what it writes without resolving the daemon's other secrets; `None` without
/// `[signing]`.
pub fn signing_service(path: &Path, config: &Config) -> Result<Option<SigningService>, Failure> {
    let load = |s| SigningService::load(s).map_err(|e| usage(anyhow::anyhow!("{}: {e}", path.display())));
    config.signing.as_ref().map(load).transpose()
}
