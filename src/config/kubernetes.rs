//! `[kubernetes]` (how to reach the cluster) and `[runner.kubernetes]` (where build pods go and
//! what they may use). Kubernetes-typed values keep the Pod spec's own shapes and are checked by
//! deserializing into the k8s-openapi types.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;

use super::DurationText;

use super::images::{Scheduling, Toleration};
use super::{Validator, is_dns_label};

#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesSettings {
    /// A kubeconfig file; default: in-cluster, then `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Where the daemon's own objects live: the Lease, and the ledger with `state = "kubernetes"`.
    pub namespace: String,
    /// Server-side apply a ClusterBuilder per builder and keep its status current.
    pub publish: bool,
    /// Delete the ClusterBuilders of builders no longer configured.
    pub prune: bool,
    /// One active replica at a time, through a coordination.k8s.io Lease.
    pub leader_election: bool,
    pub lease_name: String,
    /// This replica's name in the Lease.
    pub identity: String,
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops acting.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        KubernetesSettings {
            kubeconfig: None,
            context: None,
            namespace: env("POD_NAMESPACE").unwrap_or_else(|| "default".to_string()),
            publish: false,
            prune: false,
            leader_election: false,
            lease_name: "builder-monitor".to_string(),
            // Pod names are unique; elsewhere two processes on one host must not share an identity.
            identity: env("POD_NAME").unwrap_or_else(|| {
                format!("{}-{}", env("HOSTNAME").unwrap_or_else(|| "builder-monitor".into()), std::process::id())
            }),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubeRunnerSettings {
    pub namespace: String,
    pub service_account: Option<String>,
    /// Placement shared by every build pod; an image's own `scheduling` is merged over it.
    pub scheduling: Scheduling,
    pub image_pull_secrets: Vec<String>,
    /// A Pod spec `resources` object for the build container.
    pub resources: Option<serde_json::Value>,
    pub active_deadline: Option<Duration>,
    pub ttl_after_finished: Option<Duration>,
    /// Pod retries inside one Job (default: `runner.max_attempts - 1`).
    pub backoff_limit: Option<i32>,
    /// A `kubernetes.io/dockerconfigjson` Secret with registry credentials, for `DOCKER_CONFIG`.
    pub docker_config_secret: Option<String>,
    /// The image of the init container that fetches sources.
    pub git_image: String,
    /// A PersistentVolumeClaim for the build cache (default: an emptyDir).
    pub cache_pvc: Option<String>,
}

impl Default for KubeRunnerSettings {
    fn default() -> Self {
        KubeRunnerSettings {
            namespace: "default".to_string(),
            service_account: None,
            scheduling: Scheduling::default(),
            image_pull_secrets: Vec::new(),
            resources: None,
            active_deadline: None,
            ttl_after_finished: None,
            backoff_limit: None,
            docker_config_secret: None,
            git_image: DEFAULT_GIT_IMAGE.to_string(),
            cache_pvc: None,
        }
    }
}

pub const DEFAULT_GIT_IMAGE: &str = "docker.io/alpine/git:2.47.2";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKubernetes {
    kubeconfig: Option<Spanned<String>>,
    context: Option<String>,
    namespace: Option<Spanned<String>>,
    publish: Option<bool>,
    prune: Option<bool>,
    leader_election: Option<bool>,
    lease_name: Option<Spanned<String>>,
    identity: Option<String>,
    lease_duration: Option<Spanned<DurationText>>,
    renew_deadline: Option<Spanned<DurationText>>,
    retry_period: Option<Spanned<DurationText>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKubeRunner {
    // A pool's own keys (`super::pools`); the rest is what every pool has.
    pub(super) name: Option<Spanned<String>>,
    #[serde(rename = "type")]
    pub(super) kind: Option<Spanned<String>>,
    pub(super) kubeconfig: Option<Spanned<String>>,
    pub(super) context: Option<String>,
    pub(super) platforms: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) max_in_flight: Option<Spanned<i64>>,
    pub(super) queue: Option<Spanned<String>>,
    pub(super) priority_class: Option<Spanned<String>>,
    pub(super) managed_by: Option<Spanned<String>>,
    pub(super) pod_template: Option<Spanned<String>>,
    pub(super) allow_privileged: Option<bool>,
    namespace: Option<Spanned<String>>,
    service_account: Option<Spanned<String>>,
    node_selector: Option<Spanned<BTreeMap<String, String>>>,
    tolerations: Option<Spanned<Vec<Toleration>>>,
    affinity: Option<Spanned<serde_json::Value>>,
    priority_class_name: Option<String>,
    runtime_class_name: Option<String>,
    scheduler_name: Option<String>,
    #[serde(default)]
    image_pull_secrets: Vec<String>,
    pub(super) resources: Option<Spanned<serde_json::Value>>,
    active_deadline: Option<Spanned<DurationText>>,
    ttl_after_finished: Option<Spanned<DurationText>>,
    backoff_limit: Option<Spanned<i64>>,
    docker_config_secret: Option<String>,
    git_image: Option<String>,
    cache_pvc: Option<String>,
}

impl RawKubeRunner {
    /// The Secrets with the builds' registry credentials (`docker_config_secret`,
    /// `image_pull_secrets`), as written: a pod template may not reach them, whether or not the
    /// rest of the pool is valid.
    pub(super) fn credential_secrets(&self) -> Vec<String> {
        self.docker_config_secret.iter().chain(&self.image_pull_secrets).cloned().collect()
    }
}

/// Why a value is not of a Kubernetes type.
#[derive(Debug, thiserror::Error)]
pub enum KubeValueError {
    /// The value does not deserialize as the type (a wrong shape or a missing field).
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
    /// A field the type does not know, by its path (`a.b[0].c`).
    #[error("unknown field `{0}`")]
    UnknownField(String),
}

/// Deserializes `value` as `T` and back: any field `T` does not know is dropped on the way, and
/// named here as the error (k8s-openapi's types ignore unknown fields on their own).
pub fn k8s_typed<T: DeserializeOwned + serde::Serialize>(value: &serde_json::Value) -> Result<T, KubeValueError> {
    let typed: T = serde_json::from_value(value.clone())?;
    let back = serde_json::to_value(&typed)?;
    match first_dropped(value, &back, "") {
        Some(path) => Err(KubeValueError::UnknownField(path)),
        None => Ok(typed),
    }
}

fn first_dropped(input: &serde_json::Value, output: &serde_json::Value, path: &str) -> Option<String> {
    use serde_json::Value;
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => i.iter().find_map(|(k, v)| {
            let here = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            match o.get(k) {
                None if !v.is_null() => Some(here),
                None => None,
                Some(ov) => first_dropped(v, ov, &here),
            }
        }),
        (Value::Array(i), Value::Array(o)) => {
            i.iter().zip(o).enumerate().find_map(|(n, (a, b))| first_dropped(a, b, &format!("{path}[{n}]")))
        }
        _ => None,
    }
}

impl<'a> Validator<'a> {
    pub(super) fn kubernetes(&mut self, raw: RawKubernetes) -> Option<KubernetesSettings> {
        let errors_before = self.diagnostics.len();
        let mut s = KubernetesSettings {
            kubeconfig: raw.kubeconfig.map(|k| self.path(k.get_ref())),
            context: raw.context,
            ..Default::default()
        };
        for (value, target, what) in
            [(&raw.namespace, &mut s.namespace, "namespace"), (&raw.lease_name, &mut s.lease_name, "lease_name")]
        {
            if let Some(v) = value {
                if is_dns_label(v.get_ref()) {
                    *target = v.get_ref().clone();
                } else {
                    self.error(v.span(), format!("{what} \"{}\" is not a valid Kubernetes name", v.get_ref()));
                }
            }
        }
        s.publish = raw.publish.unwrap_or(false);
        s.prune = raw.prune.unwrap_or(false);
        s.leader_election = raw.leader_election.unwrap_or(false);
        if let Some(identity) = raw.identity {
            s.identity = identity;
        }
        for (value, target, what) in [
            (&raw.lease_duration, &mut s.lease_duration, "lease_duration"),
            (&raw.renew_deadline, &mut s.renew_deadline, "renew_deadline"),
            (&raw.retry_period, &mut s.retry_period, "retry_period"),
        ] {
            if let Some(v) = value
                && let Some(d) = self.positive_duration(v, what)
            {
                *target = d;
            }
        }
        if !(s.retry_period < s.renew_deadline && s.renew_deadline < s.lease_duration) {
            let span = raw.lease_duration.as_ref().or(raw.renew_deadline.as_ref()).map(|v| v.span()).unwrap_or(0..0);
            self.error(span, "leader election needs retry_period < renew_deadline < lease_duration");
        }
        (self.diagnostics.len() == errors_before).then_some(s)
    }

    /// Checks a Pod spec `affinity` value.
    pub(super) fn affinity(&mut self, value: &Spanned<serde_json::Value>) -> bool {
        match k8s_typed::<k8s_openapi::api::core::v1::Affinity>(value.get_ref()) {
            Ok(_) => true,
            Err(message) => {
                self.error(value.span(), format!("affinity is not a Pod spec affinity: {message}"));
                false
            }
        }
    }

    pub(super) fn kube_runner(&mut self, raw: &RawKubeRunner, kpack: bool) -> Option<KubeRunnerSettings> {
        let errors_before = self.diagnostics.len();
        let namespace = match &raw.namespace {
            Some(ns) if !is_dns_label(ns.get_ref()) => {
                self.error(ns.span(), format!("namespace \"{}\" is not a valid namespace name", ns.get_ref()));
                String::new()
            }
            Some(ns) => ns.get_ref().clone(),
            None => "default".to_string(),
        };
        if let Some(affinity) = &raw.affinity {
            self.affinity(affinity);
        }
        if let Some(resources) = &raw.resources
            && let Err(message) = k8s_typed::<k8s_openapi::api::core::v1::ResourceRequirements>(resources.get_ref())
        {
            self.error(resources.span(), format!("resources is not a Pod spec resources object: {message}"));
        }
        if kpack
            && let Some(selector) = &raw.node_selector
            && selector.get_ref().contains_key("kubernetes.io/os")
        {
            self.error(selector.span(), "kpack rejects a nodeSelector with kubernetes.io/os (it sets the os itself)");
        }
        let duration = |v: &mut Self, d: &Option<Spanned<DurationText>>, what: &str| {
            d.as_ref().and_then(|d| v.positive_duration(d, what))
        };
        let active_deadline = duration(self, &raw.active_deadline, "active_deadline");
        let ttl_after_finished = duration(self, &raw.ttl_after_finished, "ttl_after_finished");
        let backoff_limit = match &raw.backoff_limit {
            Some(b) => match i32::try_from(*b.get_ref()) {
                Ok(n) if n >= 0 => Some(n),
                _ => {
                    self.error(b.span(), "backoff_limit must be a whole number >= 0");
                    None
                }
            },
            None => None,
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(KubeRunnerSettings {
            namespace,
            service_account: raw.service_account.as_ref().map(|s| s.get_ref().clone()),
            scheduling: Scheduling {
                node_selector: raw.node_selector.as_ref().map(|s| s.get_ref().clone()).unwrap_or_default(),
                tolerations: raw.tolerations.as_ref().map(|s| s.get_ref().clone()),
                affinity: raw.affinity.as_ref().map(|s| s.get_ref().clone()),
                priority_class_name: raw.priority_class_name.clone(),
                runtime_class_name: raw.runtime_class_name.clone(),
                scheduler_name: raw.scheduler_name.clone(),
            },
            image_pull_secrets: raw.image_pull_secrets.clone(),
            resources: raw.resources.as_ref().map(|s| s.get_ref().clone()),
            active_deadline,
            ttl_after_finished,
            backoff_limit,
            docker_config_secret: raw.docker_config_secret.clone(),
            git_image: raw.git_image.clone().unwrap_or_else(|| DEFAULT_GIT_IMAGE.to_string()),
            cache_pvc: raw.cache_pvc.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn k8s_typed_values_name_unknown_fields() {
        use k8s_openapi::api::core::v1::Affinity;
        let ok = json!({ "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
            { "matchExpressions": [{ "key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-1a"] }] }] } } });
        assert!(k8s_typed::<Affinity>(&ok).is_ok());
        let typo = json!({ "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
            { "matchExpresions": [] }] } } });
        assert_eq!(
            k8s_typed::<Affinity>(&typo).unwrap_err().to_string(),
            "unknown field `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpresions`"
        );
        assert!(k8s_typed::<Affinity>(&json!({ "nodeAffinity": 5 })).is_err());
    }
}
