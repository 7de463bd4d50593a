//! A deploy target whose namespace is being terminated, on the real control plane (issue 62
//! item 7). Everything in such a namespace is being deleted (the server refuses new objects
//! there, and the controllers no longer roll out a workload being deleted); a finalizer on the
//! Deployment keeps it, and so the namespace, Terminating for the test. The deploy fails at once
//! naming why, instead of waiting out `deploy_timeout`, and the other target of its wave deploys.

use crate::support;

use serde_json::{Value, json};

use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::control_plane::control_plane;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

const HOLD: &str = "builder-monitor.test/hold";

fn deployment(name: &str, image: &str, finalizers: &[&str]) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": image}]}},
        },
    })
}

fn rolled_out(d: &Value) -> bool {
    let status = &d["status"];
    status["observedGeneration"] == d["metadata"]["generation"]
        && status["updatedReplicas"] == d["spec"]["replicas"]
        && status["availableReplicas"] == d["spec"]["replicas"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_into_a_terminating_namespace_fails_at_once_and_holds_no_other_target() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let live = control_plane().namespace("live").await;
    let doomed = control_plane().namespace("doomed").await;
    let mut images = String::new();
    for (name, ns, finalizers) in [("web", &live, vec![]), ("shop", &doomed, vec![HOLD])] {
        let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
        let digest = app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await.digest;
        ns.create(deployment(name, &format!("{host}/apps/{name}@{digest}"), &finalizers)).await;
        ns.wait_for("apps/v1", "Deployment", name, rolled_out).await;
        images += &format!(
            "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\n\
             deploy = [{{ kind = \"Deployment\", namespace = \"{}\", name = \"{name}\" }}]\n\n",
            ns.name
        );
    }
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{}\"\n\n\
         [rollout]\ndeploy_timeout = \"10m\"\n",
        live.kubeconfig.display(),
        live.name
    ));
    let first = ws.run(&["run", "--once", "--config", config.to_str().unwrap()]);
    assert_eq!(first.code, Some(0), "{}", first.stderr);

    // The namespace is deleted; its Deployment's finalizer keeps both there, Terminating.
    let namespaces = live.api("v1", "Namespace").await;
    namespaces.delete(&doomed.name, &Default::default()).await.expect("delete the namespace");
    doomed.wait_for("apps/v1", "Deployment", "shop", |d| d["metadata"]["deletionTimestamp"].is_string()).await;

    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    let mut daemon = Daemon::start(&config);
    let is = |v: &Value, event: &str, image: &str| {
        v["target"] == "builder_monitor_core::event"
            && v["event_type"] == event
            && serde_json::from_str::<Value>(v["event"].as_str().unwrap()).unwrap()["action"]["image"] == image
    };
    let failed = daemon.wait_for("shop's deploy.failed", |v| is(v, "deploy.failed", "shop"));
    let failed: Value = serde_json::from_str(failed["event"].as_str().unwrap()).unwrap();
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("Deployment {}/shop is being deleted", doomed.name))
            && detail.contains(&format!("its namespace \"{}\" may be being terminated", doomed.name)),
        "{detail}"
    );
    // web's deploy runs beside shop's: its success may have come before shop's failure.
    let web_done = |v: &Value| is(v, "deploy.succeeded", "web");
    let seen = daemon.log.iter().any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| web_done(&v)));
    if !seen {
        daemon.wait_for("web's deploy.succeeded", web_done);
    }
    let (status, _) = daemon.terminate();
    assert!(status.success());

    // Let the namespace go.
    let shop = doomed.api("apps/v1", "Deployment").await;
    let patch = json!({"metadata": {"finalizers": null}});
    shop.patch("shop", &Default::default(), &kube::api::Patch::Merge(&patch)).await.expect("remove the finalizer");
}
