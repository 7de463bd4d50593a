//! The hand-written CRD against the Rust types: a field added, renamed, retyped or made optional on
//! one side only fails here.

use kube::Resource;
use serde_json::Value;

use super::*;

fn crd() -> Value {
    serde_saphyr::from_str(CRD_YAML).expect("the CRD is YAML")
}

fn schema() -> Value {
    crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Every optional field set and every list one entry long: every property the types can write.
fn full() -> ClusterBuilder {
    let some = |s: &str| Some(s.to_string());
    ClusterBuilder {
        metadata: ObjectMeta::default(),
        spec: ClusterBuilderSpec {
            image: "registry.test/builder:latest".into(),
            interval: some("10m"),
            schedule: some("0 * * * * *"),
            platforms: vec!["linux/amd64".into()],
        },
        status: Some(ClusterBuilderStatus {
            latest_image: some("registry.test/builder@sha256:00"),
            stack: Some(BuilderStack { id: some("io.buildpacks.stacks.jammy"), run_image: some("run@sha256:00") }),
            lifecycle: Some(BuilderLifecycle { version: some("0.20.0") }),
            builder_metadata: vec![BuildpackMetadata { id: "java".into(), version: some("1"), homepage: some("h") }],
            observed_generation: Some(3),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: some("Checked"),
                message: some("m"),
                last_transition_time: some("t"),
            }],
            last_check_time: some("t"),
            last_change_time: some("t"),
            last_change: Some(LastChange {
                id: "c".into(),
                kind: "rebase".into(),
                reasons: vec!["r".into()],
                packages: some("p"),
            }),
            history: vec![HistoryEntry { digest: "sha256:00".into(), first_seen: "t".into() }],
        }),
    }
}

fn value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "object",
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
        Value::Null => "null",
    }
}

/// What differs between `value` (all a type writes) and `schema`, by path.
fn differences(path: &str, value: &Value, schema: &Value, out: &mut Vec<String>) {
    let declared = schema["type"].as_str().unwrap_or("(none)");
    if declared != json_type(value) {
        out.push(format!("{path}: the type writes {}, the schema says {declared}", json_type(value)));
        return;
    }
    match value {
        Value::Object(fields) => {
            let properties = schema["properties"].as_object().cloned().unwrap_or_default();
            for (name, field) in fields {
                // The API server's own fields: not part of the CRD's schema.
                if path.is_empty() && ["metadata", "apiVersion", "kind"].contains(&name.as_str()) {
                    continue;
                }
                match properties.get(name) {
                    Some(property) => differences(&format!("{path}.{name}"), field, property, out),
                    None => out.push(format!("{path}.{name}: written by the types, not in the schema")),
                }
            }
            for name in properties.keys().filter(|n| !fields.contains_key(*n)) {
                out.push(format!("{path}.{name}: in the schema, never written by the types"));
            }
        }
        Value::Array(items) => {
            for item in items {
                differences(&format!("{path}[]"), item, &schema["items"], out);
            }
        }
        _ => {}
    }
}

/// The fields a type always writes (those of its emptiest value) are exactly the schema's
/// `required`; the others are `nullable` (kube merges an unset field as null) unless they are lists.
fn requirements(path: &str, emptiest: &Value, schema: &Value, out: &mut Vec<String>) {
    let mut required: Vec<&str> =
        schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    required.sort();
    let mut always: Vec<&str> = emptiest.as_object().unwrap().keys().map(String::as_str).collect();
    always.sort();
    if required != always {
        out.push(format!("{path}: required {required:?}, but the type always writes {always:?}"));
    }
    for (name, property) in schema["properties"].as_object().into_iter().flatten() {
        let optional = !always.contains(&name.as_str());
        let nullable = property["nullable"] == true;
        if optional && property["type"] != "array" && !nullable {
            out.push(format!("{path}.{name}: optional in the type, not nullable in the schema"));
        }
        if !optional && nullable {
            out.push(format!("{path}.{name}: always written, but nullable in the schema"));
        }
    }
}

#[test]
fn the_schema_has_every_field_the_types_write_and_no_other() {
    let mut out = vec![];
    differences("", &value(&full()), &schema(), &mut out);
    assert!(out.is_empty(), "the CRD's schema and the Rust types disagree:\n{}", out.join("\n"));
}

#[test]
fn the_schema_requires_what_the_types_always_write() {
    let schema = schema();
    let status = &schema["properties"]["status"];
    let of = |name: &str| &status["properties"][name];
    let spec = ClusterBuilderSpec { image: String::new(), interval: None, schedule: None, platforms: vec![] };
    let checks: [(&str, Value, &Value); 9] = [
        ("", serde_json::json!({ "spec": {} }), &schema),
        (".spec", value(&spec), &schema["properties"]["spec"]),
        (".status", value(&ClusterBuilderStatus::default()), status),
        (".status.stack", value(&BuilderStack::default()), of("stack")),
        (".status.lifecycle", value(&BuilderLifecycle::default()), of("lifecycle")),
        (".status.lastChange", value(&LastChange::default()), of("lastChange")),
        (".status.builderMetadata[]", value(&BuildpackMetadata::default()), &of("builderMetadata")["items"]),
        (".status.history[]", value(&HistoryEntry::default()), &of("history")["items"]),
        (".status.conditions[]", value(&Condition::default()), &of("conditions")["items"]),
    ];
    let mut out = vec![];
    for (path, emptiest, schema) in &checks {
        requirements(path, emptiest, schema, &mut out);
    }
    assert!(out.is_empty(), "the CRD's required and nullable fields disagree with the types:\n{}", out.join("\n"));
}

#[test]
fn the_checks_find_a_schema_that_disagrees() {
    let mut schema = schema();
    schema["properties"]["status"]["properties"].as_object_mut().unwrap().remove("history");
    schema["properties"]["spec"]["properties"]["interval"]["type"] = "integer".into();
    let mut out = vec![];
    differences("", &value(&full()), &schema, &mut out);
    assert_eq!(
        out,
        [
            ".spec.interval: the type writes string, the schema says integer",
            ".status.history: written by the types, not in the schema"
        ]
    );
    let spec = &mut schema["properties"]["spec"];
    spec["required"] = serde_json::json!([]);
    spec["properties"]["schedule"].as_object_mut().unwrap().remove("nullable");
    let emptiest =
        value(&ClusterBuilderSpec { image: String::new(), interval: None, schedule: None, platforms: vec![] });
    let mut out = vec![];
    requirements(".spec", &emptiest, spec, &mut out);
    assert_eq!(
        out,
        [
            r#".spec: required [], but the type always writes ["image"]"#,
            ".spec.schedule: optional in the type, not nullable in the schema"
        ]
    );
}

#[test]
fn the_resource_is_the_one_the_crd_defines() {
    let crd = crd();
    let spec = &crd["spec"];
    assert_eq!(crd["metadata"]["name"], format!("{}.{}", ClusterBuilder::plural(&()), ClusterBuilder::group(&())));
    assert_eq!(spec["names"]["kind"], ClusterBuilder::kind(&()).as_ref());
    assert_eq!(spec["names"]["plural"], ClusterBuilder::plural(&()).as_ref());
    assert_eq!(spec["versions"][0]["name"], ClusterBuilder::version(&()).as_ref());
    assert_eq!(spec["scope"], "Cluster");
    assert_eq!(spec["versions"][0]["subresources"]["status"], serde_json::json!({}), "the status is a subresource");
    assert_eq!(ClusterBuilder::api_version(&()), API_VERSION);
    let url = ClusterBuilder::url_path(&(), None);
    assert_eq!(url, "/apis/buildermonitor.dev/v1alpha1/clusterbuilders");
}

#[test]
fn an_object_from_the_api_server_reads_back_whole() {
    let mut value = value(&full());
    value["apiVersion"] = API_VERSION.into();
    value["kind"] = KIND.into();
    value["metadata"] = serde_json::json!({"name": "jammy", "generation": 3, "uid": "u"});
    let object: ClusterBuilder = serde_json::from_value(value).unwrap();
    assert_eq!(object.metadata.name.as_deref(), Some("jammy"));
    assert_eq!(object.status(), full().status.as_ref());
    assert_eq!(object.spec, full().spec);
}
