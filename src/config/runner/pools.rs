//! `[[runner.pools]]`: where builds run. Each pool is a namespace of one cluster (its own
//! kubeconfig and context, or `[kubernetes]`'s) that builds some platforms with Jobs or kpack
//! Builds, at most `max_in_flight` at once, optionally through a Kueue queue and with a pod
//! template. `[runner.kubernetes]` is the pool named `default`, first in order and serving every
//! platform unless it says otherwise, so configs from before pools keep working unchanged.

use std::path::PathBuf;

use toml::Spanned;

use super::super::kubernetes::KubernetesSettings;
use super::super::{Names, Validator, is_dns_label};
use super::RunnerKind;
use super::kubernetes::{KubeRunnerSettings, RawKubeRunner};

/// The pool `[runner.kubernetes]` stands for.
pub const DEFAULT_POOL: &str = "default";
/// What a pool of `[[runner.pools]]` builds when it does not say.
pub const DEFAULT_PLATFORM: &str = "linux/amd64";
/// Kueue's label naming the LocalQueue a Job waits in.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's label naming a WorkloadPriorityClass.
pub const PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// One place builds run.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    /// `Kubernetes` (Jobs) or `Kpack` (Builds).
    pub kind: RunnerKind,
    /// Its own cluster; `None`: the `[kubernetes]` one.
    pub cluster: Option<Cluster>,
    /// `os/arch[/variant]` it builds; `None`: every platform (`[runner.kubernetes]` without
    /// `platforms`).
    pub platforms: Option<Vec<String>>,
    /// Its builds in flight at once; `None`: only `[runner] max_concurrent` bounds them.
    pub max_in_flight: Option<usize>,
    /// A Kueue LocalQueue its Jobs wait in.
    pub queue: Option<String>,
    /// A Kueue WorkloadPriorityClass.
    pub priority_class: Option<String>,
    /// The Job's `spec.managedBy` (`kueue.x-k8s.io/multikueue`: MultiKueue runs it elsewhere).
    pub managed_by: Option<String>,
    pub pod_template: Option<PodTemplate>,
    /// Its templates (and its images') may set privileged fields.
    pub allow_privileged: bool,
    pub settings: KubeRunnerSettings,
}

/// A cluster of its own: a kubeconfig and a context in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
}

impl Cluster {
    /// The client settings that reach it: its kubeconfig and context, the rest as by default.
    pub fn settings(&self) -> KubernetesSettings {
        KubernetesSettings { kubeconfig: self.kubeconfig.clone(), context: self.context.clone(), ..Default::default() }
    }
}

/// A `PodTemplateSpec` read (and checked) at load, with the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub path: PathBuf,
    pub value: serde_json::Value,
}

impl Pool {
    /// Its platforms as `status` and errors name them.
    pub fn platforms_text(&self) -> String {
        match &self.platforms {
            Some(p) => p.join(", "),
            None => "every platform".to_string(),
        }
    }
}

/// What images and later checks need to know of a pool while the config is read.
#[derive(Debug, Clone)]
pub(in crate::config) struct PoolSummary {
    pub name: String,
    pub kind: RunnerKind,
    pub allow_privileged: bool,
    /// The Secrets with its builds' registry credentials: its images' templates may not reach them.
    pub credential_secrets: Vec<String>,
}

/// Whether `value` is a label value Kubernetes takes (at most 63 of alphanumerics, `-_.`,
/// starting and ending alphanumeric).
fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Whether `value` is `os/arch[/variant]` of lowercase letters and digits.
fn is_platform(value: &str) -> bool {
    let parts: Vec<&str> = value.split('/').collect();
    (2..=3).contains(&parts.len())
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
}

impl<'a> Validator<'a> {
    /// `[runner.kubernetes]` (pool `default`, when present) then `[[runner.pools]]`, in order;
    /// `pool_kinds` are the runner kinds that build in pools, the first the default of a pool
    /// that names none under a runner that builds elsewhere.
    pub(super) fn pools(
        &mut self,
        kind: RunnerKind,
        pool_kinds: &[RunnerKind],
        kind_span: Option<std::ops::Range<usize>>,
        default: Option<RawKubeRunner>,
        pools: Vec<Spanned<RawKubeRunner>>,
    ) -> Vec<Pool> {
        let kube = pool_kinds.contains(&kind);
        let first = pool_kinds[0];
        let mut out = Vec::new();
        // Every pool declared, valid or not: images are checked against them all the same.
        let mut summaries = Vec::new();
        let default = match default {
            Some(raw) => Some(raw),
            // `type = "kubernetes"` alone builds in namespace `default` of the `[kubernetes]` cluster.
            None if kube && pools.is_empty() => Some(RawKubeRunner::default()),
            None => None,
        };
        if let Some(raw) = default {
            for (key, span) in
                [("name", raw.name.as_ref().map(|n| n.span())), ("type", raw.kind.as_ref().map(|k| k.span()))]
            {
                if let Some(span) = span {
                    let message = format!(
                        "[runner.kubernetes] is the pool named \"default\" of the [runner] type: `{key}` belongs in a [[runner.pools]] entry"
                    );
                    self.error(span, message);
                }
            }
            let effective = if kube { kind } else { first };
            summaries.push(PoolSummary {
                name: DEFAULT_POOL.into(),
                kind: effective,
                allow_privileged: raw.allow_privileged.unwrap_or(false),
                credential_secrets: raw.credential_secrets(),
            });
            out.extend(self.pool(raw, DEFAULT_POOL.to_string(), effective, true));
        }
        // With runner `none` (a dry run) the pools stay configured, unused; `exec` runs commands.
        if !pools.is_empty() && kind == RunnerKind::Exec {
            let span = kind_span.unwrap_or_else(|| pools[0].span());
            self.error(span, "[[runner.pools]] build on Kubernetes, runner type \"exec\" runs local commands: set [runner] type = \"kubernetes\" or \"kpack\" (the pools' default type)");
        }
        let mut names: Names = out.iter().map(|p: &Pool| (p.name.clone(), 0)).collect();
        for entry in pools {
            let span = entry.span();
            let raw = entry.into_inner();
            let Some(name) = raw.name.clone() else {
                self.error(span, "a [[runner.pools]] entry needs a `name`");
                continue;
            };
            if !is_dns_label(name.get_ref()) {
                self.error(
                    name.span(),
                    format!("pool name \"{}\" is not a DNS label (lowercase letters, digits and '-')", name.get_ref()),
                );
                continue;
            }
            if name.get_ref() == DEFAULT_POOL && out.iter().any(|p: &Pool| p.name == DEFAULT_POOL) {
                self.error(name.span(), "pool \"default\" is [runner.kubernetes]; name this pool otherwise");
                continue;
            }
            if !self.unique_name(&mut names, &name, "pool") {
                continue;
            }
            let named = raw.kind.as_ref().map(|k| (k.get_ref().as_str(), k.span()));
            let pool_kind = match named {
                None if kube => kind,
                None => first,
                Some((name, span)) => match pool_kinds.iter().find(|k| k.as_str() == name) {
                    Some(known) => *known,
                    None => {
                        let names: Vec<&str> = pool_kinds.iter().map(|k| k.as_str()).collect();
                        let expected = names.join(" or ");
                        self.error(span, format!("unknown pool type \"{name}\", expected {expected}"));
                        continue;
                    }
                },
            };
            summaries.push(PoolSummary {
                name: name.get_ref().clone(),
                kind: pool_kind,
                allow_privileged: raw.allow_privileged.unwrap_or(false),
                credential_secrets: raw.credential_secrets(),
            });
            out.extend(self.pool(raw, name.into_inner(), pool_kind, false));
        }
        self.pools = summaries;
        out
    }

    fn pool(&mut self, raw: RawKubeRunner, name: String, kind: RunnerKind, legacy: bool) -> Option<Pool> {
        let errors_before = self.diagnostics.len();
        let kpack = kind == RunnerKind::Kpack;
        let settings = self.kube_runner(&raw, kpack);
        let cluster = (raw.kubeconfig.is_some() || raw.context.is_some()).then(|| Cluster {
            kubeconfig: raw.kubeconfig.as_ref().map(|k| self.path(k.get_ref())),
            context: raw.context.clone(),
        });
        let platforms = match &raw.platforms {
            None if legacy => None,
            None => Some(vec![DEFAULT_PLATFORM.to_string()]),
            Some(list) if list.get_ref().is_empty() => {
                self.error(list.span(), "platforms must name at least one os/arch (e.g. \"linux/amd64\")");
                None
            }
            Some(list) => {
                let mut out = Vec::new();
                for p in list.get_ref() {
                    if !is_platform(p.get_ref()) {
                        self.error(
                            p.span(),
                            format!("platform \"{}\" is not os/arch[/variant] (e.g. \"linux/arm64\")", p.get_ref()),
                        );
                    } else if p.get_ref().starts_with("windows/") && !kpack {
                        self.error(p.span(), "a Job pool builds Linux images only (its build pod runs the lifecycle under sh); build Windows apps in a pool with type = \"kpack\", which runs Windows build pods");
                    } else if !out.contains(p.get_ref()) {
                        out.push(p.get_ref().clone());
                    }
                }
                Some(out)
            }
        };
        let max_in_flight = raw.max_in_flight.as_ref().and_then(|m| match usize::try_from(*m.get_ref()) {
            Ok(n) if (1..=256).contains(&n) => Some(n),
            _ => {
                self.error(m.span(), "max_in_flight must be between 1 and 256");
                None
            }
        });
        for (value, what) in [(&raw.queue, "queue"), (&raw.priority_class, "priority_class")] {
            if let Some(v) = value {
                if !is_label_value(v.get_ref()) {
                    self.error(
                        v.span(),
                        format!(
                            "{what} \"{}\" is not a Kubernetes label value (at most 63 letters, digits, '-', '_', '.')",
                            v.get_ref()
                        ),
                    );
                } else if kpack {
                    self.error(
                        v.span(),
                        format!("{what} is for Job pools: Kueue admits Jobs, and kpack makes its build pods itself"),
                    );
                }
            }
        }
        if let Some(m) = &raw.managed_by {
            let value = m.get_ref();
            if kpack {
                self.error(m.span(), "managed_by is for Job pools (a Job's spec.managedBy)");
            } else if value.len() > 63 || !value.contains('/') || value.starts_with('/') || value.ends_with('/') {
                self.error(m.span(), format!("managed_by \"{value}\" is not a controller name (domain/path, at most 63 characters, e.g. \"kueue.x-k8s.io/multikueue\")"));
            } else if raw.queue.is_none() && value != "kubernetes.io/job-controller" {
                self.error(m.span(), "managed_by needs a queue: MultiKueue dispatches only Jobs in a Kueue queue");
            }
        }
        if let Some(queue) = &raw.queue
            && !kpack
            && !raw.resources.as_ref().is_some_and(|r| {
                r.get_ref().get("requests").is_some_and(|q| q.as_object().is_some_and(|q| !q.is_empty()))
            })
        {
            self.error(queue.span(), "a pool with a queue needs resources.requests (Kueue admits builds by their requests), e.g. resources = { requests = { cpu = \"1\", memory = \"2Gi\" } }");
        }
        let allow_privileged = raw.allow_privileged.unwrap_or(false);
        let credentials = raw.credential_secrets();
        let pod_template =
            raw.pod_template.as_ref().and_then(|t| self.pod_template(t, kpack, allow_privileged, &credentials));
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(Pool {
            name,
            kind,
            cluster,
            platforms,
            max_in_flight,
            queue: raw.queue.map(Spanned::into_inner),
            priority_class: raw.priority_class.map(Spanned::into_inner),
            managed_by: raw.managed_by.map(Spanned::into_inner),
            pod_template,
            allow_privileged,
            settings: settings?,
        })
    }

    /// A `pod_template` file, read relative to the config and checked: every field that is
    /// refused (what Pod Security refuses, or reaches `credential_secrets`, unless allowed; for
    /// kpack, what a Build cannot carry) is an error here.
    pub(in crate::config) fn pod_template(
        &mut self,
        path: &Spanned<String>,
        kpack: bool,
        allow_privileged: bool,
        credential_secrets: &[String],
    ) -> Option<PodTemplate> {
        let file = self.path(path.get_ref());
        let value = match super::super::pod_template::read(&file) {
            Ok(v) => v,
            Err(err) => {
                self.error(path.span(), format!("pod_template: {err}"));
                return None;
            }
        };
        let mut ok = true;
        let allowance = super::super::pod_template::Allowance { privileged: allow_privileged, credential_secrets };
        for refusal in super::super::pod_template::refusals(&value, &allowance) {
            ok = false;
            self.error(path.span(), format!("pod_template {}: {refusal}", file.display()));
        }
        if !kpack {
            for problem in template_names(&value) {
                ok = false;
                self.error(path.span(), format!("pod_template {}: {problem}", file.display()));
            }
        }
        if kpack && let Err(fields) = super::super::pod_template::kpack_fields(&value) {
            ok = false;
            self.error(
                path.span(),
                format!(
                    "pod_template {}: a kpack Build cannot carry {} (it takes nodeSelector, tolerations, affinity, runtimeClassName, schedulerName, priorityClassName, serviceAccountName and one container's env and resources)",
                    file.display(),
                    fields.join(", ")
                ),
            );
        }
        ok.then_some(PodTemplate { path: file, value })
    }
}

/// The containers a build pod has: a template's container by another name runs beside them (and
/// needs an image); one by these names tunes them.
const BUILD_CONTAINERS: &[&str] = &["build", "rebase", "source"];
/// The build's registry credentials: a template's container may not mount them.
const CREDENTIALS_VOLUME: &str = "docker-config";

/// What is wrong with a Job pool template's container names: a container without an image that
/// tunes no build container (a misspelt `build` would be dropped without a word), and a mount of
/// the build's credentials volume.
fn template_names(template: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for list in ["containers", "initContainers"] {
        for c in template["spec"][list].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default();
            if c.get("image").is_none_or(serde_json::Value::is_null) && !BUILD_CONTAINERS.contains(&name) {
                out.push(format!(
                    "spec.{list}[name={name}] has no image and tunes no build container ({}): name one of them, or give it an image to run beside them",
                    BUILD_CONTAINERS.join(", ")
                ));
            }
            let mounts = c["volumeMounts"].as_array().into_iter().flatten();
            if mounts.into_iter().any(|m| m["name"] == CREDENTIALS_VOLUME) {
                out.push(format!(
                    "spec.{list}[name={name}].volumeMounts[name={CREDENTIALS_VOLUME}]: the registry credentials are mounted into the build's containers only"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_containers_tune_build_containers_or_run_their_own_image() {
        let template = serde_json::json!({ "spec": {
            "containers": [
                { "name": "build", "resources": { "limits": { "memory": "8Gi" } } },
                { "name": "biuld", "env": [{ "name": "A", "value": "1" }] },
                { "name": "sidecar", "image": "proxy:1", "volumeMounts": [{ "name": "docker-config", "mountPath": "/x" }] },
            ],
            "initContainers": [{ "name": "source", "env": [] }],
        } });
        let problems = template_names(&template);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].starts_with("spec.containers[name=biuld] has no image and tunes no build container"));
        assert!(problems[1].starts_with("spec.containers[name=sidecar].volumeMounts[name=docker-config]"));
    }

    #[test]
    fn platforms_and_label_values() {
        for ok in ["linux/amd64", "linux/arm64/v8", "windows/amd64"] {
            assert!(is_platform(ok), "{ok}");
        }
        for bad in ["linux", "linux/", "Linux/amd64", "linux/amd64/v8/x", "/amd64", "linux amd64"] {
            assert!(!is_platform(bad), "{bad}");
        }
        for ok in ["builds", "team-a.builds", "a_b", "x"] {
            assert!(is_label_value(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a b", "a/b", &"a".repeat(64)] {
            assert!(!is_label_value(bad), "{bad}");
        }
    }
}
