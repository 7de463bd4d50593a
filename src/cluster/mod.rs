//! Kubernetes plumbing: the client from `[kubernetes]`, start-up access checks with clear errors,
//! YAML for printed objects, and the ClusterBuilder resource.

pub mod crd;
pub mod expect;
pub mod lease;
pub mod publish;
pub mod requests;
pub mod waiting;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::config::{Config, KubernetesSettings, StateLocation};
use crate::ledger::LedgerError;

/// Each variant's message includes its cause, which is therefore not also exposed as `source()`
/// (the convention of `LedgerError`): the daemon logs these with `Display`, a chain printer would
/// show the cause twice, and a kubeconfig's deeper causes may quote its credentials.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The kubeconfig cannot be read or names no usable context; `path` when it is the one
    /// `[kubernetes] kubeconfig` names.
    #[error("cannot configure the Kubernetes client: {}{error}", file_prefix(path.as_deref()))]
    Kubeconfig { path: Option<PathBuf>, error: kube::config::KubeconfigError },
    /// Neither in-cluster nor kubeconfig settings are usable.
    #[error("cannot configure the Kubernetes client: {0}")]
    Infer(kube::config::InferConfigError),
    /// A kubeconfig that is not YAML of the kubeconfig shape, at `line`/`column` when known; the
    /// parser's own message is not kept: it quotes the offending value.
    #[error(
        "cannot configure the Kubernetes client: {}the kubeconfig is not valid YAML of the kubeconfig shape{} (the value is not shown: kubeconfigs hold credentials)",
        file_prefix(path.as_deref()),
        at.map(|(line, column)| format!(" at line {line} column {column}")).unwrap_or_default()
    )]
    KubeconfigSyntax { path: Option<PathBuf>, at: Option<(u64, u64)> },
    #[error("cannot configure the Kubernetes client: {0}")]
    Client(kube::Error),
    #[error("Kubernetes API: {0}")]
    Api(kube::Error),
    #[error("Kubernetes API: cannot apply ClusterBuilder {name}: {error}")]
    Apply { name: String, error: WriteError },
    #[error("Kubernetes API: cannot write the status of ClusterBuilder {name}: {error}")]
    WriteStatus { name: String, error: WriteError },
    #[error("Kubernetes API: no builder {0}")]
    UnknownBuilder(String),
    #[error("Kubernetes API: ClusterBuilder {0} does not exist (its spec is applied first)")]
    NotApplied(String),
    #[error("Kubernetes API: {0}")]
    Ledger(LedgerError),
    #[error("namespace \"{0}\" does not exist; create it or change the namespace (needed for {1})")]
    NoNamespace(String, &'static str),
    #[error("{0}")]
    Forbidden(String),
    /// A pool's own cluster: its client or its permissions.
    #[error("pool \"{pool}\": {error}")]
    Pool { pool: String, error: Box<ClusterError> },
    #[error(
        "not a Kubernetes object name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 246 characters)"
    )]
    ObjectName,
}

/// Why a ClusterBuilder write failed: the CRD in the cluster lacks a field this daemon writes
/// (it is older than the daemon), or another refusal.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "{0}: the ClusterBuilder CRD in the cluster is older than this daemon; apply the current one with `builder-monitor crd | kubectl apply --server-side -f -`"
    )]
    CrdOutOfDate(String),
    #[error("{0}")]
    Api(kube::Error),
}

impl From<kube::Error> for WriteError {
    fn from(error: kube::Error) -> Self {
        match &error {
            // Strict field validation's refusal of a server-side apply (a 500, as the server
            // answers it): `failed to create typed patch object (…): .status.history: field not
            // declared in schema`; of other writes, a 400 naming the `unknown field`.
            kube::Error::Api(status)
                if status.message.contains("field not declared in schema")
                    || (status.code == 400 && status.message.contains("unknown field")) =>
            {
                WriteError::CrdOutOfDate(status.message.clone())
            }
            _ => WriteError::Api(error),
        }
    }
}

impl ClusterError {
    /// The server's answer this error carries, if it is one.
    pub fn answer(&self) -> Option<&kube::Error> {
        match self {
            ClusterError::Api(e)
            | ClusterError::Apply { error: WriteError::Api(e), .. }
            | ClusterError::WriteStatus { error: WriteError::Api(e), .. } => Some(e),
            ClusterError::Ledger(LedgerError::Kubernetes(e)) => Some(e),
            _ => None,
        }
    }
}

impl From<kube::Error> for ClusterError {
    fn from(e: kube::Error) -> Self {
        ClusterError::Api(e)
    }
}

impl From<LedgerError> for ClusterError {
    fn from(e: LedgerError) -> Self {
        ClusterError::Ledger(e)
    }
}

fn file_prefix(path: Option<&Path>) -> String {
    path.map(|p| format!("{}: ", p.display())).unwrap_or_default()
}

/// A client from `[kubernetes]`: its kubeconfig and context, else in-cluster or the default
/// kubeconfig.
pub async fn client(settings: &KubernetesSettings) -> Result<kube::Client, ClusterError> {
    let options = kube::config::KubeConfigOptions { context: settings.context.clone(), ..Default::default() };
    let config = match &settings.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(Some(path), e))?;
            kube::Config::from_custom_kubeconfig(file, &options).await.map_err(|e| kubeconfig_error(None, e))?
        }
        None if settings.context.is_some() => {
            kube::Config::from_kubeconfig(&options).await.map_err(|e| kubeconfig_error(None, e))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|error| syntax_error(None, &error).unwrap_or(ClusterError::Infer(error)))?,
    };
    let counting = tower::util::MapRequestLayer::new(|request: http::Request<kube::client::Body>| {
        requests::record(&request);
        request
    });
    Ok(kube::client::ClientBuilder::try_from(config).map_err(ClusterError::Client)?.with_layer(&counting).build())
}

impl ClusterError {
    /// This error in a phrase for one line of a human view: where no cluster could be configured,
    /// what was missing (not the client's list of every place it looked).
    pub fn brief(&self) -> String {
        match self {
            ClusterError::Infer(_) => "no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod".into(),
            other => builder_monitor_core::text::fit(&other.to_string(), 100),
        }
    }
}

fn kubeconfig_error(path: Option<&Path>, error: kube::config::KubeconfigError) -> ClusterError {
    syntax_error(path, &error).unwrap_or_else(|| ClusterError::Kubeconfig { path: path.map(Path::to_path_buf), error })
}

/// A kubeconfig holds tokens and keys, and its YAML parser's errors quote the offending value (and
/// may show a snippet of the file): a parse error anywhere in `err`'s chain is reduced to its
/// position.
fn syntax_error(path: Option<&Path>, err: &(dyn std::error::Error + 'static)) -> Option<ClusterError> {
    let mut cause = Some(err);
    while let Some(e) = cause {
        if let Some(kube::config::KubeconfigError::Parse(parse)) = e.downcast_ref::<kube::config::KubeconfigError>() {
            let at = parse.location().map(|l| (l.line(), l.column()));
            return Some(ClusterError::KubeconfigSyntax { path: path.map(Path::to_path_buf), at });
        }
        cause = e.source();
    }
    None
}

/// A permission the daemon needs: verbs on a resource, in a namespace or (`None`) cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Permission {
    pub namespace: Option<String>,
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// The setting that needs it.
    pub needed_for: &'static str,
}

impl Permission {
    /// A permission the runner's Jobs or kpack Builds need (in the build namespace).
    fn for_runner(&self) -> bool {
        self.needed_for.starts_with("[runner]")
    }

    fn resource_name(&self) -> String {
        if self.group.is_empty() { self.resource.to_string() } else { format!("{}.{}", self.resource, self.group) }
    }
}

/// The setting deploys' permissions are needed for; their Roles are `ACCOUNT-deploys`.
const DEPLOYS: &str = "[[images]] deploy";

/// Every permission this config makes the daemon use — the single list the start-up check, the
/// `rbac` command and the Helm chart's tests work from.
pub fn required_permissions(config: &Config) -> Vec<Permission> {
    let own = Some(config.kubernetes.namespace.clone());
    let mut out = Vec::new();
    let mut add = |namespace: &Option<String>, group, resource, verbs, needed_for| {
        out.push(Permission { namespace: namespace.clone(), group, resource, verbs, needed_for })
    };
    if config.kubernetes.publish {
        let verbs: &'static [&'static str] = if config.kubernetes.prune {
            &["create", "delete", "get", "list", "patch"]
        } else {
            &["create", "get", "patch"]
        };
        add(&None, "buildermonitor.dev", "clusterbuilders", verbs, "[kubernetes] publish");
        add(&None, "buildermonitor.dev", "clusterbuilders/status", &["patch"], "[kubernetes] publish");
        // The server takes Events about a cluster-scoped object only in `default` (or
        // `kube-system`), where `kubectl describe` finds them.
        add(&Some(publish::EVENTS_NAMESPACE.to_string()), "", "events", &["create"], "[kubernetes] publish");
    }
    if config.kubernetes.leader_election {
        add(&own, "coordination.k8s.io", "leases", &["create", "get", "update"], "[kubernetes] leader_election");
    }
    if matches!(config.monitor.state, StateLocation::Kubernetes) {
        add(&own, "", "configmaps", &["create", "get", "list", "update"], "[monitor] state = \"kubernetes\"");
    }
    for backend in config.runner.in_force() {
        if backend.pools {
            // The pools on this cluster; a pool with a cluster of its own is checked there.
            for pool in config.runner.pools.iter().filter(|p| p.cluster.is_none()) {
                for p in pool_permissions(pool) {
                    add(&p.namespace, p.group, p.resource, p.verbs, p.needed_for);
                }
            }
            continue;
        }
        for rule in backend.permissions {
            add(&None, rule.group, rule.resource, rule.verbs, backend.setting);
        }
    }
    if to_workloads(config) {
        let namespaces: std::collections::BTreeSet<&String> =
            config.images.iter().flat_map(|i| i.deploy.iter().map(|w| &w.namespace)).collect();
        for namespace in namespaces {
            for rule in crate::config::DEPLOY_PERMISSIONS {
                add(&Some(namespace.clone()), rule.group, rule.resource, rule.verbs, DEPLOYS);
            }
        }
    }
    out
}

/// Whether deploys are written to `[[images]] deploy` workloads (not by the `[runner.exec]`
/// command).
fn to_workloads(config: &Config) -> bool {
    config.runner.carrier(builder_monitor_core::plan::ActionKind::Deploy).backend
        == crate::config::BackendKind::Workloads
}

/// What in `config` carries out actions on `[kubernetes]`'s cluster, as messages name it: each
/// `[[images]]` with `deploy` workloads (when deploys go to workloads), a Kubernetes or kpack
/// runner, the pools on that cluster. Empty when no action needs it.
pub fn action_users(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if to_workloads(config) {
        out.extend(
            config.images.iter().filter(|i| !i.deploy.is_empty()).map(|i| format!("image \"{}\"'s deploy", i.name)),
        );
    }
    // Builds need it when a pool is on it; pools with clusters of their own do not.
    let on_it: Vec<&crate::config::Pool> = config.runner.pools.iter().filter(|p| p.cluster.is_none()).collect();
    for backend in config.runner.in_force() {
        if backend.pools && !on_it.is_empty() {
            out.push(backend.setting.to_string());
            let named = on_it.iter().filter(|p| p.name != crate::config::DEFAULT_POOL);
            out.extend(named.map(|p| format!("pool \"{}\"", p.name)));
        }
    }
    out
}

/// Whether only actions need `[kubernetes]`'s cluster, so the daemon can run without it: not its
/// ledger, its lease or its ClusterBuilders.
pub fn only_actions_need_it(config: &Config) -> bool {
    !config.kubernetes.publish
        && !config.kubernetes.leader_election
        && !matches!(config.monitor.state, StateLocation::Kubernetes)
}

/// How to give the daemon a cluster, for the messages of one it cannot configure.
pub const CONFIGURE: &str = "set [kubernetes] kubeconfig = \"/path/to/kubeconfig\" (and context, if not its current one), \
     or provide $KUBECONFIG or ~/.kube/config, or run in a pod";

/// `check`'s preflight: the cluster that actions need can be configured (a
/// kubeconfig is found and names a usable context; nothing is sent to the cluster), else what
/// needs it and how to give it one. A pool with a cluster of its own names its kubeconfig, which
/// only the daemon reads (the chart mounts it there alone).
pub async fn preflight(config: &Config) -> Option<String> {
    let users = action_users(config);
    if users.is_empty() {
        return None;
    }
    let error = client(&config.kubernetes).await.err()?;
    // The client's own error runs to hundreds of characters (every place it looked, each
    // cause): the log has it whole, the message a summary and the fix, each on a line.
    tracing::debug!(%error, "no Kubernetes client");
    let needs = if users.len() == 1 { "needs" } else { "need" };
    let users = builder_monitor_core::text::fit(&users.join(", "), 60);
    Some(format!(
        "{users} {needs} a Kubernetes cluster, and none can be configured:\n  {}\n  {CONFIGURE}\n  \
         (BUILDER_MONITOR_LOG=debug logs the client's whole error)",
        error.brief()
    ))
}

/// Why the actions on `[kubernetes]`'s cluster wait, when they do: none can be configured, or it
/// does not answer (within `within`). `None` when it answers, or no action needs it.
pub async fn actions_wait(config: &Config, within: std::time::Duration) -> Option<String> {
    if action_users(config).is_empty() {
        return None;
    }
    let client = match client(&config.kubernetes).await {
        Ok(client) => client,
        Err(error) => return Some(no_cluster(&error)),
    };
    // Any HTTP answer will do, even a refusal: the question is only whether it answers.
    match tokio::time::timeout(within, client.apiserver_version()).await {
        Err(_) => Some(format!("the Kubernetes cluster of [kubernetes] does not answer (nothing within {within:?})")),
        Ok(Err(error)) if crate::config::unanswered(&error) => Some(unreachable(&error)),
        Ok(_) => None,
    }
}

/// Why actions wait when no cluster can be configured.
pub fn no_cluster(error: &ClusterError) -> String {
    format!("no Kubernetes cluster: {error}; {CONFIGURE}")
}

/// Why actions wait when the cluster does not answer.
pub fn unreachable(error: &kube::Error) -> String {
    format!("the Kubernetes cluster of [kubernetes] does not answer: {error}")
}

/// The client of every pool with a cluster of its own, each pool's permissions checked there. A
/// cluster that does not answer now is no reason to stop: its builds go to other pools until it
/// does (logged); one that answers without a permission the pool needs is, named per pool.
pub async fn pool_clients(config: &Config) -> Result<std::collections::BTreeMap<String, kube::Client>, ClusterError> {
    let mut out = std::collections::BTreeMap::new();
    for pool in &config.runner.pools {
        let Some(cluster) = &pool.cluster else { continue };
        let client = client(&cluster.settings())
            .await
            .map_err(|e| ClusterError::Pool { pool: pool.name.clone(), error: Box::new(e) })?;
        match check_access(&client, &pool_permissions(pool)).await {
            Ok(()) => {}
            Err(ClusterError::Api(err)) if crate::config::unanswered(&err) => {
                tracing::warn!(pool = %pool.name, error = %err, "the pool's cluster does not answer; its permissions are checked when it does, and its builds go to other pools meanwhile");
            }
            Err(e) => return Err(ClusterError::Pool { pool: pool.name.clone(), error: Box::new(e) }),
        }
        out.insert(pool.name.clone(), client);
    }
    Ok(out)
}

/// What a pool needs in its namespace of its cluster: its Jobs (and their pods) or kpack Builds.
pub fn pool_permissions(pool: &crate::config::Pool) -> Vec<Permission> {
    let backend = pool.kind.facts();
    backend
        .permissions
        .iter()
        .map(|rule| Permission {
            namespace: Some(pool.settings.namespace.clone()),
            group: rule.group,
            resource: rule.resource,
            verbs: rule.verbs,
            needed_for: if pool.name == crate::config::DEFAULT_POOL { backend.setting } else { POOLS },
        })
        .collect()
}

/// The setting a pool's permissions are needed for (`[runner.kubernetes]` names its own).
pub const POOLS: &str = "[runner] [[runner.pools]]";

/// Checks that every permission is granted (SelfSubjectAccessReview) and that every namespace
/// named exists, naming what is missing and what needs it. It reads nothing the permissions do
/// not grant: `builder-monitor rbac` grants no read of Namespaces (a cluster-scoped resource),
/// so a namespace is read (to tell "does not exist" from "no rights there") only when a review
/// says this account may get it. When it may not, a namespace that does not exist still stops
/// the start: it holds no RoleBinding, so its permissions are missing, and the message says the
/// namespace may not exist.
pub async fn check_access(client: &kube::Client, needed: &[Permission]) -> Result<(), ClusterError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let asked: Vec<(&Permission, &str)> = needed.iter().flat_map(|p| p.verbs.iter().map(move |v| (p, *v))).collect();
    // Every review at once (a start waits for them all): answered in the order asked; the
    // namespaces' errors first, as when they were asked first.
    let (unreadable, answers) = futures::future::join(
        check_namespaces(client, &reviews, needed),
        futures::future::join_all(asked.iter().map(|&(p, verb)| {
            let (resource, subresource) = match p.resource.split_once('/') {
                Some((r, s)) => (r, Some(s)),
                None => (p.resource, None),
            };
            let attributes =
                Attributes { namespace: p.namespace.as_deref(), verb, group: p.group, resource, subresource };
            allowed(&reviews, attributes, None)
        })),
    )
    .await;
    let unreadable = unreadable?;
    let mut missing: std::collections::BTreeMap<(Option<String>, &str), Vec<String>> = Default::default();
    // Namespaces where something is granted: they exist (a RoleBinding is there, or a
    // ClusterRoleBinding grants it everywhere), whether or not this account may read them.
    let mut granted_in = std::collections::BTreeSet::new();
    for (&(p, verb), answer) in asked.iter().zip(answers) {
        if answer? {
            granted_in.extend(p.namespace.clone());
        } else {
            missing
                .entry((p.namespace.clone(), p.needed_for))
                .or_default()
                .push(format!("{verb} {}", p.resource_name()));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = missing
        .into_iter()
        .map(|((namespace, why), verbs)| match namespace {
            Some(ns) if unreadable.contains(&ns) && !granted_in.contains(&ns) => format!(
                "missing permission in namespace \"{ns}\" (or it does not exist): {} (for {why})",
                verbs.join(", ")
            ),
            Some(ns) => format!("missing permission in namespace \"{ns}\": {} (for {why})", verbs.join(", ")),
            None => format!("missing cluster-wide permission: {} (for {why})", verbs.join(", ")),
        })
        .collect();
    Err(ClusterError::Forbidden(format!(
        "{}; grant them to the daemon's service account (`builder-monitor rbac` prints the Roles and bindings it needs)",
        lines.join("; ")
    )))
}

/// Each namespace `needed` names that this account may get is read: one that does not exist is
/// [`ClusterError::NoNamespace`]. Returns the namespaces it may not get (not known to exist).
async fn check_namespaces(
    client: &kube::Client,
    reviews: &Api<SelfSubjectAccessReview>,
    needed: &[Permission],
) -> Result<std::collections::BTreeSet<String>, ClusterError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut seen = std::collections::BTreeSet::new();
    let mut unreadable = std::collections::BTreeSet::new();
    for p in needed {
        let Some(namespace) = &p.namespace else { continue };
        if !seen.insert(namespace.clone()) {
            continue;
        }
        let get = Attributes { namespace: None, verb: "get", group: "", resource: "namespaces", subresource: None };
        if !allowed(reviews, get, Some(namespace)).await? {
            unreadable.insert(namespace.clone());
        } else if namespaces.get_opt(namespace).await?.is_none() {
            return Err(ClusterError::NoNamespace(namespace.clone(), p.needed_for));
        }
    }
    Ok(unreadable)
}

/// What a SelfSubjectAccessReview asks about.
#[derive(Clone, Copy)]
struct Attributes<'a> {
    namespace: Option<&'a str>,
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    subresource: Option<&'a str>,
}

/// Whether the server allows this account `attributes` (on object `name`, when given).
async fn allowed(
    reviews: &Api<SelfSubjectAccessReview>,
    a: Attributes<'_>,
    name: Option<&str>,
) -> Result<bool, ClusterError> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: a.namespace.map(str::to_string),
                verb: Some(a.verb.to_string()),
                group: Some(a.group.to_string()),
                resource: Some(a.resource.to_string()),
                subresource: a.subresource.map(str::to_string),
                name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Everything `kubectl apply -f -` needs to let the daemon do exactly `permissions`: its
/// ServiceAccount `account` in `namespace`, and each Role (ClusterRole for cluster-wide
/// permissions) with a binding to that account. Named as the Helm chart names them: `account` for
/// the daemon's own Role and the ClusterRole, `account-builds` for the runner's Role. Nothing when
/// no permission is needed.
pub fn rbac_objects(permissions: &[Permission], account: &str, namespace: &str) -> Vec<serde_json::Value> {
    use serde_json::json;
    if permissions.is_empty() {
        return Vec::new();
    }
    // (namespace, role name) → rules; `None` sorts first, so the ClusterRole leads.
    let mut roles: std::collections::BTreeMap<(Option<String>, String), Vec<serde_json::Value>> = Default::default();
    for p in permissions {
        let name = if p.for_runner() {
            format!("{account}-builds")
        } else if p.needed_for == DEPLOYS {
            format!("{account}-deploys")
        } else if p.resource == "events" {
            format!("{account}-events")
        } else {
            account.to_string()
        };
        roles.entry((p.namespace.clone(), name)).or_default().push(json!({
            "apiGroups": [p.group],
            "resources": [p.resource],
            "verbs": p.verbs,
        }));
    }
    let rbac = "rbac.authorization.k8s.io/v1";
    let subjects = json!([{ "kind": "ServiceAccount", "name": account, "namespace": namespace }]);
    let mut out = vec![json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": account, "namespace": namespace },
    })];
    for ((scope, name), rules) in roles {
        let (role_kind, binding_kind, metadata) = match &scope {
            None => ("ClusterRole", "ClusterRoleBinding", json!({ "name": name })),
            Some(ns) => ("Role", "RoleBinding", json!({ "name": name, "namespace": ns })),
        };
        out.push(json!({ "apiVersion": rbac, "kind": role_kind, "metadata": metadata, "rules": rules }));
        out.push(json!({
            "apiVersion": rbac,
            "kind": binding_kind,
            "metadata": metadata,
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name },
            "subjects": subjects,
        }));
    }
    out
}

/// Whether `name` can name a ServiceAccount and, with `-builds` added, a Role: a DNS subdomain.
pub fn check_object_name(name: &str) -> Result<(), ClusterError> {
    let valid = !name.is_empty()
        && name.len() + "-builds".len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid { Ok(()) } else { Err(ClusterError::ObjectName) }
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
