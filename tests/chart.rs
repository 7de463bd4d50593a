//! The Helm chart, rendered by a real Helm (`HELM`, installed by `scripts/test`): it lints, its CRD
//! is the binary's, its RBAC is exactly what the daemon checks for, its pods are locked down, and
//! the config it mounts passes `builder-monitor check`.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use builder_monitor::config::{RebasePath, RunnerKind, RunnerSettings};
use builder_monitor::runner::backend;
use builder_monitor_core::plan::ActionKind;
use serde_json::Value;
use support::daemon::{Workspace, run_with_env};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/builder-monitor");

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
    let ws = Workspace::new();
    let text = one(docs, "ConfigMap")["data"]["config.toml"].as_str().unwrap().to_string();
    let path = ws.config(&text);
    let path = path.to_str().unwrap();
    // As in the pod: the namespace from the downward API.
    let mut env = env.to_vec();
    env.push(("POD_NAMESPACE", "monitoring"));
    let check = run_with_env(&["check", "--config", path], &env, ws.dir.path());
    assert_eq!(check.code, Some(0), "the chart's config fails `check`:\n{}", check.stderr);
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
    let container = &pod["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
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
        "charts/builder-monitor/crds/clusterbuilders.yaml differs from `builder-monitor crd`; regenerate it with\n  cargo run -- crd > charts/builder-monitor/crds/clusterbuilders.yaml"
    );
    let crd: Value = serde_saphyr::from_str(&shipped).unwrap();
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["metadata"]["name"], "clusterbuilders.buildermonitor.dev");
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
    let ws = Workspace::new();
    let path = ws.path("values.yaml");
    let indented: String = config.lines().map(|l| format!("  {l}\n")).collect();
    std::fs::write(&path, format!("deployNamespaces: [shop, jobs]\nconfig: |\n{indented}")).unwrap();
    let docs = render(&["-f", path.to_str().unwrap()]);
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
        let ws = Workspace::new();
        let path = ws.path("values.yaml");
        let indented: String = config.lines().map(|l| format!("  {l}\n")).collect();
        std::fs::write(&path, format!("config: |\n{indented}")).unwrap();
        let docs = render(&["-f", path.to_str().unwrap()]);
        assert_bound(&docs);
        let granted = granted(&docs);
        assert_eq!(granted, check_and_required(&docs, &[]), "runner {}", kind.as_str());
        let in_builds = granted.iter().filter(|(namespace, ..)| namespace == "builds").count();
        let declared: usize = backend::of(kind).permissions().iter().map(|r| r.verbs.len()).sum();
        assert_eq!(in_builds, declared, "runner {}", kind.as_str());
    }
}

#[test]
fn configs_the_chart_cannot_run_fail_at_render_time_with_the_fix() {
    let refuse = |config: &str, expected: &str| {
        let ws = Workspace::new();
        let path = ws.path("values.yaml");
        let indented: String = config.lines().map(|l| format!("  {l}\n")).collect();
        std::fs::write(&path, format!("config: |\n{indented}")).unwrap();
        let out = helm().args(["template", "bm", CHART, "-f", path.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{config}\n→ {stderr}");
    };
    let builders = "[[builders]]\nname = \"b\"\nimage = \"x/y:latest\"\n";
    refuse(&format!("[monitor]\nstate = \"kubernetes\"\n{builders}"), "needs a [server] table");
    refuse(&format!("[server]\nlisten = \"127.0.0.1:9464\"\n{builders}"), "use \"0.0.0.0:9464\"");
    refuse(
        &format!("[server]\nlisten = \"0.0.0.0:9464\"\n[kubernetes]\nleader_election = true\n{builders}"),
        "several replicas share one ledger only with [monitor] state = \"kubernetes\"",
    );
    refuse(
        &format!("[server]\nlisten = \"0.0.0.0:9464\"\n[kubernetes]\nnamespace = \"x\"\n{builders}"),
        "leave [kubernetes] namespace and kubeconfig unset",
    );
    refuse(
        &format!("[server]\nlisten = \"0.0.0.0:9464\"\n{builders}[runner]\ntype = \"nomad\"\n"),
        "[runner] type = \"nomad\" is not one of none, exec, kubernetes, kpack",
    );
    let out = helm().args(["template", "bm", CHART, "--set", "secretEnv[0].name=X"]).output().unwrap();
    assert!(!out.status.success(), "values.schema.json requires secretName and key");
}

#[test]
fn the_grafana_dashboard_ships_off_by_default_with_the_sidecar_label() {
    let dashboards = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
            .cloned()
            .collect()
    };
    assert!(dashboards(&render(&[])).is_empty(), "off by default");
    helm_ok(&["lint", "--strict", CHART, "--set", "grafanaDashboard.enabled=true"]);
    let docs = render(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.annotations.grafana_folder=Builds",
    ]);
    let found = dashboards(&docs);
    assert_eq!(found.len(), 1, "one dashboard ConfigMap");
    let map = &found[0];
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Builds");
    let shipped = std::fs::read_to_string(Path::new(CHART).join("dashboards/builder-monitor.json")).unwrap();
    let rendered: Value = serde_json::from_str(map["data"]["builder-monitor.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, serde_json::from_str::<Value>(&shipped).unwrap(), "the dashboard file, unchanged");
    let elsewhere = render(&["--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=grafana"]);
    assert_eq!(dashboards(&elsewhere)[0]["metadata"]["namespace"], "grafana");
    let out = helm().args(["template", "bm", CHART, "--set", "grafanaDashboard.enabld=true"]).output().unwrap();
    assert!(!out.status.success(), "values.schema.json refuses unknown keys");
}
