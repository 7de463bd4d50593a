//! The Helm chart, rendered by a real Helm (`HELM`, installed by `scripts/test`): it lints, its CRD
//! is the binary's, its RBAC is exactly what the daemon checks for, its pods are locked down, and
//! the config it mounts passes its init container's `builder-monitor check --expect …`, run here
//! as the pod would run it.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use builder_monitor::cluster::expect::POOL_KUBECONFIGS;
use builder_monitor::config::{RebasePath, RunnerKind, RunnerSettings};
use builder_monitor::runner::backend;
use builder_monitor_core::plan::ActionKind;
use serde_json::Value;
use support::daemon::{Workspace, run_with_env};

mod dashboard;
mod pools;
mod signing;
mod values;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/builder-monitor");
/// Where the chart mounts the config (read-only) and the data directory (writable).
const CONFIG_PATH: &str = "/etc/builder-monitor/config.toml";
const DATA_DIR: &str = "/var/lib/builder-monitor";

fn helm() -> Command {
    let helm = std::env::var_os("HELM").unwrap_or_else(|| {
        panic!(
            "HELM is not set: run the tests with scripts/test, which installs Helm, or set HELM to a Helm 3/4 binary"
        )
    });
    let home = std::env::temp_dir().join("builder-monitor-helm-home");
    let mut command = Command::new(helm);
    // Helm keeps caches and config in these; never in the user's home during tests.
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

fn helm_ok(args: &[&str]) -> String {
    let out = helm().args(args).output().expect("run helm");
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn values(name: &str) -> PathBuf {
    Path::new(CHART).join("ci").join(name)
}

/// `helm template` into parsed documents.
fn render(extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["template", "bm", CHART, "--namespace", "monitoring"];
    args.extend_from_slice(extra);
    let yaml = helm_ok(&args);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

/// The config's text, from the ConfigMap the `config` volume mounts (there are others: the pod
/// templates', the dashboard's).
fn config_text(docs: &[Value]) -> &str {
    let volume = pod(docs)["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "config").unwrap();
    config_map(docs, &volume["configMap"]["name"])["data"]["config.toml"].as_str().unwrap()
}

fn config_map<'a>(docs: &'a [Value], name: &Value) -> &'a Value {
    let found = docs.iter().find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == *name);
    found.unwrap_or_else(|| panic!("no ConfigMap {name}"))
}

/// A values file in a workspace: `head` (YAML) and then `config` as the `config: |` block.
fn values_with(ws: &Workspace, head: &str, config: &str) -> PathBuf {
    let path = ws.path("values.yaml");
    let indented: String = config.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(&path, format!("{head}\nconfig: |\n{indented}")).unwrap();
    path
}

/// `helm template` with a values file of `head` and `config`.
fn render_with(head: &str, config: &str) -> Vec<Value> {
    let ws = Workspace::new();
    render(&["-f", values_with(&ws, head, config).to_str().unwrap()])
}

/// `helm template`'s error for values of `head` and `config` (it must fail).
fn render_error(head: &str, config: &str) -> String {
    let ws = Workspace::new();
    let path = values_with(&ws, head, config);
    let out = helm().args(["template", "bm", CHART, "-f", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success(), "rendered:\n{head}\n{config}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn pod(docs: &[Value]) -> &Value {
    &one(docs, "Deployment")["spec"]["template"]["spec"]
}

/// The container `name` of the pod's `containers` or `initContainers`.
fn container<'a>(docs: &'a [Value], list: &str, name: &str) -> &'a Value {
    let found = pod(docs)[list].as_array().unwrap().iter().find(|c| c["name"] == name);
    found.unwrap_or_else(|| panic!("no {list} {name}"))
}

/// Secrets and ConfigMaps of the cluster that the pod mounts but the chart does not render (the
/// user's): (name, key, content).
type Outside<'a> = &'a [(&'a str, &'a str, &'a str)];

/// Writes the rendered config to `ws` as the init container sees it, and returns its path: the
/// other volumes it mounts under the config's directory beside it (the pod templates' ConfigMap;
/// projected Secrets and ConfigMaps, their items from `outside`), and the config's paths into them
/// pointing there.
fn pod_files(docs: &[Value], ws: &Workspace, outside: Outside) -> PathBuf {
    let check = container(docs, "initContainers", "check");
    let mut text = config_text(docs).to_string();
    for mount in check["volumeMounts"].as_array().unwrap() {
        let volume = pod(docs)["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
        let mount_path = mount["mountPath"].as_str().unwrap();
        let Some(under) = mount_path.strip_prefix("/etc/builder-monitor/") else { continue };
        let dir = ws.path(under);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(sources) = volume["projected"]["sources"].as_array() {
            for source in sources {
                let object = if source["secret"].is_object() { &source["secret"] } else { &source["configMap"] };
                let name = object["name"].as_str().unwrap_or_else(|| panic!("a Secret or ConfigMap: {source}"));
                for item in object["items"].as_array().unwrap() {
                    let key = item["key"].as_str().unwrap();
                    let found = outside.iter().find(|(n, k, _)| *n == name && *k == key);
                    let (_, _, content) = found.unwrap_or_else(|| panic!("the test gives no {name} {key}"));
                    let file = dir.join(item["path"].as_str().unwrap());
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(file, content).unwrap();
                }
            }
        } else {
            assert!(volume["configMap"].is_object(), "the init container mounts only ConfigMaps there: {volume}");
            for (file, content) in config_map(docs, &volume["configMap"]["name"])["data"].as_object().unwrap() {
                std::fs::write(dir.join(file), content.as_str().unwrap()).unwrap();
            }
        }
        text = text.replace(&format!("{mount_path}/"), &format!("{}/", dir.display()));
    }
    ws.config(&text)
}

/// Runs the init container's command on the rendered ConfigMap's config, as the pod would: its
/// arguments (the config at a workspace path instead of the mount, with `pod_files`), its plain
/// environment, the namespace from the downward API, and `secrets` for what the pod takes from
/// Secrets.
const STAND_IN_KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: stand-in\n";

fn init_check(docs: &[Value], secrets: &[(&str, &str)]) -> support::daemon::Output {
    init_check_with(docs, secrets, &[])
}

/// `init_check`, the pod's projected volumes holding `outside`'s items.
fn init_check_with(docs: &[Value], secrets: &[(&str, &str)], outside: Outside) -> support::daemon::Output {
    let ws = Workspace::new();
    let path = pod_files(docs, &ws, outside);
    let check = container(docs, "initContainers", "check");
    let args: Vec<&str> = check["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .map(|a| if a == CONFIG_PATH { path.to_str().unwrap() } else { a })
        .collect();
    // The pod's own cluster (in-cluster config there): a stand-in kubeconfig here; `check` builds
    // the client, it never calls the cluster.
    let cluster = ws.path("kubeconfig");
    std::fs::write(&cluster, STAND_IN_KUBECONFIG).unwrap();
    let mut env: Vec<(&str, &str)> = secrets.to_vec();
    env.push(("KUBECONFIG", cluster.to_str().unwrap()));
    for var in check["env"].as_array().unwrap() {
        let name = var["name"].as_str().unwrap();
        if let Some(value) = var["value"].as_str() {
            env.push((name, value));
        } else if var["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace" {
            env.push((name, "monitoring"));
        } else if var["valueFrom"]["secretKeyRef"].is_object() {
            assert!(secrets.iter().any(|(n, _)| *n == name), "a value for secret variable {name}");
        }
    }
    run_with_env(&args, &env, ws.dir.path())
}

/// (namespace or "", apiGroup, resource, verb) for every rule of the rendered Roles and ClusterRoles.
fn granted(docs: &[Value]) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for d in docs.iter().filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole") {
        let namespace = d["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        assert_eq!(d["kind"] == "ClusterRole", namespace.is_empty());
        for rule in d["rules"].as_array().unwrap() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        out.insert((
                            namespace.clone(),
                            group.as_str().unwrap().into(),
                            resource.as_str().unwrap().into(),
                            verb.as_str().unwrap().into(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Every Role and ClusterRole is bound to the chart's service account.
fn assert_bound(docs: &[Value]) {
    let sa = one(docs, "ServiceAccount")["metadata"]["name"].clone();
    for role in docs.iter().filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole") {
        let binding_kind = if role["kind"] == "Role" { "RoleBinding" } else { "ClusterRoleBinding" };
        let binding = docs
            .iter()
            .find(|b| {
                b["kind"] == binding_kind
                    && b["roleRef"]["name"] == role["metadata"]["name"]
                    && b["metadata"]["namespace"] == role["metadata"]["namespace"]
            })
            .unwrap_or_else(|| panic!("no binding for {role}"));
        assert_eq!(binding["subjects"][0]["name"], sa);
        assert_eq!(binding["subjects"][0]["namespace"], "monitoring");
    }
}

/// Writes the ConfigMap's config to a workspace, checks it with the binary, and returns the
/// permissions `builder-monitor rbac` says it needs, in the shape of `granted`.
fn check_and_required(docs: &[Value], env: &[(&str, &str)]) -> BTreeSet<(String, String, String, String)> {
    let check = init_check(docs, env);
    assert_eq!(check.code, Some(0), "the chart's config fails its init container's `check`:\n{}", check.stderr);
    let ws = Workspace::new();
    let path = pod_files(docs, &ws, &[]);
    let path = path.to_str().unwrap();
    // As in the pod: the namespace from the downward API.
    let mut env = env.to_vec();
    env.push(("POD_NAMESPACE", "monitoring"));
    // The chart's service account for release `bm` is the release's full name.
    let account = one(docs, "ServiceAccount")["metadata"]["name"].as_str().unwrap().to_string();
    let args = ["rbac", "--output", "json", "--service-account", &account, "--config", path];
    let rbac = run_with_env(&args, &env, ws.dir.path());
    assert_eq!(rbac.code, Some(0), "{}", rbac.stderr);
    let objects: Vec<Value> = serde_json::from_str(&rbac.stdout).unwrap();
    assert_eq!(rbac_identities(&objects), rbac_identities(docs), "`rbac` names its objects as the chart does");
    granted(&objects)
}

/// (kind, namespace, name, roleRef, subjects) of the ServiceAccount, roles and bindings.
fn rbac_identities(docs: &[Value]) -> BTreeSet<String> {
    let kinds = ["ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"];
    docs.iter()
        .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
        .map(|d| {
            let role_ref = &d["roleRef"];
            let subjects = &d["subjects"];
            format!("{} {} {} {role_ref} {subjects}", d["kind"], d["metadata"]["namespace"], d["metadata"]["name"])
        })
        .collect()
}

fn assert_locked_down(docs: &[Value]) {
    let pod = &one(docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    for container in [&pod["containers"][0], &pod["initContainers"][0]] {
        let sc = &container["securityContext"];
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }
    let container = &pod["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["limits"]["memory"].is_string());
    assert!(docs.iter().all(|d| d["kind"] != "Secret"), "the chart never holds a secret");
}

#[test]
fn the_chart_lints_strictly_with_default_and_all_features_values() {
    helm_ok(&["lint", "--strict", CHART]);
    helm_ok(&["lint", "--strict", CHART, "-f", values("all-features-values.yaml").to_str().unwrap()]);
}

#[test]
fn the_chart_ships_the_binarys_crd() {
    let ws = Workspace::new();
    let out = ws.run(&["crd"]);
    assert_eq!(out.code, Some(0));
    let shipped = std::fs::read_to_string(Path::new(CHART).join("crds/clusterbuilders.yaml")).unwrap();
    assert!(
        shipped == out.stdout,
        "charts/builder-monitor/crds/clusterbuilders.yaml differs from `builder-monitor crd` (src/cluster/clusterbuilders.yaml); copy it with\n  cargo run -- crd > charts/builder-monitor/crds/clusterbuilders.yaml"
    );
    let crd: Value = serde_saphyr::from_str(&shipped).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["metadata"]["name"], "clusterbuilders.buildermonitor.dev");
    assert_eq!(crd["spec"]["names"]["shortNames"], serde_json::json!(["bmcb"]), "not kpack's `clusterbuilders`");
    let columns: Vec<&str> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Image", "Latest", "Kind of last change", "Age"]);
}

#[test]
fn default_values_render_two_locked_down_replicas_with_exactly_the_rbac_used() {
    let docs = render(&[]);
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2, "leader election on: two replicas");
    assert_locked_down(&docs);
    assert_bound(&docs);
    let granted = granted(&docs);
    assert_eq!(granted, check_and_required(&docs, &[]), "the chart grants exactly what the daemon uses");
    assert!(granted.contains(&(
        "".into(),
        "buildermonitor.dev".into(),
        "clusterbuilders/status".into(),
        "patch".into()
    )));
    assert!(docs.iter().any(|d| d["kind"] == "PodDisruptionBudget"));
    assert!(docs.iter().all(|d| d["kind"] != "ServiceMonitor"));
    let port = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"];
    assert_eq!(port, 9464, "the port of [server] listen");
}

#[test]
fn all_features_render_build_namespace_roles_secrets_by_reference_and_a_service_monitor() {
    let file = values("all-features-values.yaml");
    let docs = render(&["-f", file.to_str().unwrap()]);
    assert_eq!(one(&docs, "Deployment")["spec"]["replicas"], 3);
    assert_locked_down(&docs);
    assert_bound(&docs);
    let env =
        [("BUILDER_MONITOR_API_TOKEN", "a-token-of-sufficient-length"), ("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/x")];
    let granted = granted(&docs);
    assert_eq!(granted, check_and_required(&docs, &env), "the chart grants exactly what the daemon uses");
    assert!(granted.contains(&("builds".into(), "batch".into(), "jobs".into(), "create".into())));
    assert!(granted.contains(&("".into(), "buildermonitor.dev".into(), "clusterbuilders".into(), "delete".into())));
    let container = &one(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let token = container["env"].as_array().unwrap().iter().find(|e| e["name"] == "BUILDER_MONITOR_API_TOKEN").unwrap();
    assert_eq!(token["valueFrom"]["secretKeyRef"]["name"], "builder-monitor");
    assert!(token["value"].is_null(), "secrets come from Secrets, never from values");
    let monitor = one(&docs, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
}

/// runners.yaml as the runner backends declare it: each `[runner] type`'s rules in the build
/// namespace, in the file's own layout.
fn runners_yaml() -> String {
    let quoted = |items: &[&str]| items.iter().map(|i| format!("{i:?}")).collect::<Vec<_>>().join(", ");
    let rules_yaml = |rules: &[backend::Rule], indent: &str| {
        if rules.is_empty() {
            return format!("{indent}rules: []\n");
        }
        let mut out = format!("{indent}rules:\n");
        for rule in rules {
            out += &format!(
                "{indent}  - apiGroups: [{}]\n{indent}    resources: [{}]\n{indent}    verbs: [{}]\n",
                quoted(&[rule.group]),
                quoted(&[rule.resource]),
                quoted(rule.verbs)
            );
        }
        out
    };
    let mut out = String::from("runners:\n");
    for kind in RunnerKind::ALL {
        out += &format!("  - type: {}\n", kind.as_str());
        out += &rules_yaml(backend::of(kind).permissions(), "    ");
    }
    out += "# What deploys to workloads need in each namespace of `deployNamespaces` (the `-deploys` Role).\n";
    out += "deploys:\n";
    out += &rules_yaml(builder_monitor::runner::deploy::PERMISSIONS, "  ");
    out
}

/// The chart's runner RBAC is data from the backends, so a new runner type (or a changed
/// permission) cannot leave the chart behind.
#[test]
fn the_charts_runner_rules_are_what_the_backends_declare() {
    let shipped = std::fs::read_to_string(Path::new(CHART).join("runners.yaml")).unwrap();
    let expected = runners_yaml();
    let parse = |text: &str| serde_saphyr::from_str::<Value>(text).unwrap();
    assert!(
        parse(&shipped) == parse(&expected),
        "charts/builder-monitor/runners.yaml differs from the runner backends; below its comment it should read:\n{expected}"
    );
    // The chart reads `[runner] type` only: a rebase path that needed permissions would need it
    // to read `[runner] rebase` too.
    let settings = RunnerSettings { rebase: RebasePath::Registry, ..RunnerSettings::default() };
    let rebases = backend::for_action(&settings, ActionKind::Rebase);
    assert_eq!((rebases.name(), rebases.permissions()), ("registry", &[][..]));
}

/// Deploys to workloads: with `deployNamespaces` naming the namespaces of the config's `deploy`
/// workloads, the chart grants exactly what `builder-monitor rbac` says the config needs there.
#[test]
fn deploy_namespaces_render_exactly_the_rbac_deploys_use() {
    let config = "[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n\
                  [[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n\
                  [[images]]\nname = \"web\"\nbuilder = \"b\"\nimage = \"registry.example.com/web:latest\"\n\
                  deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"web\" },\
                            { kind = \"CronJob\", namespace = \"jobs\", name = \"report\" }]\n";
    let head = "deployNamespaces: [shop, jobs]\nfeatures: {publish: false, leaderElection: false}";
    let docs = render_with(head, config);
    assert_bound(&docs);
    let granted = granted(&docs);
    assert_eq!(granted, check_and_required(&docs, &[]));
    for namespace in ["shop", "jobs"] {
        let patch = granted.iter().filter(|(ns, group, resource, verb)| {
            ns == namespace && group == "apps" && resource == "deployments" && verb == "patch"
        });
        assert_eq!(patch.count(), 1, "{namespace}: {granted:?}");
    }
}

/// Each runner type, rendered: the chart grants exactly what `builder-monitor rbac` says its
/// config needs.
#[test]
fn every_runner_type_renders_exactly_the_rbac_the_daemon_uses() {
    for kind in RunnerKind::ALL {
        let settings = match kind {
            RunnerKind::Exec => "[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n",
            RunnerKind::Kubernetes | RunnerKind::Kpack => "[runner.kubernetes]\nnamespace = \"builds\"\n",
            RunnerKind::None => "",
        };
        // The ledger in the cluster: the daemon's own Role and service account in every render.
        let config = format!(
            "[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n\
             [[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n\
             [runner]\ntype = \"{}\"\n{settings}",
            kind.as_str()
        );
        let head = format!(
            "features: {{publish: false, leaderElection: false, runner: {{type: {}, namespace: builds}}}}",
            kind.as_str()
        );
        let docs = render_with(&head, &config);
        assert_bound(&docs);
        let granted = granted(&docs);
        assert_eq!(granted, check_and_required(&docs, &[]), "runner {}", kind.as_str());
        let in_builds = granted.iter().filter(|(namespace, ..)| namespace == "builds").count();
        let declared: usize = backend::of(kind).permissions().iter().map(|r| r.verbs.len()).sum();
        assert_eq!(in_builds, declared, "runner {}", kind.as_str());
    }
}

/// Values the chart cannot run fail `helm template`; a config that is invalid, or says other than
/// the values the chart shaped the release by, fails the pod's init container — each naming the fix.
#[test]
fn configs_the_chart_cannot_run_fail_at_render_time_with_the_fix() {
    let builders = "[[builders]]\nname = \"b\"\nimage = \"x/y:latest\"\n";
    let fits = format!("[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n{builders}");
    let sqlite = "features: {clusterState: false}";
    let refuse = |head: &str, config: &str, expected: &str| {
        let stderr = render_error(head, config);
        assert!(stderr.contains(expected), "{head}\n{config}\n→ {stderr}");
    };
    refuse(sqlite, &fits, "replicaCount: 2 with a SQLite ledger: each replica would keep its own. Set replicaCount: 1");
    refuse(
        "features: {runner: {type: nomad, namespace: builds}}",
        &fits,
        "features.runner.type = \"nomad\" is not one of none, exec, kubernetes, kpack",
    );
    refuse("features: {port: 0}", &fits, "port");
    refuse("secretEnv: [{name: X}]", &fits, "secretName");

    let head = "features: {publish: false, leaderElection: false}";
    let stopped = |head: &str, config: &str, expected: &str| {
        let docs = render_with(head, config);
        let check = init_check(&docs, &[]);
        assert!(check.code == Some(2) && check.stderr.contains(expected), "{config}\n→ {}", check.stderr);
    };
    assert_eq!(init_check(&render_with(head, &fits), &[]).code, Some(0), "the config that fits");
    let state = "[monitor]\nstate = \"kubernetes\"\n";
    stopped(
        head,
        &format!("{state}{builders}"),
        "no [server] table: the deployment's probes, Service and metrics need [server] listen = \"0.0.0.0:9464\"",
    );
    stopped(head, &format!("[server]\nlisten = \"127.0.0.1:9464\"\n{state}{builders}"), "use \"0.0.0.0:9464\"");
    stopped(head, &format!("{fits}[kubernetes]\nnamespace = \"x\"\n"), "leave [kubernetes] namespace unset");
    stopped(head, &format!("{fits}[kubernetes]\nkubeconfig = \"/k\"\n"), "leave [kubernetes] kubeconfig");
    stopped(head, &format!("{fits}[kubernetes]\nleader_election = true\n"), "set leader_election = false");
    stopped("", &fits, "[kubernetes] publish is false, but the deployment expects publish=true");
    stopped(head, &format!("[server]\nlisten = \"0.0.0.0:9464\"\n{builders}"), "set [monitor] state = \"kubernetes\"");
    stopped(
        head,
        &format!("{fits}[runner]\ntype = \"kpack\"\n"),
        "[runner] type = \"kpack\", but the deployment expects runner=none",
    );
    stopped(
        head,
        &format!(
            "{fits}[[images]]\nname = \"w\"\nbuilder = \"b\"\nimage = \"x/w:1\"\ndeploy = [{{ kind = \"Deployment\", namespace = \"shop\", name = \"w\" }}]\n"
        ),
        "set deployNamespaces: [\"shop\"]",
    );
    // The text itself is the binary's to judge: an invalid config stops the pod with its line.
    stopped(head, &fits.replace("[monitor]\n", "[monitor]\ninterval = \"10\"\n"), "a unit is required");
}

/// Issue 28: a config without `[monitor] state` put the SQLite ledger beside the config, on the
/// read-only ConfigMap mount. The pod now points relative state at a writable data volume.
#[test]
fn a_config_without_state_keeps_its_sqlite_ledger_on_the_writable_data_volume() {
    let head = "features: {publish: false, leaderElection: false, clusterState: false}";
    let listen = "[server]\nlisten = \"0.0.0.0:9464\"\n";
    let builders = "[[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n";
    for (state, file) in [("", "builder-monitor.db"), ("[monitor]\nstate = \"ledger/state.db\"\n", "ledger/state.db")] {
        let docs = render_with(head, &format!("{listen}{state}{builders}"));
        let deployment = one(&docs, "Deployment");
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate", "never two writers of one ledger");
        assert_locked_down(&docs);
        assert!(granted(&docs).is_empty(), "a SQLite ledger needs no RBAC");
        let daemon = container(&docs, "containers", "builder-monitor");
        let state_dir = daemon["env"].as_array().unwrap().iter().find(|e| e["name"] == "BUILDER_MONITOR_STATE_DIR");
        assert_eq!(state_dir.unwrap()["value"], DATA_DIR);
        let mount = |path: &str| {
            let mounts = daemon["volumeMounts"].as_array().unwrap();
            mounts.iter().find(|m| m["mountPath"] == path).unwrap_or_else(|| panic!("nothing at {path}")).clone()
        };
        assert_eq!(mount("/etc/builder-monitor")["readOnly"], true);
        let data = mount(DATA_DIR);
        assert!(data["readOnly"].is_null() || data["readOnly"] == false, "writable: {data}");
        let volume = pod(&docs)["volumes"].as_array().unwrap().iter().find(|v| v["name"] == data["name"]).unwrap();
        assert!(volume["emptyDir"].is_object(), "an emptyDir without persistence: {volume}");
        // Where the binary, given the pod's environment, puts the ledger: on that volume.
        let check = init_check(&docs, &[]);
        assert_eq!(check.code, Some(0), "{}", check.stderr);
        assert!(check.stdout.contains(&format!("state:  {DATA_DIR}/{file} (SQLite)")), "{}", check.stdout);
    }
    // An absolute state elsewhere would be on the read-only root filesystem: the pod says so.
    let docs = render_with(head, &format!("{listen}[monitor]\nstate = \"/etc/builder-monitor/x.db\"\n{builders}"));
    let check = init_check(&docs, &[]);
    assert!(check.code == Some(2) && check.stderr.contains("outside the writable data directory"), "{}", check.stderr);
}

#[test]
fn persistence_gives_the_data_directory_a_claim_for_one_replica() {
    let config =
        "[server]\nlisten = \"0.0.0.0:9464\"\n[[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n";
    let sqlite = "features: {publish: false, leaderElection: false, clusterState: false}\n";
    assert!(render_with(sqlite, config).iter().all(|d| d["kind"] != "PersistentVolumeClaim"), "off by default");
    let docs = render_with(
        &format!(
            "{sqlite}persistence: {{enabled: true, size: 5Gi, storageClass: fast, accessModes: [ReadWriteOncePod]}}"
        ),
        config,
    );
    let claim = one(&docs, "PersistentVolumeClaim");
    assert_eq!(claim["metadata"]["namespace"], "monitoring");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(claim["spec"]["accessModes"], serde_json::json!(["ReadWriteOncePod"]));
    let data = pod(&docs)["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(data["persistentVolumeClaim"]["claimName"], claim["metadata"]["name"]);
    assert!(data["emptyDir"].is_null());
    assert_eq!(one(&docs, "Deployment")["spec"]["strategy"]["type"], "Recreate");
    assert!(granted(&docs).is_empty());
    assert_eq!(init_check(&docs, &[]).code, Some(0));
    let class = |set: &str| {
        let docs = render_with(&format!("{sqlite}persistence: {{enabled: true{set}}}"), config);
        one(&docs, "PersistentVolumeClaim")["spec"].get("storageClassName").cloned()
    };
    assert_eq!(class(""), None, "the cluster's default class");
    assert_eq!(class(", storageClass: \"-\""), Some(Value::from("")), "no class");
    // Two replicas cannot share one claim's SQLite file, even with the ledger in the cluster.
    let two = "persistence: {enabled: true}\nreplicaCount: 2\n";
    let clustered =
        format!("{config}[monitor]\nstate = \"kubernetes\"\n[kubernetes]\npublish = true\nleader_election = true\n");
    let stderr = render_error(two, &clustered);
    assert!(
        stderr.contains("persistence.enabled with replicaCount: 2") && stderr.contains("Set replicaCount: 1"),
        "{stderr}"
    );
    for bad in ["persistence.size=lots", "persistence.accessModes[0]=ReadOnlyMany", "persistence.sise=1Gi"] {
        let out = helm().args(["template", "bm", CHART, "--set", bad]).output().unwrap();
        assert!(!out.status.success(), "values.schema.json refuses {bad}");
    }
}
/// Issue 28: the chart read the config with regular expressions and refused valid TOML such as an
/// inline `[server]` table. It reads no TOML now; the port is `features.port`, checked in the pod.
#[test]
fn an_inline_table_config_renders_with_its_port_and_probes() {
    for port in [9464, 8080] {
        let config = format!(
            "server = {{ listen = \"0.0.0.0:{port}\" }}\nmonitor = {{ state = \"kubernetes\" }}\n\
             kubernetes = {{ publish = true, leader_election = true }}\n\
             [[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n"
        );
        let docs = render_with(&format!("features: {{port: {port}}}"), &config);
        let daemon = container(&docs, "containers", "builder-monitor");
        assert_eq!(daemon["ports"][0], serde_json::json!({"name": "http", "containerPort": port, "protocol": "TCP"}));
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            assert_eq!(daemon[probe]["httpGet"]["port"], "http", "{probe}");
        }
        assert_eq!(one(&docs, "Service")["spec"]["ports"][0]["targetPort"], "http");
        assert_eq!(granted(&docs), check_and_required(&docs, &[]), "port {port}");
    }
}

/// `kubectl get clusterbuilders` is ambiguous where kpack is installed: hints give the full name or
/// the short name the CRD declares.
#[test]
fn hints_name_clusterbuilders_unambiguously() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), Path::new(CHART).join("templates/NOTES.txt")];
    let mut dirs = vec![root.join("docs"), root.join("src"), Path::new(CHART).to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md" || e == "rs" || e == "txt" || e == "yaml") {
                files.push(path);
            }
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("get clusterbuilder") {
            let rest = text[at + "get clusterbuilder".len()..].trim_start_matches('s');
            assert!(
                rest.starts_with(".buildermonitor.dev"),
                "{}: {}",
                file.display(),
                &text[at..(at + 40).min(text.len())]
            );
        }
    }
    let notes = std::fs::read_to_string(Path::new(CHART).join("templates/NOTES.txt")).unwrap();
    assert!(notes.contains("kubectl get clusterbuilders.buildermonitor.dev") && notes.contains("kubectl get bmcb"));
}
