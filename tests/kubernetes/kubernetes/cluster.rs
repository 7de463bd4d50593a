//! The daemon as a cluster member: ClusterBuilders carrying the pin history, conditions and Events,
//! and two replicas under leader election, one acting, the other taking over when the lease is
//! released, expires or is lost.

use super::*;

/// A daemon config keeping its ledger in namespace `bm` of the double, publishing ClusterBuilders;
/// `kubernetes` adds lines to the `[kubernetes]` table, `builders` more `[[builders]]`.
fn cluster_config(w: &World, dir: &Path, kubernetes: &str, builders: &str) -> std::path::PathBuf {
    // Where the ClusterBuilders' Events go, as on every real cluster.
    w.double.create_namespace("default");
    let kubeconfig = w.double.kubeconfig(dir);
    let extra = format!(
        "\n[kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"bm\"\npublish = true\n{kubernetes}\n{builders}",
        kubeconfig.display()
    );
    let text = w.config("kubernetes", &extra).replace("state = \"state.db\"", "state = \"kubernetes\"");
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn cluster_builder(w: &World, name: &str) -> Option<Value> {
    w.double.get("clusterbuilders", None, name)
}

/// The Kubernetes Events recorded on a ClusterBuilder, oldest first.
fn kube_events(w: &World, name: &str) -> Vec<Value> {
    w.double.list("events").into_iter().filter(|e| e["involvedObject"]["name"] == name).collect()
}

// The daemon's log is read by blocking calls while the in-process API double serves: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_builders_carry_the_pin_history_conditions_and_events() {
    let w = World::new().await;
    w.double.create_namespace("bm");
    // A ClusterBuilder of a builder no longer configured, and one another tool owns.
    let ours = json!({ "app.kubernetes.io/managed-by": "builder-monitor", "buildermonitor.dev/namespace": "bm" });
    for (name, labels) in [("retired", ours), ("foreign", json!({}))] {
        w.double.put(
            "buildermonitor.dev",
            "v1alpha1",
            "clusterbuilders",
            None,
            json!({
            "apiVersion": "buildermonitor.dev/v1alpha1", "kind": "ClusterBuilder",
            "metadata": { "name": name, "labels": labels }, "spec": { "image": "registry.test/x:latest" } }),
        );
    }
    let (run_v1, _) = w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    let pushed_v1 = w.push_builder(&v1).await;
    let ws = Workspace::new();
    let missing = format!("[[builders]]\nname = \"gone\"\nimage = \"{}/demo/nothing:latest\"\n", w.registry.host);
    let config = cluster_config(&w, ws.dir.path(), "prune = true", &missing);
    let mut daemon = Daemon::start(&config);
    let builder_repo = format!("{}/demo/builder", w.registry.host);

    let v1_ref = format!("{builder_repo}@{}", pushed_v1.digest);
    let jammy = w
        .double
        .wait_until("jammy pinned in its status", |_| {
            cluster_builder(&w, "jammy").filter(|o| o["status"]["latestImage"] == v1_ref.as_str())
        })
        .await;
    assert_eq!(jammy["spec"]["image"], format!("{builder_repo}:latest"));
    assert_eq!(jammy["spec"]["interval"], "200ms");
    assert_eq!(jammy["metadata"]["labels"]["app.kubernetes.io/managed-by"], "builder-monitor");
    let status = &jammy["status"];
    assert_eq!(status["lifecycle"]["version"], "0.21.13");
    assert_eq!(status["stack"]["id"], "io.buildpacks.stacks.jammy");
    assert!(status["builderMetadata"].as_array().unwrap().iter().any(|b| b["id"] == "paketo-buildpacks/java"));
    assert_eq!(status["conditions"][0]["type"], "Ready");
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["history"].as_array().unwrap().len(), 1);
    let run_ref = format!("{}/demo/run@{}", w.registry.host, run_v1.digest);
    w.double
        .wait_until("the run image pinned in stack.runImage", |_| {
            cluster_builder(&w, "jammy").filter(|o| o["status"]["stack"]["runImage"] == run_ref.as_str())
        })
        .await;

    let gone = w
        .double
        .wait_until("the missing tag reported", |_| {
            cluster_builder(&w, "gone").filter(|o| o["status"]["conditions"][0]["status"] == "False")
        })
        .await;
    assert_eq!(gone["status"]["conditions"][0]["reason"], "TagMissing");
    assert!(gone["status"]["latestImage"].is_null());
    w.double
        .wait_until("a Warning event for the missing tag", |_| {
            kube_events(&w, "gone").into_iter().find(|e| e["type"] == "Warning" && e["reason"] == "TagMissing")
        })
        .await;
    assert!(cluster_builder(&w, "retired").is_none(), "pruned");
    assert!(cluster_builder(&w, "foreign").is_some(), "not ours: kept");

    let pushed_v2 = w.push_builder(&v1.bump("paketo-buildpacks/java", "18.2.0")).await;
    let v2_ref = format!("{builder_repo}@{}", pushed_v2.digest);
    let jammy = w
        .double
        .wait_until("the move published", |_| {
            cluster_builder(&w, "jammy").filter(|o| o["status"]["latestImage"] == v2_ref.as_str())
        })
        .await;
    let status = &jammy["status"];
    let history: Vec<&str> =
        status["history"].as_array().unwrap().iter().map(|h| h["digest"].as_str().unwrap()).collect();
    assert_eq!(history, [pushed_v2.digest.as_str(), pushed_v1.digest.as_str()], "newest first");
    assert_eq!(status["lastChange"]["kind"], "rebuild");
    assert!(status["lastChange"]["reasons"].as_array().unwrap().contains(&json!("BUILDPACK")));
    assert!(status["lastChangeTime"].is_string());
    let event = w
        .double
        .wait_until("the change recorded as an Event", |_| {
            kube_events(&w, "jammy").into_iter().find(|e| e["reason"] == "RebuildNeeded")
        })
        .await;
    assert_eq!(event["involvedObject"]["kind"], "ClusterBuilder");
    assert_eq!(event["involvedObject"]["uid"], jammy["metadata"]["uid"]);
    assert!(event["message"].as_str().unwrap().contains(&v2_ref), "{event}");
    daemon.wait_for("the rebuild Job", |v| v["message"] == "Job created");
    daemon.kill();

    // A restarted daemon reads its ledger back from the cluster: no second change, Job or Event.
    let mut daemon = Daemon::start(&config);
    for _ in 0..4 {
        daemon.wait_for("a check", |v| v["message"] == "check done" && v["watch"] == "jammy");
    }
    let (status, log) = daemon.terminate();
    assert!(status.success());
    assert!(!log.iter().any(|l| l.contains("\"builder.changed\"")), "no change seen again");
    let ledger = Ledger::kubernetes(w.double.client(), "bm", chrono::Utc::now());
    assert_eq!(ledger.changes(Some("jammy"), 10).await.unwrap().len(), 1);
    assert_eq!(w.double.list("jobs").len(), 1);
    assert_eq!(kube_events(&w, "jammy").iter().filter(|e| e["reason"] == "RebuildNeeded").count(), 1);
    assert!(ws.dir.path().read_dir().unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains(".db")));
}

fn lease_holder(w: &World) -> Option<String> {
    let lease = w.double.get("leases", Some("bm"), "builder-monitor")?;
    lease["spec"]["holderIdentity"].as_str().map(str::to_string)
}

// Two daemons and the double: blocking log reads on one thread, the double on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_acts_and_the_other_takes_over() {
    let w = World::new().await;
    w.double.create_namespace("bm");
    w.push_run("1").await;
    let v1 = BuilderSpec::jammy(&w.run);
    w.push_builder(&v1).await;
    let ws = Workspace::new();
    let lease = Duration::from_secs(4);
    let election = "leader_election = true\nlease_duration = \"4s\"\nrenew_deadline = \"3s\"\nretry_period = \"200ms\"";
    let config = cluster_config(&w, ws.dir.path(), election, "");

    let mut a = Daemon::start_with_env(&config, &[("POD_NAME", "replica-a")]);
    a.wait_for("a leads", |v| v["message"] == "became leader");
    a.wait_for_event("builder.pinned");
    let mut b = Daemon::start_with_env(&config, &[("POD_NAME", "replica-b")]);
    b.wait_for("b stands by", |v| v["message"].as_str().is_some_and(|m| m.starts_with("campaigning")));
    assert_eq!(lease_holder(&w).as_deref(), Some("replica-a"));

    w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.2.0")).await;
    a.wait_for("the Job", |v| v["message"] == "Job created");
    a.kill();
    let killed = Instant::now();
    b.wait_for("b takes over", |v| v["message"] == "became leader");
    let took = killed.elapsed();
    assert!(took <= lease + Duration::from_secs(2), "took over after {took:?}");
    assert_eq!(lease_holder(&w).as_deref(), Some("replica-b"));
    let transitions =
        w.double.get("leases", Some("bm"), "builder-monitor").unwrap()["spec"]["leaseTransitions"].clone();
    assert_eq!(transitions, 1);
    b.wait_for("b follows the Job a created", |v| {
        v["message"] == "Job exists already (a retry or restart); following it"
    });

    w.push_builder(&v1.clone().bump("paketo-buildpacks/java", "18.3.0")).await;
    b.wait_for_event("builder.changed");
    // One action per app image at a time: the newer rebuild waits for the older one's Job.
    let jobs = w.double.list("jobs");
    assert_eq!(jobs.len(), 1, "the newer rebuild waits while the older one runs");
    let (namespace, name) = (jobs[0]["metadata"]["namespace"].as_str(), jobs[0]["metadata"]["name"].as_str().unwrap());
    w.double.set_status(
        "jobs",
        namespace,
        name,
        json!({ "succeeded": 1, "conditions": [{ "type": "Complete", "status": "True" }] }),
    );
    b.wait_for("b's Job", |v| v["message"] == "Job created");

    // A standby again; a SIGTERMed leader hands the lease over at once instead of letting it expire.
    let mut a = Daemon::start_with_env(&config, &[("POD_NAME", "replica-a")]);
    a.wait_for("a stands by", |v| v["message"].as_str().is_some_and(|m| m.starts_with("campaigning")));
    let (status, log) = b.terminate();
    let stopped = Instant::now();
    assert!(status.success());
    assert!(log.iter().any(|l| l.contains("released the lease")), "{}", log.join("\n"));
    a.wait_for("a leads again", |v| v["message"] == "became leader");
    assert!(stopped.elapsed() < Duration::from_secs(3), "hand-over took {:?}", stopped.elapsed());
    let (status, _) = a.terminate();
    assert!(status.success());

    let ledger = Ledger::kubernetes(w.double.client(), "bm", chrono::Utc::now());
    let changes = ledger.changes(Some("jammy"), 10).await.unwrap();
    assert_eq!(changes.len(), 2, "each move recorded once: {changes:?}");
    let changed: Vec<_> = ledger
        .events_after(0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event.event_type == EventType::BuilderChanged)
        .collect();
    assert_eq!(changed.len(), 2);
    assert_eq!(w.double.list("jobs").len(), 2, "one Job per change, none twice");
    assert_eq!(kube_events(&w, "jammy").iter().filter(|e| e["reason"] == "RebuildNeeded").count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_acting_within_the_renew_deadline() {
    let w = World::new().await;
    w.double.create_namespace("bm");
    w.push_run("1").await;
    w.push_builder(&BuilderSpec::jammy(&w.run)).await;
    let ws = Workspace::new();
    let election =
        "leader_election = true\nlease_duration = \"30s\"\nrenew_deadline = \"3s\"\nretry_period = \"200ms\"";
    let config = cluster_config(&w, ws.dir.path(), election, "");
    let mut a = Daemon::start_with_env(&config, &[("POD_NAME", "replica-a")]);
    a.wait_for("a leads", |v| v["message"] == "became leader");
    a.wait_for("a check", |v| v["message"] == "check done");

    // Another holder writes the lease (as after a partition in which it expired).
    let mut lease = w.double.get("leases", Some("bm"), "builder-monitor").unwrap();
    lease["spec"]["holderIdentity"] = json!("intruder");
    w.double.put("coordination.k8s.io", "v1", "leases", Some("bm"), lease);
    let taken = Instant::now();
    a.wait_for("a steps down", |v| v["message"] == "stopped acting; standing by");
    assert!(taken.elapsed() < Duration::from_secs(3), "stepped down after {:?}", taken.elapsed());
    // No check runs once it stepped down (five check intervals watched).
    let quiet_until = Instant::now() + Duration::from_secs(1);
    let mut checks_after = 0;
    while Instant::now() < quiet_until {
        if let Some(line) = a.next_line(quiet_until - Instant::now())
            && line["message"] == "check done"
        {
            checks_after += 1;
        }
    }
    assert_eq!(checks_after, 0, "checks after stepping down");
    assert_eq!(lease_holder(&w).as_deref(), Some("intruder"));
}
