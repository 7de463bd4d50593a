//! Field ownership as the API server keeps it in `metadata.managedFields` (the structured-merge-diff
//! rules, for the shapes the daemon writes), and the merges of server-side apply and strategic
//! merge patch, which treat lists of named objects element by element.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    Field(String),
    /// An element of an associative list: its key field and the key's value as JSON text.
    Key(&'static str, String),
}

pub type Path = Vec<Step>;
pub type FieldSet = BTreeSet<Path>;

/// `.spec.template.spec.containers[name="app"].image`, as the API server prints a path.
pub fn display(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Field(f) => format!(".{f}"),
            Step::Key(k, v) => format!("[{k}={v}]"),
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

/// Who owns fields. As on the API server, an applier is one manager whatever API version it
/// applies with, an updater is one per API version, and each subresource has its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    /// Empty for an applier.
    pub api_version: String,
    /// `status`, or empty for the main resource.
    pub subresource: String,
}

impl ManagerId {
    pub fn apply(manager: &str, subresource: &str) -> Self {
        ManagerId {
            manager: manager.into(),
            operation: Operation::Apply,
            api_version: String::new(),
            subresource: subresource.into(),
        }
    }

    pub fn update(manager: &str, api_version: &str, subresource: &str) -> Self {
        ManagerId {
            manager: manager.into(),
            operation: Operation::Update,
            api_version: api_version.into(),
            subresource: subresource.into(),
        }
    }

    /// `"kubectl-set" using apps/v1`, the words of the API server's conflict messages.
    fn describe(&self) -> String {
        let mut text = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            text.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            text.push_str(&format!(" using {}", self.api_version));
        }
        text
    }
}

#[derive(Debug, Clone, Default)]
pub struct Owned {
    pub fields: FieldSet,
    pub api_version: String,
    pub time: String,
}

/// An object's managers and the fields each owns.
pub type Managed = BTreeMap<ManagerId, Owned>;

/// The key field of an associative list, by the list's field name, as the Kubernetes schemas
/// declare them (`x-kubernetes-list-map-keys`, `patchMergeKey`); none when an element lacks it,
/// and then the list is atomic.
pub fn list_key(field: &str, items: &[Value]) -> Option<&'static str> {
    let key = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "volumeMounts"
        | "imagePullSecrets" => "name",
        "ports" if items.iter().all(|i| i.get("containerPort").is_some()) => "containerPort",
        "ports" => "port",
        _ => return None,
    };
    items.iter().all(|i| i.get(key).is_some_and(|k| !k.is_null())).then_some(key)
}

/// The fields the server keeps for itself: never owned by anyone.
pub fn strip(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
                "deletionTimestamp",
            ] {
                meta.remove(f);
            }
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
    }
    v
}

/// The leaves of `value` (scalars, atomic lists, empty objects) and the elements of its
/// associative lists.
pub fn field_set(value: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    walk(value, &mut Vec::new(), &mut set);
    set
}

fn walk(value: &Value, path: &mut Path, set: &mut FieldSet) {
    let Value::Object(map) = value else { return };
    for (k, child) in map {
        if child.is_null() || k.starts_with('$') {
            continue;
        }
        path.push(Step::Field(k.clone()));
        match child {
            Value::Object(m) if !m.is_empty() => walk(child, path, set),
            Value::Array(items) if !items.is_empty() && list_key(k, items).is_some() => {
                let key = list_key(k, items).unwrap();
                for item in items {
                    path.push(Step::Key(key, item[key].to_string()));
                    set.insert(path.clone());
                    walk(item, path, set);
                    path.pop();
                }
            }
            _ => {
                set.insert(path.clone());
            }
        }
        path.pop();
    }
}

/// Whether a list element's `key` field has the value `json` (JSON text).
fn key_is(item: &Value, key: &str, json: &str) -> bool {
    item.get(key).and_then(|x| serde_json::to_string(x).ok()).is_some_and(|t| t == json)
}

pub fn at<'a>(value: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut here = value;
    for step in path {
        here = match step {
            Step::Field(f) => here.as_object()?.get(f).filter(|v| !v.is_null())?,
            Step::Key(k, v) => here.as_array()?.iter().find(|i| key_is(i, k, v))?,
        };
    }
    Some(here)
}

/// Whether the field at `path` was added or given another value (the server's "added or
/// modified"; an object is compared by presence, its fields on their own).
fn changed(old: &Value, new: &Value, path: &[Step]) -> bool {
    match (at(old, path), at(new, path)) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(Value::Object(_)), Some(Value::Object(_))) => false,
        (Some(a), Some(b)) => a != b,
    }
}

fn remove(value: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut here = value;
    for step in parent {
        let next = match step {
            Step::Field(f) => here.as_object_mut().and_then(|m| m.get_mut(f)),
            Step::Key(k, v) => here.as_array_mut().and_then(|a| a.iter_mut().find(|i| key_is(i, k, v))),
        };
        let Some(next) = next else { return };
        here = next;
    }
    match last {
        Step::Field(f) => {
            if let Some(m) = here.as_object_mut() {
                m.remove(f);
            }
        }
        Step::Key(k, v) => {
            if let Some(a) = here.as_array_mut() {
                a.retain(|i| !key_is(i, k, v));
            }
        }
    }
}

/// Drops what no longer exists in `object` from every manager, and the managers left with nothing.
pub fn retain_existing(managed: &mut Managed, object: &Value) {
    for owned in managed.values_mut() {
        owned.fields.retain(|p| at(object, p).is_some());
    }
    managed.retain(|_, owned| !owned.fields.is_empty());
}

/// An update (create, replace, merge or strategic merge patch) by `id`: it takes every field it
/// added or changed, from whoever owned it, as the server does without asking.
pub fn update(managed: &mut Managed, old: &Value, new: &Value, id: ManagerId, time: &str) {
    let (old, new) = (strip(old), strip(new));
    let taken: FieldSet = field_set(&new).into_iter().filter(|p| changed(&old, &new, p)).collect();
    if !taken.is_empty() {
        for (other, owned) in managed.iter_mut() {
            if *other != id {
                owned.fields.retain(|p| !taken.contains(p));
            }
        }
        let api_version = id.api_version.clone();
        let owned = managed.entry(id).or_default();
        owned.fields.extend(taken);
        owned.api_version = api_version;
        owned.time = time.to_string();
    }
    retain_existing(managed, &new);
}

/// A field another manager owns and an apply would change.
pub type Conflict = (ManagerId, Path);

/// Server-side apply of `config` (already stripped of what the server keeps) over `live` by `id`:
/// the merged object, or the conflicts when `force` is off. Fields `id` applied last time and no
/// longer applies go, unless another manager owns them (or something under them).
pub fn apply(
    managed: &mut Managed,
    live: &Value,
    config: &Value,
    id: &ManagerId,
    api_version: &str,
    time: &str,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let set = field_set(config);
    let mut next = live.clone();
    apply_merge(&mut next, config);
    if let Some(last) = managed.get(id) {
        let kept = |p: &Path| {
            set.iter()
                .chain(managed.iter().filter(|(m, _)| *m != id).flat_map(|(_, o)| o.fields.iter()))
                .any(|q| q.starts_with(p))
        };
        // Deepest first, so an element's own fields go before the element is judged.
        for p in last.fields.iter().rev().filter(|p| !set.contains(*p)) {
            if !kept(p) {
                remove(&mut next, p);
            }
        }
    }
    let conflicts: Vec<Conflict> = managed
        .iter()
        .filter(|(m, _)| *m != id)
        .flat_map(|(m, o)| o.fields.iter().filter(|p| changed(live, &next, p)).map(|p| (m.clone(), p.clone())))
        .collect();
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (other, path) in &conflicts {
        if let Some(owned) = managed.get_mut(other) {
            owned.fields.remove(path);
        }
    }
    managed.insert(id.clone(), Owned { fields: set, api_version: api_version.to_string(), time: time.to_string() });
    retain_existing(managed, &next);
    Ok(next)
}

/// The message of the API server's 409 for an apply that conflicts.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [(manager, path)] = conflicts {
        return format!("Apply failed with 1 conflict: conflict with {}: {}", manager.describe(), display(path));
    }
    let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (manager, path) in conflicts {
        by_manager.entry(manager.describe()).or_default().push(display(path));
    }
    let lines: Vec<String> = by_manager
        .iter()
        .flat_map(|(m, paths)| {
            std::iter::once(format!("conflicts with {m}:")).chain(paths.iter().map(|p| format!("- {p}")))
        })
        .collect();
    format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
}

/// The `details.causes` of that 409.
pub fn conflict_causes(conflicts: &[Conflict]) -> Value {
    conflicts
        .iter()
        .map(|(m, p)| {
            json!({ "reason": "FieldManagerConflict", "message": format!("conflict with {}", m.describe()), "field": display(p) })
        })
        .collect()
}

/// `metadata.managedFields`.
pub fn render(managed: &Managed) -> Value {
    managed
        .iter()
        .map(|(id, owned)| {
            let mut entry = json!({
                "manager": id.manager,
                "operation": match id.operation { Operation::Apply => "Apply", Operation::Update => "Update" },
                "apiVersion": owned.api_version,
                "time": owned.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(&owned.fields),
            });
            if !id.subresource.is_empty() {
                entry["subresource"] = json!(id.subresource);
            }
            entry
        })
        .collect()
}

/// `{"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}`
fn fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for step in path {
            let name = match step {
                Step::Field(f) => format!("f:{f}"),
                Step::Key(k, v) => format!("k:{{\"{k}\":{v}}}"),
            };
            node = node.entry(name).or_insert_with(|| json!({})).as_object_mut().unwrap();
        }
        if matches!(path.last(), Some(Step::Key(..))) {
            node.insert(".".into(), json!({}));
        }
    }
    Value::Object(root)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Merge {
    /// Server-side apply: nulls are not part of the configuration.
    Apply,
    /// Strategic merge patch: a null deletes, `$patch: delete` removes a list element.
    Strategic,
}

/// Merges an apply configuration into the live object.
pub fn apply_merge(target: &mut Value, config: &Value) {
    merge_with(target, config, Merge::Apply);
}

/// A strategic merge patch. Its order directives (`$setElementOrder/…`) and `$retainKeys` are
/// accepted and not followed: list order stays the live order, new elements last.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    merge_with(target, patch, Merge::Strategic);
}

fn merge_with(target: &mut Value, patch: &Value, mode: Merge) {
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = clean(patch);
        return;
    };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            if mode == Merge::Strategic {
                t.remove(k);
            }
            continue;
        }
        match (t.get_mut(k), v) {
            (Some(tv @ Value::Object(_)), Value::Object(_)) => merge_with(tv, v, mode),
            (Some(Value::Array(items)), Value::Array(patch_items))
                if list_key(k, patch_items).is_some_and(|key| items.iter().all(|i| i.get(key).is_some())) =>
            {
                let key = list_key(k, patch_items).unwrap();
                for element in patch_items {
                    let position = items.iter().position(|i| i[key] == element[key]);
                    if mode == Merge::Strategic && element.get("$patch").and_then(Value::as_str) == Some("delete") {
                        if let Some(i) = position {
                            items.remove(i);
                        }
                        continue;
                    }
                    match position {
                        Some(i) => merge_with(&mut items[i], element, mode),
                        None => items.push(clean(element)),
                    }
                }
            }
            _ => {
                t.insert(k.clone(), clean(v));
            }
        }
    }
}

/// A new subtree without directives and nulls.
fn clean(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, v)| !k.starts_with('$') && !v.is_null()).map(|(k, v)| (k.clone(), clean(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(clean).collect()),
        other => other.clone(),
    }
}
