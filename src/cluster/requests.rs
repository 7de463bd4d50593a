//! The daemon's requests to Kubernetes API servers, counted by verb and resource
//! (`builder_monitor_kube_requests_total`): what a roll-out, a ledger start or a build costs the
//! API server, read from the daemon itself (the server's own `apiserver_request_total` mixes every
//! client's). Every client the daemon builds ([`super::client`]) carries the counting layer.
//!
//! The counters are the process's, like its log stream's: one process, one set of clients, served
//! by each [`crate::metrics::Metrics`] registry the process builds.

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The labels of one counted request: `verb` as Kubernetes names it (`get`, `list`, `watch`,
/// `create`, `update`, `patch`, `delete`), `resource` as `deployments.apps` (core resources
/// without a group, a subresource after `/`), or the first path segment of a request that names
/// no resource (`version`).
pub use crate::metrics::KubeRequestLabels;

/// The process's counters.
pub fn counters() -> &'static Family<KubeRequestLabels, Counter> {
    static COUNTERS: OnceLock<Family<KubeRequestLabels, Counter>> = OnceLock::new();
    COUNTERS.get_or_init(Family::default)
}

/// Counts `request` (see [`classify`]).
pub fn record<B>(request: &http::Request<B>) {
    let labels = classify(request.method(), request.uri().path(), request.uri().query());
    counters().get_or_create(&labels).inc();
}

/// The verb and resource of a request to the Kubernetes API, from its method, path and query.
pub fn classify(method: &http::Method, path: &str, query: Option<&str>) -> KubeRequestLabels {
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    // `/api/v1/…` (core) or `/apis/GROUP/VERSION/…`; anything else names no resource.
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        other => {
            let verb = if *method == http::Method::GET { "get" } else { "other" };
            let resource = other.first().copied().unwrap_or_default();
            return KubeRequestLabels { verb: verb.into(), resource: resource.into() };
        }
    };
    // `namespaces/NS/RESOURCE[/NAME[/SUB]]` is namespaced; `namespaces[/NAME]` is the namespaces.
    let rest = match rest {
        ["namespaces", _namespace, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named, sub) = match rest {
        [] => ("", false, None),
        [resource] => (*resource, false, None),
        [resource, _name] => (*resource, true, None),
        [resource, _name, sub, ..] => (*resource, true, Some(*sub)),
    };
    let mut name = if group.is_empty() { resource.to_string() } else { format!("{resource}.{group}") };
    if let Some(sub) = sub {
        name = format!("{name}/{sub}");
    }
    let watching = query.is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    KubeRequestLabels { verb: verb.into(), resource: name }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn of(method: Method, path: &str, query: Option<&str>) -> (String, String) {
        let l = classify(&method, path, query);
        (l.verb, l.resource)
    }

    #[test]
    fn requests_are_named_as_kubernetes_names_them() {
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            of(Method::PATCH, "/apis/apps/v1/namespaces/web/deployments/shop", None),
            s("patch", "deployments.apps")
        );
        assert_eq!(
            of(Method::GET, "/apis/apps/v1/namespaces/web/deployments/shop", None),
            s("get", "deployments.apps")
        );
        assert_eq!(
            of(Method::GET, "/apis/apps/v1/namespaces/web/deployments", Some("limit=500")),
            s("list", "deployments.apps")
        );
        assert_eq!(
            of(Method::GET, "/api/v1/namespaces/web/pods", Some("resourceVersion=7&watch=true&timeoutSeconds=290")),
            s("watch", "pods")
        );
        assert_eq!(of(Method::GET, "/api/v1/namespaces/web", None), s("get", "namespaces"));
        assert_eq!(of(Method::GET, "/api/v1/namespaces", None), s("list", "namespaces"));
        assert_eq!(
            of(Method::PATCH, "/apis/kpack.io/v1alpha2/clusterbuilders/base/status", None),
            s("patch", "clusterbuilders.kpack.io/status")
        );
        assert_eq!(of(Method::POST, "/apis/batch/v1/namespaces/ci/jobs", None), s("create", "jobs.batch"));
        assert_eq!(of(Method::PUT, "/api/v1/namespaces/bm/configmaps/ledger", None), s("update", "configmaps"));
        assert_eq!(of(Method::DELETE, "/api/v1/namespaces/bm/configmaps/ledger", None), s("delete", "configmaps"));
        assert_eq!(of(Method::GET, "/version", None), s("get", "version"));
    }
}
