//! `[kubernetes]`: how to reach the cluster the daemon's own objects live in, and whether it
//! answered; and the check of Kubernetes-typed values (the Pod spec's own shapes, deserialized
//! into the k8s-openapi types) that every section holding them uses.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;

use super::{DurationText, Validator, is_dns_label};

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

/// Whether a request got no answer from the API server (a connection refused or reset, a
/// timeout): any HTTP status is an answer. The daemon, the runner's pools and the start-up checks
/// all tell an unreachable cluster from a refusal by it.
pub fn unanswered(err: &kube::Error) -> bool {
    matches!(err, kube::Error::HyperError(_) | kube::Error::Service(_))
}

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
    pub(in crate::config) fn affinity(&mut self, value: &Spanned<serde_json::Value>) -> bool {
        match k8s_typed::<k8s_openapi::api::core::v1::Affinity>(value.get_ref()) {
            Ok(_) => true,
            Err(message) => {
                self.error(value.span(), format!("affinity is not a Pod spec affinity: {message}"));
                false
            }
        }
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
