//! A StatefulSet's forced rollback across a crash, on the Kubernetes API double (the real server
//! gives no pause of one workload's controller on demand): the daemon dies after its undo put the
//! StatefulSet's template back and before it deleted the pod stuck on the undone revision; the
//! restarted daemon finishes the undo and replaces that pod, which the controller (OrderedReady)
//! would otherwise wait on for ever.

use super::*;

/// The image of the StatefulSet's container `app`.
fn image(kube: &KubeDouble) -> Option<String> {
    let set = kube.workload("StatefulSet", "shop", "db")?;
    set["spec"]["template"]["spec"]["containers"][0]["image"].as_str().map(str::to_string)
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The names of the StatefulSet's pods that are not Ready.
fn not_ready(kube: &KubeDouble) -> Vec<String> {
    let pods = kube.pods_of("StatefulSet", "shop", "db");
    pods.iter().filter(|p| !ready(p)).map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_between_a_statefulsets_undo_and_its_pod_deletion_replaces_the_pod_after_restart() {
    let extra = "[rollout]\nfail_after = \"5s\"\ndeploy_timeout = \"2m\"\n";
    let w =
        World::with_kind(&[("db", 0, &[("shop", "db")])], "StatefulSet", Some("app"), extra, &|_| String::new()).await;
    let before = image(&w.kube).unwrap();
    // The controller waits, so the digest the deploy writes can be made to fail.
    w.kube.hold_rollout("StatefulSet", "shop", "db");
    w.move_run_image().await;
    let mut daemon = Daemon::start(&w.config);
    daemon.wait_for_event("deploy.started");
    let written = image(&w.kube).unwrap();
    assert_ne!(written, before);
    w.kube.fail_image(&written, Failure::ImagePullBackOff);
    w.kube.release_rollout("StatefulSet", "shop", "db");
    // Its pod on the new revision stuck pulling; held again at once (the undo comes `fail_after`, 5 s,
    // later), the controller never sees the put-back template, so the undo waits for it, and the
    // daemon is killed there: template back, the stuck pod not deleted.
    w.kube.wait_until("a pod stuck on the deploy's revision", |k| (!not_ready(k).is_empty()).then_some(())).await;
    w.kube.hold_rollout("StatefulSet", "shop", "db");
    w.kube.wait_until("the template put back", |k| (image(k)? == before).then_some(())).await;
    daemon.kill();
    let stuck = not_ready(&w.kube);
    assert_eq!(stuck.len(), 1, "the pod on the undone revision is still there");
    // The controller sees the put-back template and, OrderedReady, waits on the stuck pod.
    w.kube.release_rollout("StatefulSet", "shop", "db");

    let mut daemon = Daemon::start(&w.config);
    let failed = daemon.wait_for_event("deploy.failed");
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let detail = failed["action"]["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("replaced {} of StatefulSet shop/db", stuck[0])), "{detail}");
    w.kube
        .wait_until("both pods Ready on the put-back template, the stuck one replaced", |k| {
            let pods = k.pods_of("StatefulSet", "shop", "db");
            let names: Vec<&str> = pods.iter().filter_map(|p| p["metadata"]["name"].as_str()).collect();
            (pods.len() == 2 && pods.iter().all(ready) && !names.contains(&stuck[0].as_str())).then_some(())
        })
        .await;
    assert_eq!(image(&w.kube).unwrap(), before);
    assert_eq!(w.tag("db").await, w.built("db"), "the tag is back too");
}
