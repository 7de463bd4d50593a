//! Kubernetes plumbing: the client from `[kubernetes]`, start-up access checks with clear errors,
//! YAML for printed objects, and the ClusterBuilder resource.

pub mod crd;

use std::fmt::Write as _;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::config::KubernetesSettings;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
    #[error("Kubernetes API: {0}")]
    Api(String),
    #[error("namespace \"{0}\" does not exist; create it or set [runner.kubernetes] namespace")]
    NoNamespace(String),
    #[error("{0}")]
    Forbidden(String),
}

impl From<kube::Error> for ClusterError {
    fn from(e: kube::Error) -> Self {
        ClusterError::Api(e.to_string())
    }
}

/// A client from `[kubernetes]`: its kubeconfig and context, else in-cluster or the default
/// kubeconfig.
pub async fn client(settings: &KubernetesSettings) -> Result<kube::Client, ClusterError> {
    crate::registry::install_crypto_provider();
    let options = kube::config::KubeConfigOptions { context: settings.context.clone(), ..Default::default() };
    let config = match &settings.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| ClusterError::Config(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| ClusterError::Config(e.to_string()))?
        }
        None if settings.context.is_some() => {
            kube::Config::from_kubeconfig(&options).await.map_err(|e| ClusterError::Config(e.to_string()))?
        }
        None => kube::Config::infer().await.map_err(|e| ClusterError::Config(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| ClusterError::Config(e.to_string()))
}

/// A permission the daemon needs: verbs on a resource in a namespace.
#[derive(Debug, Clone)]
pub struct Permission {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// Checks that `namespace` exists and that every permission is granted (SelfSubjectAccessReview),
/// naming what is missing and how to grant it.
pub async fn check_access(client: &kube::Client, namespace: &str, needed: &[Permission]) -> Result<(), ClusterError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(namespace).await?.is_none() {
        return Err(ClusterError::NoNamespace(namespace.to_string()));
    }
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for p in needed {
        for verb in p.verbs {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(namespace.to_string()),
                        verb: Some(verb.to_string()),
                        group: Some(p.group.to_string()),
                        resource: Some(p.resource.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = reviews.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                let resource =
                    if p.group.is_empty() { p.resource.to_string() } else { format!("{}.{}", p.resource, p.group) };
                missing.push(format!("{verb} {resource}"));
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(ClusterError::Forbidden(format!(
        "missing permission in namespace \"{namespace}\": {} (grant them to the daemon's service account with a Role and RoleBinding)",
        missing.join(", ")
    )))
}

/// A JSON value as YAML (block style; strings quoted as JSON strings, which YAML reads the same).
pub fn to_yaml(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_yaml(&mut out, value, 0, false);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn scalar(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        other => other.to_string(),
    }
}

fn write_yaml(out: &mut String, value: &serde_json::Value, indent: usize, in_list: bool) {
    use serde_json::Value;
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (i, (k, v)) in map.iter().enumerate() {
                let prefix = if in_list && i == 0 { String::new() } else { pad.clone() };
                let key = if k.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) && !k.is_empty() {
                    k.clone()
                } else {
                    serde_json::to_string(k).unwrap_or_default()
                };
                match v {
                    Value::Object(m) if !m.is_empty() => {
                        let _ = writeln!(out, "{prefix}{key}:");
                        write_yaml(out, v, indent + 2, false);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{prefix}{key}:");
                        write_yaml(out, v, indent, false);
                    }
                    _ => {
                        let _ = writeln!(out, "{prefix}{key}: {}", inline(v));
                    }
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                match item {
                    Value::Object(m) if !m.is_empty() => {
                        let _ = write!(out, "{pad}- ");
                        write_yaml(out, item, indent + 2, true);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        let _ = writeln!(out, "{pad}-");
                        write_yaml(out, item, indent + 2, false);
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}- {}", inline(item));
                    }
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", inline(other));
        }
    }
}

fn inline(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Object(_) => "{}".into(),
        serde_json::Value::Array(_) => "[]".into(),
        other => scalar(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_of_nested_values() {
        let v = json!({
            "apiVersion": "batch/v1",
            "metadata": { "name": "x", "labels": { "app.kubernetes.io/managed-by": "builder-monitor" }, "annotations": {} },
            "spec": { "containers": [{ "name": "c", "args": ["-a", "b c"] }, { "name": "d" }], "n": 3, "ok": true, "none": null },
        });
        let yaml = to_yaml(&v);
        assert_eq!(
            yaml,
            "apiVersion: \"batch/v1\"\nmetadata:\n  annotations: {}\n  labels:\n    app.kubernetes.io/managed-by: \"builder-monitor\"\n  name: \"x\"\nspec:\n  containers:\n  - args:\n    - \"-a\"\n    - \"b c\"\n    name: \"c\"\n  - name: \"d\"\n  n: 3\n  none: null\n  ok: true\n"
        );
    }
}
