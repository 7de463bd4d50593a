//! The chart's runner pools: each pool's kubeconfig Secret and the pod templates mounted where
//! the config's pools read them, and the pool set-ups it cannot run refused at render time.

use super::*;

/// A config whose pools build in clusters of their own (their kubeconfigs from Secrets), with pod
/// templates from `podTemplates`.
const POOLS_CONFIG: &str = "[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n\
    [[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n\
    [runner]\ntype = \"kubernetes\"\n\
    [runner.kubernetes]\nnamespace = \"builds\"\npod_template = \"/etc/builder-monitor/templates/linux.yaml\"\n\
    [[runner.pools]]\nname = \"arm\"\nplatforms = [\"linux/arm64\"]\nnamespace = \"builds\"\n\
    kubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\"\ncontext = \"arm\"\npod_template = \"templates/linux.yaml\"\n\
    [[runner.pools]]\nname = \"arm-big\"\nplatforms = [\"linux/arm64\"]\nnamespace = \"big-builds\"\n\
    kubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\"\ncontext = \"arm\"\n\
    [[runner.pools]]\nname = \"win\"\ntype = \"kpack\"\nplatforms = [\"windows/amd64\"]\n\
    kubeconfig = \"/etc/builder-monitor/pools/win/kubeconfig\"\npod_template = \"/etc/builder-monitor/templates/windows.yaml\"\n";

const POOLS_HEAD: &str =
    "features: {publish: false, leaderElection: false, runner: {type: kubernetes, namespace: builds}}
pools:
  - {name: arm, kubeconfigSecret: bm-arm-kubeconfig}
  - {name: win, kubeconfigSecret: bm-win, key: config}
podTemplates:
  linux.yaml: |
    spec:
      nodeSelector:
        node-pool: builds
  windows.yaml: |
    spec:
      tolerations:
        - {key: os, operator: Equal, value: windows, effect: NoSchedule}
";

/// The issue "The chart takes pool kubeconfigs from Secrets": each pool's Secret, only its key, at
/// /etc/builder-monitor/pools/NAME/kubeconfig in the daemon container; the pod templates at
/// /etc/builder-monitor/templates/ in both containers; `check` holds the config's pools to them.
#[test]
fn pools_mount_their_kubeconfig_secrets_and_both_containers_the_pod_templates() {
    let ws = Workspace::new();
    helm_ok(&["lint", "--strict", CHART, "-f", values_with(&ws, POOLS_HEAD, POOLS_CONFIG).to_str().unwrap()]);
    let docs = render_with(POOLS_HEAD, POOLS_CONFIG);
    assert_locked_down(&docs);
    assert_bound(&docs);
    // `check` passes, reading the templates where the chart mounts them (absolute or relative to
    // the config), and the pools' clusters need nothing of the chart's RBAC.
    assert_eq!(granted(&docs), check_and_required(&docs, &[]));
    let volumes = pod(&docs)["volumes"].as_array().unwrap();
    let volume =
        |name: &Value| volumes.iter().find(|v| v["name"] == *name).unwrap_or_else(|| panic!("no volume {name}"));
    let mounts = |list: &str, name: &str| -> Vec<(String, Value)> {
        let c = container(&docs, list, name);
        let mounts = c["volumeMounts"].as_array().unwrap();
        mounts.iter().map(|m| (m["mountPath"].as_str().unwrap().to_string(), m.clone())).collect()
    };
    let daemon = mounts("containers", "builder-monitor");
    let check = mounts("initContainers", "check");
    for (name, secret, key) in [("arm", "bm-arm-kubeconfig", "kubeconfig"), ("win", "bm-win", "config")] {
        let dir = format!("{POOL_KUBECONFIGS}/{name}");
        let (_, mount) = daemon.iter().find(|(path, _)| *path == dir).unwrap_or_else(|| panic!("nothing at {dir}"));
        assert_eq!(mount["readOnly"], true);
        assert!(mount["subPath"].is_null(), "a subPath mount would never see the Secret change");
        assert_eq!(
            volume(&mount["name"])["secret"],
            serde_json::json!({"secretName": secret, "items": [{"key": key, "path": "kubeconfig"}], "defaultMode": 0o400}),
            "only the kubeconfig key, as the file `kubeconfig`, readable by its owner (and the fsGroup)"
        );
        assert!(check.iter().all(|(path, _)| !path.starts_with(POOL_KUBECONFIGS)), "`check` reads no kubeconfig");
    }
    let templates = "/etc/builder-monitor/templates";
    for (list, name, mounts) in [("containers", "builder-monitor", &daemon), ("initContainers", "check", &check)] {
        let (_, mount) = mounts.iter().find(|(path, _)| path == templates).unwrap_or_else(|| panic!("{list} {name}"));
        assert_eq!(mount["readOnly"], true);
        let map = config_map(&docs, &volume(&mount["name"])["configMap"]["name"]);
        assert_eq!(map["metadata"]["namespace"], "monitoring");
        assert_eq!(map["data"]["linux.yaml"], "spec:\n  nodeSelector:\n    node-pool: builds\n");
        assert!(map["data"]["windows.yaml"].as_str().unwrap().contains("value: windows"));
    }
    // A change to a template rolls the pods, as a change to the config does.
    let annotation = |docs: &[Value]| {
        one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/pod-templates"].clone()
    };
    let changed = render_with(&POOLS_HEAD.replace("node-pool: builds", "node-pool: big"), POOLS_CONFIG);
    assert!(annotation(&docs).is_string() && annotation(&docs) != annotation(&changed));
    // Without pools or templates: no such volumes, no annotation.
    let plain = render(&[]);
    assert!(pod(&plain)["volumes"].as_array().unwrap().iter().all(|v| v["secret"].is_null()));
    assert!(annotation(&plain).is_null());
    assert_eq!(one(&plain, "ConfigMap")["metadata"]["name"], "bm-builder-monitor", "no templates ConfigMap");
}

/// The init container holds the config's pool kubeconfigs to the chart's `pools`, and reads the
/// pod templates; values the chart cannot mount fail `helm template`.
#[test]
fn pools_and_templates_the_chart_cannot_run_stop_with_the_fix() {
    let stopped = |head: &str, config: &str, expected: &str| {
        let check = init_check(&render_with(head, config), &[]);
        assert!(check.code == Some(2) && check.stderr.contains(expected), "{head}\n→ {}", check.stderr);
    };
    stopped(
        &POOLS_HEAD.replace("  - {name: win, kubeconfigSecret: bm-win, key: config}\n", ""),
        POOLS_CONFIG,
        "pool \"win\": kubeconfig = \"/etc/builder-monitor/pools/win/kubeconfig\" is not mounted (the deployment mounts kubeconfigs for \"arm\")",
    );
    stopped(
        &POOLS_HEAD.replace("podTemplates:", "  - {name: linux, kubeconfigSecret: bm-linux}\npodTemplates:"),
        POOLS_CONFIG,
        "the deployment mounts the kubeconfig /etc/builder-monitor/pools/linux/kubeconfig, but no pool reads it",
    );
    // The templates are the binary's to judge, as the config is.
    stopped(
        &POOLS_HEAD
            .replace("    spec:\n      nodeSelector:", "    spec:\n      hostNetwork: true\n      nodeSelector:"),
        POOLS_CONFIG,
        "hostNetwork",
    );
    stopped(&POOLS_HEAD.replace("linux.yaml: |", "linux.yml: |"), POOLS_CONFIG, "linux.yaml");

    let refuse = |set: &[&str], expected: &str| {
        let mut args = vec!["template", "bm", CHART];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = helm().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{set:?}\n→ {stderr}");
    };
    for name in ["Arm", "arm_64", "-arm", "arm.linux", &"a".repeat(59)] {
        refuse(&[&format!("pools[0].name={name}"), "pools[0].kubeconfigSecret=k"], "name");
    }
    refuse(&["pools[0].name=arm"], "kubeconfigSecret");
    refuse(&["pools[0].name=arm", "pools[0].kubeconfigSecret=k", "pools[0].secret=k"], "secret");
    refuse(&["pools[0].name=arm", "pools[0].kubeconfigSecret=k", "pools[0].key=a/b"], "key");
    refuse(&["podTemplates.a/b=spec: {}"], "a/b");
    refuse(
        &["pools[0].name=arm", "pools[0].kubeconfigSecret=a", "pools[1].name=arm", "pools[1].kubeconfigSecret=b"],
        "pools: \"arm\" is listed twice",
    );
    refuse(
        &["pools[0].name=arm", "pools[0].kubeconfigSecret=a", "podSecurityContext.fsGroup=null"],
        "set podSecurityContext.fsGroup",
    );
    let longest = "a".repeat(58);
    let docs = render(&["--set", &format!("pools[0].name={longest}"), "--set", "pools[0].kubeconfigSecret=k"]);
    let name = format!("pool-{longest}");
    assert_eq!(name.len(), 63, "a volume name is a DNS label");
    assert!(pod(&docs)["volumes"].as_array().unwrap().iter().any(|v| v["name"] == name.as_str()));
}
