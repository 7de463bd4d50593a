//! The Helm chart's RBAC on the real control plane (issue 62 item 5): what `helm template`
//! renders from `templates/rbac.yaml` and `templates/serviceaccount.yaml` for the values that
//! match the config, applied as Helm would, is all the daemon needs: under that ServiceAccount's
//! token it starts, pins into the ConfigMap ledger under the Lease, publishes its ClusterBuilder
//! (status included) and prunes.

use crate::support;

use std::process::Command;

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::exact_rbac::{World, apply, await_granted, await_granted_in, token};
use support::daemon::Daemon;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/builder-monitor");

/// `helm template RELEASE CHART --namespace NAMESPACE` of the RBAC and the ServiceAccount, with
/// `set` values, as JSON documents.
fn rendered_rbac(release: &str, namespace: &str, set: &[&str]) -> Vec<Value> {
    let helm = std::env::var_os("HELM").unwrap_or_else(|| {
        panic!(
            "HELM is not set: run the tests with scripts/test, which installs Helm, or set HELM to a Helm 3/4 binary"
        )
    });
    let home = std::env::temp_dir().join("builder-monitor-helm-home");
    let mut command = Command::new(helm);
    command
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .args(["template", release, CHART, "--namespace", namespace])
        .args(["--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml"]);
    for value in set {
        command.args(["--set", value]);
    }
    let out = command.output().expect("run helm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "helm template failed:\n{text}{}", String::from_utf8_lossy(&out.stderr));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// Every feature of the default values but the runner, with prune: the chart's RBAC bound to its
/// ServiceAccount is exactly enough for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_works_under_the_rbac_the_chart_renders_for_its_values() {
    // The current CRD, as the chart's `crds/` installs it (another test installs an older one
    // for a while).
    let _crd = crate::cluster_builders::CRD.read().await;
    let w = World::new("publish = true\nprune = true\n").await;
    let ns = &w.ns.name;
    crate::cluster_builders::install(&w.ns, &crate::cluster_builders::printed_crd()[0]).await;
    let release = format!("{ns}-chart");
    let docs = rendered_rbac(&release, ns, &["features.prune=true", "features.publish=true"]);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"ClusterRole") && kinds.contains(&"ServiceAccount"), "{kinds:?}");
    apply(&w.ns.client, &docs).await;
    let account = format!("{release}-builder-monitor");
    await_granted(&w.ns.client, ns, &account, "update", "coordination.k8s.io", "leases").await;
    await_granted_in(&w.ns.client, ns, &account, "default", "create", "", "events").await;
    w.use_token(&token(&w.ns.client, ns, &account).await);

    // A ClusterBuilder of this installation no builder names any more: pruned.
    let cluster_builders = w.ns.api("buildermonitor.dev/v1alpha1", "ClusterBuilder").await;
    let retired = format!("{ns}-retired");
    let object = json!({"apiVersion": "buildermonitor.dev/v1alpha1", "kind": "ClusterBuilder",
        "metadata": {"name": retired, "labels": {"app.kubernetes.io/managed-by": "builder-monitor",
            "buildermonitor.dev/namespace": ns}},
        "spec": {"image": "example.test/x:latest"}});
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    cluster_builders.create(&PostParams::default(), &object).await.unwrap();

    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for("the prune", |l| l["message"] == "pruned: no builder of that name is configured");
    daemon.wait_for_event("builder.pinned");
    let published = w
        .ns
        .wait_for("buildermonitor.dev/v1alpha1", "ClusterBuilder", "jammy", |o| o["status"]["latestImage"].is_string())
        .await;
    assert_eq!(published["metadata"]["labels"]["buildermonitor.dev/namespace"], json!(ns));
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{}", log.join("\n"));
    // Nothing of the cluster refused or failed and retried (the registry's run image is not
    // there: that warning is the registry's).
    let warnings: Vec<&String> = log
        .iter()
        .filter(|l| {
            l.contains("forbidden") || (l.contains("\"level\":\"WARN\"") && l.contains("builder_monitor::cluster"))
        })
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert!(cluster_builders.get_opt(&retired).await.unwrap().is_none(), "pruned");
    assert!(w.ns.get("coordination.k8s.io/v1", "Lease", "builder-monitor").await.is_some(), "the Lease");
    let configmaps = w.ns.api("v1", "ConfigMap").await;
    let ledger =
        configmaps.list(&kube::api::ListParams::default().labels("buildermonitor.dev/ledger=watch")).await.unwrap();
    assert!(!ledger.items.is_empty(), "the ledger's ConfigMaps");
    cluster_builders.delete("jammy", &Default::default()).await.unwrap();
}
