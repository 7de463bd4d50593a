//! `rbac`: the ServiceAccount, Roles and bindings granting exactly the permissions a config uses.

use std::path::PathBuf;

use anyhow::Context;

use super::common::{load_config, pool_names};
use super::failure::{Failure, usage};
use crate::cli::SpecOutput;
use builder_monitor::cluster;
use builder_monitor::config::Secrets;

/// Print the RBAC objects granting exactly the Kubernetes permissions this config uses.
///
/// The ServiceAccount, Roles and RoleBindings (and the ClusterRole and its binding for
/// ClusterBuilders), ready for `kubectl apply -f -`. The namespace is the config's `[kubernetes]
/// namespace`.
#[derive(clap::Args)]
pub struct Args {
    /// The config file (TOML; see docs/configuration.md).
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
}

pub async fn run(args: Args) -> Result<u8, Failure> {
    let Args { config, service_account, pool, output } = args;
    let config = load_config(&config, Secrets::Skip)?;
    if let Err(problem) = cluster::check_object_name(&service_account) {
        return Err(usage(anyhow::anyhow!("--service-account \"{service_account}\": {problem}")));
    }
    let (permissions, namespace) = match &pool {
        None => (cluster::required_permissions(&config), config.kubernetes.namespace.clone()),
        Some(name) => {
            let Some(pool) = config.runner.pool(name) else {
                return Err(usage(anyhow::anyhow!("no pool named \"{name}\" ({})", pool_names(&config))));
            };
            (cluster::pool_permissions(pool), pool.settings.namespace.clone())
        }
    };
    let objects = cluster::rbac_objects(&permissions, &service_account, &namespace);
    match output {
        SpecOutput::Json => outln!("{}", serde_json::to_string_pretty(&objects).context("encoding JSON")?),
        SpecOutput::Yaml if objects.is_empty() => outln!("# this config uses no Kubernetes permissions"),
        SpecOutput::Yaml => {
            for object in &objects {
                out!("---\n{}", cluster::to_yaml(object));
            }
        }
    }
    Ok(0)
}
