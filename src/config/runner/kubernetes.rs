//! `[runner.kubernetes]`: where build pods go and what they may use — the pool named `default`,
//! and the keys every `[[runner.pools]]` entry shares — and the `kubernetes` runner's answers
//! ([`FACTS`]). Kubernetes-typed values keep the Pod spec's own shapes and are checked by
//! deserializing into the k8s-openapi types.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::super::{DurationText, Validator, is_dns_label, k8s_typed};
use super::RunnerKind;
use super::facts::{AfterRestart, BackendKind, EVERY_KIND, Facts, RebasePath, Rule};
use builder_monitor_core::plan::{Scheduling, Toleration};

/// The `kubernetes` runner's answers: Jobs made and watched, their pods listed for the
/// termination message and deleted once the Job finished; a Job retries its own pods (`backoffLimit`), so its failure is final; it
/// lives in the cluster, so a restart follows it.
pub const FACTS: Facts = Facts {
    backend: BackendKind::Runner(RunnerKind::Kubernetes),
    name: "kubernetes",
    setting: "[runner] type = \"kubernetes\"",
    permissions: &[
        Rule { group: "batch", resource: "jobs", verbs: &["create", "get", "list", "watch"] },
        Rule { group: "", resource: "pods", verbs: &["list", "delete"] },
    ],
    kinds: EVERY_KIND,
    retries: false,
    after_restart: AfterRestart::Follow,
    needs_app_digest: false,
    path: RebasePath::Runner,
    on_cluster: true,
    pools: true,
};

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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawKubeRunner {
    // A pool's own keys (`super::pools`); the rest is what every pool has.
    pub(in crate::config) name: Option<Spanned<String>>,
    #[serde(rename = "type")]
    pub(in crate::config) kind: Option<Spanned<String>>,
    pub(in crate::config) kubeconfig: Option<Spanned<String>>,
    pub(in crate::config) context: Option<String>,
    pub(in crate::config) platforms: Option<Spanned<Vec<Spanned<String>>>>,
    pub(in crate::config) max_in_flight: Option<Spanned<i64>>,
    pub(in crate::config) queue: Option<Spanned<String>>,
    pub(in crate::config) priority_class: Option<Spanned<String>>,
    pub(in crate::config) managed_by: Option<Spanned<String>>,
    pub(in crate::config) pod_template: Option<Spanned<String>>,
    pub(in crate::config) allow_privileged: Option<bool>,
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
    pub(in crate::config) resources: Option<Spanned<serde_json::Value>>,
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
    pub(in crate::config) fn credential_secrets(&self) -> Vec<String> {
        self.docker_config_secret.iter().chain(&self.image_pull_secrets).cloned().collect()
    }
}

impl Validator<'_> {
    pub(in crate::config) fn kube_runner(&mut self, raw: &RawKubeRunner, kpack: bool) -> Option<KubeRunnerSettings> {
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
