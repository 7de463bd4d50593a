//! Pod templates (`pod_template = "path/to/template.yaml"` on a pool or an image): a user's
//! PodTemplateSpec laid under the build Job's pod, for what builder-monitor has no setting of its own
//! (sidecars, extra volumes, environment, scheduling). [`read`] and [`refusals`] serve `check`
//! (what a template may not set, by Pod Security's profiles and the build's credentials);
//! [`kpack_fields`] maps a template onto what kpack's Build can carry; [`merge`] builds the pod.
//!
//! The merge is k8s-openapi's `DeepMerge` (Kubernetes' list-map keys), with its atomic lists
//! (tolerations) and maps (nodeSelector) merged by hand, and the build's own fields put back after
//! it: a template adds to the build pod, it never changes what runs or with which credentials.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use k8s_openapi::DeepMerge as _;
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Toleration};
use serde_json::Value;

use super::{KubeValueError, k8s_typed};

mod refusals;
pub use refusals::{Allowance, Fix, Refusal, refusals};

/// A template is a page of YAML: anything this big is a wrong path (a log, an image), not a template.
pub const MAX_BYTES: usize = 1 << 20;

/// Why a pod template cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("{origin}: {source}")]
    Read { origin: String, source: std::io::Error },
    #[error("{origin}: {size} bytes, more than the {MAX_BYTES} a pod template may have")]
    TooLarge { origin: String, size: u64 },
    #[error("{origin}: {}{message}", position(.line, .column))]
    Syntax { origin: String, line: Option<u64>, column: Option<u64>, message: String },
    #[error("{origin}: {message}")]
    NotATemplate { origin: String, message: String },
    #[error("{origin}: unknown field `{field}`")]
    UnknownField { origin: String, field: String },
    #[error("{origin}: {field}: {message}")]
    Invalid { origin: String, field: String, message: String },
}

impl TemplateError {
    /// The field the error is about, by its path in the template, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::UnknownField { field, .. } | Self::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

fn position(line: &Option<u64>, column: &Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!("line {line}, column {column}: "),
        (Some(line), None) => format!("line {line}: "),
        _ => String::new(),
    }
}

/// Reads a PodTemplateSpec from a YAML or JSON file (a document with `metadata`/`spec`; a bare
/// `kind: PodTemplate` object with a `template:` field is also accepted and its template taken).
/// Errors name the file and (for YAML syntax) line/column; unknown fields are named by path.
/// Bounded: refuse files over 1 MiB before parsing.
pub fn read(path: &Path) -> Result<Value, TemplateError> {
    let origin = path.display().to_string();
    let io = |source| TemplateError::Read { origin: origin.clone(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_BYTES as u64 {
        return Err(TemplateError::TooLarge { origin, size });
    }
    // The file may grow between the size check and the read: the read is bounded too.
    let mut text = String::new();
    file.take(MAX_BYTES as u64 + 1).read_to_string(&mut text).map_err(io)?;
    parse(&text, &origin)
}

/// Same from text (for tests and for callers that already read the file); `origin` is used in messages.
pub fn parse(text: &str, origin: &str) -> Result<Value, TemplateError> {
    if text.len() > MAX_BYTES {
        return Err(TemplateError::TooLarge { origin: origin.into(), size: text.len() as u64 });
    }
    let not_a_template = |message: String| TemplateError::NotATemplate { origin: origin.into(), message };
    let document = document(text, origin)?;
    let Value::Object(mut object) = document else {
        return Err(not_a_template(format!(
            "the document is {}, not a PodTemplateSpec (an object with metadata and spec)",
            shape(&document)
        )));
    };
    let (template, prefix) = match object.get("kind") {
        None => (Value::Object(object), ""),
        Some(Value::String(kind)) if kind == "PodTemplate" => {
            // PodTemplate's own metadata names the object in a cluster; only its template is used.
            if let Some(key) =
                object.keys().find(|k| !["apiVersion", "kind", "metadata", "template"].contains(&k.as_str()))
            {
                return Err(TemplateError::UnknownField { origin: origin.into(), field: key.clone() });
            }
            match object.remove("template") {
                Some(template @ Value::Object(_)) => (template, "template."),
                _ => return Err(not_a_template("a PodTemplate without a template object".into())),
            }
        }
        Some(kind) => {
            return Err(not_a_template(format!(
                "kind {kind}: a pod template file holds a PodTemplateSpec (metadata, spec) or a kind: PodTemplate"
            )));
        }
    };
    let typed: PodTemplateSpec = typed(&template, origin, prefix)?;
    if let Some(field) = missing_merge_key(&typed) {
        return Err(TemplateError::Invalid {
            origin: origin.into(),
            field: format!("{prefix}{field}"),
            message: "missing (the list is merged with the build pod's by this key)".into(),
        });
    }
    // Round-tripped through the typed spec: callers see one spelling (no nulls) whatever was written.
    serde_json::to_value(&typed).map_err(|e| not_a_template(e.to_string()))
}

fn document(text: &str, origin: &str) -> Result<Value, TemplateError> {
    let syntax = |line, column, message| TemplateError::Syntax { origin: origin.into(), line, column, message };
    let text = text.trim_start_matches('\u{feff}');
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(TemplateError::NotATemplate { origin: origin.into(), message: "the file is empty".into() });
    }
    // JSON's own parser for JSON: its positions are exact, and tab indentation is fine there.
    // `{ spec: … }` (unquoted keys) is YAML's flow style, for the YAML parser.
    let json = trimmed.strip_prefix('{').is_some_and(|rest| rest.trim_start().starts_with(['"', '}']));
    if json {
        return serde_json::from_str(text).map_err(|e| {
            let message = e.to_string();
            let message = message.rsplit_once(" at line ").map_or(message.as_str(), |(m, _)| m).to_string();
            syntax(Some(e.line() as u64), Some(e.column() as u64), message)
        });
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| {
        let location = e.location();
        let message = match e.without_snippet() {
            serde_saphyr::Error::MultipleDocuments { .. } => {
                "a second YAML document (a template file holds one)".into()
            }
            e => e.to_string(),
        };
        // The plain message ends with its own position; ours is put first, once.
        let message = message.rsplit_once(" at line ").map_or(message.as_str(), |(m, _)| m).to_string();
        syntax(location.map(|l| l.line()), location.map(|l| l.column()), message)
    })
}

fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// `value` as `T`, errors naming the field by its path (`prefix` is where `value` sits in the file).
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(
    value: &Value,
    origin: &str,
    prefix: &str,
) -> Result<T, TemplateError> {
    k8s_typed::<T>(value).map_err(|e| match e {
        KubeValueError::UnknownField(path) => {
            TemplateError::UnknownField { origin: origin.into(), field: format!("{prefix}{path}") }
        }
        KubeValueError::Shape(error) => {
            // serde_json's message has no path; a second, path-tracking pass finds it.
            let path = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Err(e) => e.path().to_string(),
                Ok(_) => ".".into(),
            };
            let field = match path.as_str() {
                "." => prefix.trim_end_matches('.').to_string(),
                path => format!("{prefix}{path}"),
            };
            let field = if field.is_empty() { "(the document)".into() } else { field };
            TemplateError::Invalid { origin: origin.into(), field, message: error.to_string() }
        }
    })
}

/// k8s-openapi reads a missing name as "", and DeepMerge would then merge every nameless item into one.
fn missing_merge_key(template: &PodTemplateSpec) -> Option<String> {
    let spec = template.spec.as_ref()?;
    for (list, containers) in
        [("containers", &spec.containers[..]), ("initContainers", or_empty(&spec.init_containers))]
    {
        for (i, c) in containers.iter().enumerate() {
            if c.name.is_empty() {
                return Some(format!("spec.{list}[{i}].name"));
            }
            let at = format!("spec.{list}[name={}]", c.name);
            if let Some(j) = or_empty(&c.env).iter().position(|e| e.name.is_empty()) {
                return Some(format!("{at}.env[{j}].name"));
            }
            if let Some(j) = or_empty(&c.volume_mounts).iter().position(|m| m.mount_path.is_empty()) {
                return Some(format!("{at}.volumeMounts[{j}].mountPath"));
            }
        }
    }
    if let Some(i) = or_empty(&spec.ephemeral_containers).iter().position(|c| c.name.is_empty()) {
        return Some(format!("spec.ephemeralContainers[{i}].name"));
    }
    if let Some(i) = or_empty(&spec.volumes).iter().position(|v| v.name.is_empty()) {
        return Some(format!("spec.volumes[{i}].name"));
    }
    if let Some(i) = or_empty(&spec.image_pull_secrets).iter().position(|s| s.name.is_empty()) {
        return Some(format!("spec.imagePullSecrets[{i}].name"));
    }
    None
}

fn or_empty<T>(list: &Option<Vec<T>>) -> &[T] {
    list.as_deref().unwrap_or_default()
}

/// `list[name=x]` as a user finds the item in the file, `list[3]` when it has no name.
fn item_path(list: &str, index: usize, item: &Value) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => format!("{list}[name={name}]"),
        _ => format!("{list}[{index}]"),
    }
}

/// What a kpack Build can carry from a template: the fields are those of kpack's Build spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KpackFields {
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Value>,
    pub affinity: Option<Value>,
    pub runtime_class_name: Option<String>,
    pub scheduler_name: Option<String>,
    pub priority_class_name: Option<String>,
    pub service_account_name: Option<String>,
    /// From the single container the template may have (any name): env and resources.
    pub env: Vec<Value>,
    pub resources: Option<Value>,
}

/// The template as kpack Build fields, or every field kpack's Build cannot carry (paths as in
/// Refusal, e.g. `spec.volumes`, `spec.containers[name=build].volumeMounts`, `metadata.labels`,
/// a second container). Empty metadata is fine.
pub fn kpack_fields(template: &Value) -> Result<KpackFields, Vec<String>> {
    let mut fields = KpackFields::default();
    let mut refused = Vec::new();
    let Some(object) = template.as_object() else {
        return Err(vec![format!("(the template is {}, not an object)", shape(template))]);
    };
    for (key, value) in object {
        match (key.as_str(), value) {
            (_, value) if unset(value) => {}
            ("metadata", Value::Object(metadata)) => {
                refused.extend(metadata.iter().filter(|(_, v)| !unset(v)).map(|(k, _)| format!("metadata.{k}")));
            }
            ("spec", Value::Object(spec)) => {
                for (key, value) in spec {
                    kpack_spec_field(&mut fields, &mut refused, key, value);
                }
            }
            (key, _) => refused.push(key.to_string()),
        }
    }
    if refused.is_empty() { Ok(fields) } else { Err(refused) }
}

fn kpack_spec_field(fields: &mut KpackFields, refused: &mut Vec<String>, key: &str, value: &Value) {
    if unset(value) {
        return;
    }
    let text = value.as_str().map(String::from);
    let taken = match (key, value) {
        ("nodeSelector", Value::Object(selector)) => {
            for (k, v) in selector {
                match v.as_str() {
                    Some(v) => _ = fields.node_selector.insert(k.clone(), v.into()),
                    None => refused.push(format!("spec.nodeSelector.{k}")),
                }
            }
            true
        }
        ("tolerations", Value::Array(list)) => {
            fields.tolerations.extend(list.iter().cloned());
            true
        }
        ("affinity", Value::Object(_)) => {
            fields.affinity = Some(value.clone());
            true
        }
        ("runtimeClassName", _) if text.is_some() => {
            fields.runtime_class_name = text;
            true
        }
        ("schedulerName", _) if text.is_some() => {
            fields.scheduler_name = text;
            true
        }
        ("priorityClassName", _) if text.is_some() => {
            fields.priority_class_name = text;
            true
        }
        ("serviceAccountName", _) if text.is_some() => {
            fields.service_account_name = text;
            true
        }
        ("containers", Value::Array(containers)) => {
            for (i, container) in containers.iter().enumerate() {
                let at = item_path("spec.containers", i, container);
                // kpack runs the lifecycle's containers itself: one set of env and resources is all
                // its Build takes, whatever the container is called.
                match container.as_object() {
                    Some(container) if i == 0 => {
                        for (k, v) in container.iter().filter(|(k, v)| *k != "name" && !unset(v)) {
                            match (k.as_str(), v) {
                                ("env", Value::Array(env)) => fields.env.extend(env.iter().cloned()),
                                ("resources", Value::Object(_)) => fields.resources = Some(v.clone()),
                                _ => refused.push(format!("{at}.{k}")),
                            }
                        }
                    }
                    _ => refused.push(at),
                }
            }
            true
        }
        _ => false,
    };
    if !taken {
        refused.push(format!("spec.{key}"));
    }
}

/// Null, `[]` and `{}` say nothing (the typed round trip writes `containers: []`); `false` does
/// (`automountServiceAccountToken: false` is not the default).
fn unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// The build pod's PodTemplateSpec after merging: `templates` (pool's first, then the image's;
/// each already validated) merged in order with DeepMerge, then `build` (the PodTemplateSpec
/// builder-monitor generates: metadata.labels, spec with containers/initContainers/volumes/
/// securityContext/serviceAccountName/scheduling fields) merged over them, tolerations
/// concatenated across layers (templates' first) without exact duplicates, nodeSelector merged
/// key by key (build wins), metadata labels/annotations merged key by key (build wins). Then the
/// build's own fields are put back exactly: for every container and init container that `build`
/// has, its `image`, `command`, `args` and `securityContext` replace what the templates set
/// (templates' extra env, resources, volumeMounts on other paths stay); the pod `securityContext`
/// and `serviceAccountName` (when build sets one), `restartPolicy` are build's. Volumes the build
/// defines (by name) are the build's exactly (a template cannot redirect the secret volume). The
/// result is checked by deserializing into k8s_openapi PodTemplateSpec.
///
/// Also: the build's env entries (by name) and volume mounts (by path) are its own exactly (DeepMerge
/// would keep a template's `valueFrom` beside the build's `value`, or its `subPath` in the build's
/// mount); the build's containers come first, its init containers keep their order (after the
/// templates' own); a template's container the build pod does not have and that has no image is
/// left out (it tunes the other kind of build pod: `build` versus `rebase`). The result is refused
/// when a container has no image, two containers share a name, or a mount names no volume.
pub fn merge(templates: &[&Value], build: &Value) -> Result<Value, TemplateError> {
    let layers = templates
        .iter()
        .enumerate()
        .map(|(i, t)| typed::<PodTemplateSpec>(t, &format!("pod template {}", i + 1), ""))
        .collect::<Result<Vec<_>, _>>()?;
    let build: PodTemplateSpec = typed(build, "build pod", "")?;
    let mut merged = PodTemplateSpec::default();
    for layer in &layers {
        merged.merge_from(layer.clone());
    }
    merged.merge_from(build.clone());

    let own = build.spec.clone().unwrap_or_default();
    let specs: Vec<&PodSpec> = layers.iter().chain([&build]).filter_map(|l| l.spec.as_ref()).collect();
    let spec = merged.spec.get_or_insert_default();
    // Both are atomic to DeepMerge: the build's list or map would replace every template's.
    let mut tolerations: Vec<Toleration> = Vec::new();
    for toleration in specs.iter().flat_map(|s| or_empty(&s.tolerations)) {
        if !tolerations.contains(toleration) {
            tolerations.push(toleration.clone());
        }
    }
    spec.tolerations = (!tolerations.is_empty()).then_some(tolerations);
    let selector: BTreeMap<String, String> =
        specs.iter().flat_map(|s| s.node_selector.iter().flatten()).map(|(k, v)| (k.clone(), v.clone())).collect();
    spec.node_selector = (!selector.is_empty()).then_some(selector);

    put_back(&mut spec.containers, &own.containers, true);
    let mut init = spec.init_containers.take().unwrap_or_default();
    put_back(&mut init, or_empty(&own.init_containers), false);
    spec.init_containers = (!init.is_empty()).then_some(init);
    for volume in or_empty(&own.volumes) {
        replace_by(&mut spec.volumes, volume, |a, b| a.name == b.name);
    }
    spec.security_context = own.security_context.clone();
    spec.restart_policy = own.restart_policy.clone();
    if own.service_account_name.is_some() {
        spec.service_account_name = own.service_account_name.clone();
        // The deprecated alias, from a template, would name another account beside the build's.
        spec.service_account = None;
    }
    if let Some((field, message)) = inconsistency(spec) {
        return Err(TemplateError::Invalid { origin: "the build pod with its pod templates".into(), field, message });
    }
    // The checked result: what is returned is what deserializes into a PodTemplateSpec.
    let value = serde_json::to_value(&merged).map_err(|e| TemplateError::Invalid {
        origin: "the build pod with its pod templates".into(),
        field: "(the document)".into(),
        message: e.to_string(),
    })?;
    typed::<PodTemplateSpec>(&value, "the build pod with its pod templates", "")?;
    Ok(value)
}

/// The build's containers as the build wrote them, where it matters: what runs, as whom, with which
/// env entries and mounts. Templates' other fields (resources, extra env and mounts) stay.
fn put_back(merged: &mut Vec<Container>, own: &[Container], own_first: bool) {
    for container in own {
        let Some(m) = merged.iter_mut().find(|c| c.name == container.name) else { continue };
        m.image.clone_from(&container.image);
        m.command.clone_from(&container.command);
        m.args.clone_from(&container.args);
        m.security_context.clone_from(&container.security_context);
        for env in or_empty(&container.env) {
            replace_by(&mut m.env, env, |a, b| a.name == b.name);
        }
        for mount in or_empty(&container.volume_mounts) {
            replace_by(&mut m.volume_mounts, mount, |a, b| a.mount_path == b.mount_path);
        }
    }
    let (mut mine, theirs): (Vec<_>, Vec<_>) = merged.drain(..).partition(|c| own.iter().any(|o| o.name == c.name));
    // DeepMerge leaves a build container a template names where the template had it: init
    // containers run in order, and `kubectl logs` without -c reads the first container.
    mine.sort_by_key(|c| own.iter().position(|o| o.name == c.name));
    let theirs = theirs.into_iter().filter(|c| c.image.as_deref().is_some_and(|i| !i.is_empty()));
    *merged = if own_first { mine.into_iter().chain(theirs).collect() } else { theirs.chain(mine).collect() };
}

fn replace_by<T: Clone>(list: &mut Option<Vec<T>>, item: &T, same: impl Fn(&T, &T) -> bool) {
    let list = list.get_or_insert_default();
    match list.iter_mut().find(|x| same(x, item)) {
        Some(slot) => *slot = item.clone(),
        None => list.push(item.clone()),
    }
}

/// What the API server would refuse in the merged pod, found here with the template's words.
fn inconsistency(spec: &PodSpec) -> Option<(String, String)> {
    let volumes: Vec<&str> = or_empty(&spec.volumes).iter().map(|v| v.name.as_str()).collect();
    let mut names = Vec::new();
    for (list, containers) in
        [("containers", &spec.containers[..]), ("initContainers", or_empty(&spec.init_containers))]
    {
        for c in containers {
            let at = format!("spec.{list}[name={}]", c.name);
            if names.contains(&c.name.as_str()) {
                return Some((at, "a second container of this name".into()));
            }
            names.push(&c.name);
            if c.image.as_deref().is_none_or(str::is_empty) {
                return Some((format!("{at}.image"), "no image".into()));
            }
            if let Some(mount) = or_empty(&c.volume_mounts).iter().find(|m| !volumes.contains(&m.name.as_str())) {
                return Some((
                    format!("{at}.volumeMounts[mountPath={}]", mount.mount_path),
                    format!("volume {:?} is not in the pod", mount.name),
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
