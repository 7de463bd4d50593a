//! What a pod template may not set, for `check`. Without `allow_privileged` on the pool a template
//! gets nothing Kubernetes' Pod Security "baseline" or "restricted" profile refuses, no way to the
//! build's registry credentials and no identity of its own; with it, all of that is the operator's
//! call. Ephemeral containers are refused either way: an API server refuses a pod created with them.
//!
//! The checks read the template as JSON, whatever its shape: a field of the wrong type is the typed
//! validation's to report, never a panic here.

use std::fmt;

use serde_json::Value;

use super::item_path;

/// Where a template is used, as far as its refusals depend on it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allowance<'a> {
    /// The pool's `allow_privileged`.
    pub privileged: bool,
    /// The Secrets holding the build's registry credentials wherever the template may be used
    /// (`docker_config_secret`, `image_pull_secrets`).
    pub credential_secrets: &'a [String],
}

/// One field a template may not set, by its path as a user would write it, e.g.
/// `spec.containers[name=sidecar].securityContext.privileged`, `spec.volumes[name=host].hostPath`,
/// with why and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub why: String,
    pub fix: Fix,
}

/// What makes a refused template acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fix {
    /// Remove the field, or allow privileged templates on the pool.
    Remove,
    /// Set the field to this (it is missing or has another value), or allow privileged templates.
    Set(&'static str),
    /// Remove the field and set this pool key instead, or allow privileged templates.
    PoolKey(&'static str),
    /// Remove the field: nothing allows it.
    RemoveAlways,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const OR_ALLOW: &str = "or set allow_privileged = true on the pool";
        write!(f, "{}: {}; ", self.field, self.why)?;
        match self.fix {
            Fix::Remove => write!(f, "remove it, {OR_ALLOW}"),
            Fix::Set(value) => write!(f, "set it to {value}, {OR_ALLOW}"),
            Fix::PoolKey(key) => write!(f, "remove it and set {key} on the pool instead, {OR_ALLOW}"),
            Fix::RemoveAlways => write!(f, "remove it (allow_privileged does not allow it either)"),
        }
    }
}

const BASELINE: &str = "Pod Security \"baseline\" refuses it";
const RESTRICTED: &str = "Pod Security \"restricted\" refuses it";
const RESTRICTED_REQUIRES: &str = "Pod Security \"restricted\" requires it";
const CREDENTIALS: &str = "it reaches the build's registry credentials";
const IDENTITY: &str = "it gives the build pod an identity of its own";

/// The containers of the build pod: a template's container by one of these names tunes it, so
/// whatever it adds runs in the build's own container.
const BUILD_CONTAINERS: &[&str] = &["build", "rebase", "source"];
/// The build's containers that mount the registry credentials at `/docker-config`.
const CREDENTIAL_HOLDERS: &[&str] = &["build", "rebase"];
/// The volume types Pod Security "restricted" allows.
const RESTRICTED_VOLUMES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];
/// The sysctls Pod Security "baseline" allows: namespaced, and isolated from other pods.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
/// The SELinux types Pod Security "baseline" allows.
const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// Every field of `template` that `allowance` does not allow: the pod's, its volumes', then each
/// init container's and container's.
pub fn refusals(template: &Value, allowance: &Allowance<'_>) -> Vec<Refusal> {
    let mut found = Found::default();
    let spec = template.get("spec").unwrap_or(&Value::Null);
    for (i, container) in items(spec, "ephemeralContainers") {
        found.refuse(
            item_path("spec.ephemeralContainers", i, container),
            "a pod is created without ephemeral containers (an API server refuses them on create; `kubectl debug` adds them to a running pod)",
            Fix::RemoveAlways,
        );
    }
    if allowance.privileged {
        return found.0;
    }
    annotations(&mut found, template);
    pod(&mut found, spec);
    let secret_volumes = volumes(&mut found, spec, allowance.credential_secrets);
    for list in ["initContainers", "containers"] {
        for (i, c) in items(spec, list) {
            let at = item_path(&format!("spec.{list}"), i, c);
            container(&mut found, &at, c, &secret_volumes, allowance.credential_secrets);
        }
    }
    found.0
}

#[derive(Default)]
struct Found(Vec<Refusal>);

impl Found {
    fn refuse(&mut self, field: String, why: impl Into<String>, fix: Fix) {
        self.0.push(Refusal { field, why: why.into(), fix });
    }
}

fn items<'a>(parent: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    parent.get(key).and_then(Value::as_array).into_iter().flatten().enumerate()
}

fn is_true(value: Option<&Value>) -> bool {
    value == Some(&Value::Bool(true))
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

/// AppArmor and seccomp as the older annotations set them (the kubelet still reads AppArmor's).
fn annotations(found: &mut Found, template: &Value) {
    let Some(annotations) = template.get("metadata").and_then(|m| m.get("annotations")).and_then(Value::as_object)
    else {
        return;
    };
    for (key, value) in annotations {
        let value = value.as_str().unwrap_or_default();
        let field = format!("metadata.annotations.{key}");
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && value != "runtime/default"
            && !value.starts_with("localhost/")
        {
            found.refuse(
                field,
                format!("{BASELINE}: AppArmor {value:?} takes the container out of its profile"),
                Fix::Set("runtime/default"),
            );
        } else if (key == "seccomp.security.alpha.kubernetes.io/pod"
            || key.starts_with("container.seccomp.security.alpha.kubernetes.io/"))
            && value == "unconfined"
        {
            found.refuse(
                field,
                format!("{BASELINE}: an unconfined container may make any system call"),
                Fix::Set("runtime/default"),
            );
        }
    }
}

fn pod(found: &mut Found, spec: &Value) {
    for (key, why) in [
        ("hostNetwork", "the pod would share the node's network namespace"),
        ("hostPID", "the pod would see and signal the node's processes"),
        ("hostIPC", "the pod would share the node's IPC namespace"),
    ] {
        if is_true(spec.get(key)) {
            found.refuse(format!("spec.{key}"), format!("{BASELINE}: {why}"), Fix::Remove);
        }
    }
    if is_true(spec.get("shareProcessNamespace")) {
        found.refuse(
            "spec.shareProcessNamespace".into(),
            format!(
                "{CREDENTIALS}: every container would see the build's processes, and its /docker-config through /proc"
            ),
            Fix::Remove,
        );
    }
    if text(spec.get("nodeName")).is_some_and(|n| !n.is_empty()) {
        found.refuse(
            "spec.nodeName".into(),
            "it places the pod on a node by name, past the scheduler, its taints and its quotas",
            Fix::PoolKey("node_selector"),
        );
    }
    if let Some(class) = text(spec.get("priorityClassName")).filter(|c| c.starts_with("system-")) {
        found.refuse(
            "spec.priorityClassName".into(),
            format!("{class} is a system priority class: a build would preempt the cluster's own components"),
            Fix::Remove,
        );
    }
    for key in ["serviceAccountName", "serviceAccount"] {
        if text(spec.get(key)).is_some_and(|n| !n.is_empty()) {
            found.refuse(
                format!("spec.{key}"),
                format!("{IDENTITY} (a service account)"),
                Fix::PoolKey("service_account"),
            );
        }
    }
    if is_true(spec.get("automountServiceAccountToken")) {
        found.refuse(
            "spec.automountServiceAccountToken".into(),
            format!("{IDENTITY}: a service account token in every container"),
            Fix::Remove,
        );
    }
    if let Some(context) = spec.get("securityContext") {
        security_context(found, "spec.securityContext", context);
        for (i, sysctl) in items(context, "sysctls") {
            let name = text(sysctl.get("name")).unwrap_or_default();
            if !SAFE_SYSCTLS.contains(&name) {
                found.refuse(
                    format!("{}.name", item_path("spec.securityContext.sysctls", i, sysctl)),
                    format!("{BASELINE}: {name:?} is not one of the safe sysctls ({})", SAFE_SYSCTLS.join(", ")),
                    Fix::Remove,
                );
            }
        }
    }
}

/// The volumes' refusals; returns the names of the volumes that carry a Secret.
fn volumes<'a>(found: &mut Found, spec: &'a Value, credentials: &[String]) -> Vec<&'a str> {
    let mut secret_volumes = Vec::new();
    let is_credentials = |name: Option<&str>| name.is_some_and(|n| credentials.iter().any(|c| c == n));
    for (i, volume) in items(spec, "volumes") {
        let at = item_path("spec.volumes", i, volume);
        let Some(fields) = volume.as_object() else { continue };
        let mut carries_secret = false;
        for (key, source) in fields.iter().filter(|(k, v)| *k != "name" && !v.is_null()) {
            if key == "hostPath" {
                found.refuse(
                    format!("{at}.hostPath"),
                    format!("{BASELINE}: it mounts the node's own filesystem"),
                    Fix::Remove,
                );
            } else if !RESTRICTED_VOLUMES.contains(&key.as_str()) {
                found.refuse(
                    format!("{at}.{key}"),
                    format!("{RESTRICTED}: a {key} volume (it allows {})", RESTRICTED_VOLUMES.join(", ")),
                    Fix::Remove,
                );
            } else if key == "secret" {
                carries_secret = true;
                if is_credentials(text(source.get("secretName"))) {
                    found.refuse(
                        format!("{at}.secret.secretName"),
                        format!("{CREDENTIALS} (the build mounts them into its own container only)"),
                        Fix::Remove,
                    );
                }
            } else if key == "projected" {
                for (j, projection) in items(source, "sources") {
                    let at = format!("{at}.projected.sources[{j}]");
                    if projection.get("serviceAccountToken").is_some_and(|t| !t.is_null()) {
                        found.refuse(
                            format!("{at}.serviceAccountToken"),
                            format!("{IDENTITY} (a service account token)"),
                            Fix::Remove,
                        );
                    }
                    if let Some(secret) = projection.get("secret").filter(|s| !s.is_null()) {
                        carries_secret = true;
                        if is_credentials(text(secret.get("name"))) {
                            found.refuse(
                                format!("{at}.secret.name"),
                                format!("{CREDENTIALS} (the build mounts them into its own container only)"),
                                Fix::Remove,
                            );
                        }
                    }
                }
            }
        }
        if carries_secret && let Some(name) = text(volume.get("name")) {
            secret_volumes.push(name);
        }
    }
    secret_volumes
}

fn container(found: &mut Found, at: &str, c: &Value, secret_volumes: &[&str], credentials: &[String]) {
    let name = text(c.get("name")).unwrap_or_default();
    let context = c.get("securityContext").filter(|s| s.is_object());
    if let Some(context) = context {
        let at = format!("{at}.securityContext");
        security_context(found, &at, context);
        if is_true(context.get("privileged")) {
            found.refuse(
                format!("{at}.privileged"),
                format!("{BASELINE}: a privileged container has the node's devices"),
                Fix::Remove,
            );
        }
        let added: Vec<&str> = context
            .get("capabilities")
            .and_then(|c| c.get("add"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| c.as_str().unwrap_or("?"))
            .collect();
        if added.iter().any(|c| *c != "NET_BIND_SERVICE") {
            found.refuse(
                format!("{at}.capabilities.add"),
                format!(
                    "{RESTRICTED}: {} widen what the container may do (it allows NET_BIND_SERVICE only)",
                    added.join(", ")
                ),
                Fix::Remove,
            );
        }
        if is_true(context.get("allowPrivilegeEscalation")) {
            found.refuse(
                format!("{at}.allowPrivilegeEscalation"),
                format!("{RESTRICTED}: a setuid program could gain root"),
                Fix::Set("false"),
            );
        }
        if text(context.get("procMount")).is_some_and(|p| p != "Default") {
            found.refuse(
                format!("{at}.procMount"),
                format!("{BASELINE}: an unmasked /proc shows the node's kernel"),
                Fix::Set("Default"),
            );
        }
    }
    // A container with an image may run as the template wrote it: beside the build, or as a build
    // container in the other kind of build pod (`rebase` in a rebuild's). Restricted wants these set;
    // the build pod sets seccomp and runAsNonRoot for every container itself.
    if c.get("image").is_some_and(|i| !i.is_null()) {
        let context_at = format!("{at}.securityContext");
        if context.and_then(|s| s.get("allowPrivilegeEscalation")).is_none_or(Value::is_null) {
            found.refuse(
                format!("{context_at}.allowPrivilegeEscalation"),
                format!("{RESTRICTED_REQUIRES} false: unset, a setuid program could gain root"),
                Fix::Set("false"),
            );
        }
        let drop = context.and_then(|s| s.get("capabilities")).and_then(|c| c.get("drop")).and_then(Value::as_array);
        if !drop.is_some_and(|d| d.iter().any(|c| c == "ALL")) {
            found.refuse(
                format!("{context_at}.capabilities.drop"),
                format!(
                    "{RESTRICTED_REQUIRES} to hold ALL: without, the container keeps the runtime's default capabilities"
                ),
                Fix::Set("[ALL]"),
            );
        }
    }
    for (j, port) in items(c, "ports") {
        if port.get("hostPort").and_then(Value::as_i64).is_some_and(|p| p != 0) {
            found.refuse(
                format!("{at}.ports[{j}].hostPort"),
                format!("{BASELINE}: it takes a port of the node's own"),
                Fix::Remove,
            );
        }
    }
    if BUILD_CONTAINERS.contains(&name) {
        build_container(found, at, c);
    }
    let holder = CREDENTIAL_HOLDERS.contains(&name);
    for (j, mount) in items(c, "volumeMounts") {
        let volume = text(mount.get("name")).unwrap_or_default();
        if holder && secret_volumes.contains(&volume) {
            let path = text(mount.get("mountPath")).unwrap_or_default();
            let field = if path.is_empty() {
                format!("{at}.volumeMounts[{j}]")
            } else {
                format!("{at}.volumeMounts[mountPath={path}]")
            };
            found.refuse(
                field,
                format!("a Secret in the build's container, next to its registry credentials (volume {volume:?})"),
                Fix::Remove,
            );
        }
    }
    secret_references(found, at, c, holder, credentials);
}

/// What a template adds to a build container runs next to its `/docker-config`: no command, file
/// in the builder's place or loader variable of the template's own, and it stays the container the
/// build made it.
fn build_container(found: &mut Found, at: &str, c: &Value) {
    if c.get("lifecycle").is_some_and(|l| !l.is_null()) {
        found.refuse(
            format!("{at}.lifecycle"),
            "a hook would run the template's own command in the build's container, next to its registry credentials",
            Fix::Remove,
        );
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if c.get(probe).and_then(|p| p.get("exec")).is_some_and(|e| !e.is_null()) {
            found.refuse(format!("{at}.{probe}.exec"), "the probe would run the template's own command in the build's container, next to its registry credentials", Fix::Remove);
        }
    }
    if c.get("restartPolicy").is_some_and(|r| !r.is_null()) {
        found.refuse(
            format!("{at}.restartPolicy"),
            "it would make the build's container a restarting sidecar",
            Fix::Remove,
        );
    }
    for (_, mount) in items(c, "volumeMounts") {
        let path = text(mount.get("mountPath")).unwrap_or_default();
        if under_cnb(path) {
            found.refuse(
                format!("{at}.volumeMounts[mountPath={path}]"),
                "the template's own files would stand in for the builder's lifecycle and buildpacks, which run next to the registry credentials",
                Fix::Remove,
            );
        }
    }
    for (j, env) in items(c, "env") {
        if let Some(name) = text(env.get("name")).filter(|n| LOADER_VARIABLES.contains(n)) {
            found.refuse(
                item_path(&format!("{at}.env"), j, env),
                format!("{name} would load the template's own code into the build's programs, next to its registry credentials"),
                Fix::Remove,
            );
        }
    }
    for (j, from) in items(c, "envFrom") {
        if from.get("configMapRef").is_some_and(|r| !r.is_null()) {
            found.refuse(
                format!("{at}.envFrom[{j}].configMapRef"),
                format!("the names it sets are not known to check, and {} among them would load the template's own code next to the registry credentials (name each variable in env instead)", LOADER_VARIABLES.join(", ")),
                Fix::Remove,
            );
        }
    }
}

/// What makes the dynamic loader run code of someone else's choosing in every program it starts.
const LOADER_VARIABLES: &[&str] = &["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"];

/// Whether a mount path is `/cnb` or under it, as the kernel would resolve `.` and `..`.
fn under_cnb(path: &str) -> bool {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => _ = parts.pop(),
            part => parts.push(part),
        }
    }
    parts.first() == Some(&"cnb")
}

/// Secrets through the environment: none into the build's container, and the registry credentials'
/// into none.
fn secret_references(found: &mut Found, at: &str, c: &Value, holder: bool, credentials: &[String]) {
    let why = |name: Option<&str>| -> Option<String> {
        if name.is_some_and(|n| credentials.iter().any(|c| c == n)) {
            Some(CREDENTIALS.into())
        } else if holder {
            Some("a Secret in the build's container, next to its registry credentials".into())
        } else {
            None
        }
    };
    for (j, env) in items(c, "env") {
        let Some(secret) = env.get("valueFrom").and_then(|v| v.get("secretKeyRef")).filter(|s| !s.is_null()) else {
            continue;
        };
        if let Some(why) = why(text(secret.get("name"))) {
            found.refuse(
                format!("{}.valueFrom.secretKeyRef", item_path(&format!("{at}.env"), j, env)),
                why,
                Fix::Remove,
            );
        }
    }
    for (j, from) in items(c, "envFrom") {
        let Some(secret) = from.get("secretRef").filter(|s| !s.is_null()) else { continue };
        if let Some(why) = why(text(secret.get("name"))) {
            found.refuse(format!("{at}.envFrom[{j}].secretRef"), why, Fix::Remove);
        }
    }
}

/// The fields a pod's and a container's securityContext share.
fn security_context(found: &mut Found, at: &str, context: &Value) {
    if context.get("runAsUser").and_then(Value::as_i64) == Some(0) {
        found.refuse(format!("{at}.runAsUser"), format!("{RESTRICTED}: 0 runs as root"), Fix::Remove);
    }
    if context.get("runAsNonRoot") == Some(&Value::Bool(false)) {
        found.refuse(
            format!("{at}.runAsNonRoot"),
            format!("{RESTRICTED}: it lets the image run as root"),
            Fix::Set("true"),
        );
    }
    if text(context.get("seccompProfile").and_then(|s| s.get("type"))) == Some("Unconfined") {
        found.refuse(
            format!("{at}.seccompProfile.type"),
            format!("{BASELINE}: an unconfined container may make any system call"),
            Fix::Set("RuntimeDefault"),
        );
    }
    if text(context.get("appArmorProfile").and_then(|s| s.get("type"))) == Some("Unconfined") {
        found.refuse(
            format!("{at}.appArmorProfile.type"),
            format!("{BASELINE}: it takes the container out of AppArmor"),
            Fix::Set("RuntimeDefault"),
        );
    }
    if is_true(context.get("windowsOptions").and_then(|w| w.get("hostProcess"))) {
        found.refuse(
            format!("{at}.windowsOptions.hostProcess"),
            format!("{BASELINE}: a HostProcess container runs on the Windows node itself"),
            Fix::Remove,
        );
    }
    if let Some(selinux) = context.get("seLinuxOptions").filter(|s| s.is_object()) {
        let at = format!("{at}.seLinuxOptions");
        if let Some(kind) = text(selinux.get("type")).filter(|t| !SELINUX_TYPES.contains(t)) {
            found.refuse(
                format!("{at}.type"),
                format!("{BASELINE}: SELinux type {kind:?} (it allows {})", SELINUX_TYPES[1..].join(", ")),
                Fix::Remove,
            );
        }
        for key in ["user", "role"] {
            if text(selinux.get(key)).is_some_and(|v| !v.is_empty()) {
                found.refuse(format!("{at}.{key}"), format!("{BASELINE}: a custom SELinux {key}"), Fix::Remove);
            }
        }
    }
}

#[cfg(test)]
mod tests;
