use super::*;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn workload(kind: WorkloadKind, name: &str, container: Option<&str>) -> Workload {
    Workload {
        kind,
        namespace: "shop".into(),
        name: name.into(),
        container: container.map(Into::into),
        gitops_owned: GitopsOwned::Skip,
    }
}

fn app(text: &str) -> ImageRef {
    ImageRef::parse(text).unwrap()
}

/// A Deployment whose pod template has these init containers and containers (name, image).
fn deployment(init: &[(&str, &str)], main: &[(&str, &str)]) -> Value {
    let list = |cs: &[(&str, &str)]| -> Vec<Value> {
        cs.iter().map(|(n, i)| json!({"name": n, "image": i, "ports": [{"containerPort": 8080}]})).collect()
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "petclinic", "namespace": "shop"},
        "spec": {"template": {"spec": {"initContainers": list(init), "containers": list(main)}}},
    })
}

fn names(containers: &[Container]) -> Vec<&str> {
    containers.iter().map(|c| c.name.as_str()).collect()
}

// ---- kinds and settings ------------------------------------------------------------------------

#[test]
fn kinds_and_undo_parse_by_their_names() {
    for kind in WorkloadKind::ALL {
        assert_eq!(WorkloadKind::parse(kind.as_str()), Some(kind));
    }
    assert_eq!(WorkloadKind::parse("deployment"), None, "kinds are case-sensitive, as in a manifest");
    assert_eq!(WorkloadKind::parse("Job"), None);
    assert_eq!((WorkloadKind::CronJob.group(), WorkloadKind::CronJob.api_version()), ("batch", "batch/v1"));
    assert_eq!((WorkloadKind::DaemonSet.plural(), WorkloadKind::DaemonSet.api_version()), ("daemonsets", "apps/v1"));
    assert!(!WorkloadKind::CronJob.has_health() && WorkloadKind::StatefulSet.has_health());
    for undo in [Undo::WorkloadAndTag, Undo::Workload, Undo::None] {
        assert_eq!(Undo::parse(undo.as_str()), Some(undo));
    }
    assert_eq!(Undo::parse("tag"), None);
    assert_eq!(Undo::default(), Undo::WorkloadAndTag);
    assert!(Undo::WorkloadAndTag.tag() && !Undo::Workload.tag() && !Undo::None.workloads());
}

#[test]
fn a_workload_reads_and_prints_as_configured() {
    let w: Workload = serde_json::from_value(
        json!({"kind": "CronJob", "namespace": "shop", "name": "nightly", "gitops_owned": "patch"}),
    )
    .unwrap();
    assert_eq!((w.kind, w.gitops_owned, w.container.as_deref()), (WorkloadKind::CronJob, GitopsOwned::Patch, None));
    assert_eq!(w.to_string(), "CronJob shop/nightly");
    let skip = workload(WorkloadKind::Deployment, "petclinic", None);
    assert_eq!(
        serde_json::to_value(&skip).unwrap(),
        json!({"kind": "Deployment", "namespace": "shop", "name": "petclinic"}),
        "the defaults are left out"
    );
}

// ---- targets ----------------------------------------------------------------------------------

#[test]
fn a_named_container_is_the_target_whatever_it_runs() {
    let object = deployment(&[], &[("app", "r.example/apps/petclinic:1"), ("proxy", "envoyproxy/envoy:v1")]);
    let w = workload(WorkloadKind::Deployment, "petclinic", Some("proxy"));
    let chosen = targets(&w, &object, &app("r.example/apps/petclinic")).unwrap();
    assert_eq!(chosen, [Container { name: "proxy".into(), image: "envoyproxy/envoy:v1".into() }]);
}

#[test]
fn without_a_name_every_container_of_the_repository_is_a_target_at_any_tag_or_digest() {
    let object = deployment(
        &[],
        &[
            ("tagged", "r.example/apps/petclinic:1.2"),
            ("pinned", &format!("r.example/apps/petclinic@{DIGEST}")),
            ("both", &format!("r.example/apps/petclinic:1.2@{DIGEST}")),
            ("bare", "r.example/apps/petclinic"),
            ("other-repo", "r.example/apps/petclinic-worker:1.2"),
            ("other-registry", "ghcr.io/apps/petclinic:1.2"),
        ],
    );
    let w = workload(WorkloadKind::Deployment, "petclinic", None);
    let chosen = targets(&w, &object, &app("r.example/apps/petclinic:latest")).unwrap();
    assert_eq!(names(&chosen), ["tagged", "pinned", "both", "bare"]);
}

#[test]
fn docker_hub_names_match_however_they_are_written() {
    let object = deployment(
        &[],
        &[
            ("short", "nginx:1.27"),
            ("library", "library/nginx"),
            ("long", "docker.io/library/nginx:1.27"),
            ("legacy", &format!("index.docker.io/library/nginx@{DIGEST}")),
            ("user", "someone/nginx:1.27"),
        ],
    );
    let w = workload(WorkloadKind::Deployment, "petclinic", None);
    for written in ["nginx", "docker.io/library/nginx:stable", "library/nginx:1"] {
        let chosen = targets(&w, &object, &app(written)).unwrap();
        assert_eq!(names(&chosen), ["short", "library", "long", "legacy"], "{written}");
    }
    assert!(names_repository("docker.io/library/nginx", &app("nginx")));
    assert!(!names_repository("not a reference", &app("nginx")));
}

#[test]
fn init_containers_are_targets_too() {
    let object = deployment(
        &[("migrate", "r.example/apps/petclinic:1"), ("wait", "busybox")],
        &[("app", "r.example/apps/petclinic:1")],
    );
    let w = workload(WorkloadKind::Deployment, "petclinic", None);
    let chosen = targets(&w, &object, &app("r.example/apps/petclinic")).unwrap();
    assert_eq!(names(&chosen), ["migrate", "app"]);
    let by_name = workload(WorkloadKind::Deployment, "petclinic", Some("wait"));
    assert_eq!(names(&targets(&by_name, &object, &app("r.example/apps/petclinic")).unwrap()), ["wait"]);
    // `containers` tells them apart, for `apply_body`.
    let all = containers(WorkloadKind::Deployment, &object).unwrap();
    let init: Vec<(bool, &str)> = all.iter().map(|(i, c)| (*i, c.name.as_str())).collect();
    assert_eq!(init, [(true, "migrate"), (true, "wait"), (false, "app")]);
}

#[test]
fn a_cronjob_s_containers_are_in_its_job_template() {
    let object = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "job", "image": "r.example/apps/report:3"}]}}}}}});
    let w = workload(WorkloadKind::CronJob, "nightly", None);
    assert_eq!(names(&targets(&w, &object, &app("r.example/apps/report")).unwrap()), ["job"]);
}

#[test]
fn why_no_target_is_found_names_what_there_is() {
    let repo = app("r.example/apps/petclinic");
    let object = deployment(&[("migrate", "busybox")], &[("app", "r.example/apps/other:1")]);

    let named = workload(WorkloadKind::Deployment, "petclinic", Some("api"));
    assert_eq!(
        targets(&named, &object, &repo).unwrap_err().to_string(),
        "Deployment shop/petclinic has no container \"api\" (it has: migrate, app)"
    );

    let any = workload(WorkloadKind::Deployment, "petclinic", None);
    assert_eq!(
        targets(&any, &object, &repo).unwrap_err().to_string(),
        "no container of Deployment shop/petclinic runs r.example/apps/petclinic (its images: busybox, \
         r.example/apps/other:1); name one with container = \"…\""
    );

    let empty = deployment(&[], &[]);
    assert_eq!(
        targets(&any, &empty, &repo).unwrap_err().to_string(),
        "no container of Deployment shop/petclinic runs r.example/apps/petclinic (its images: none); name one \
         with container = \"…\""
    );
    assert_eq!(
        targets(&named, &empty, &repo).unwrap_err().to_string(),
        "Deployment shop/petclinic has no container \"api\" (it has: none)"
    );

    // A CronJob read as if it were a Deployment has no template where the kind says.
    let cron = workload(WorkloadKind::CronJob, "nightly", None);
    let err = targets(&cron, &object, &repo).unwrap_err();
    assert_eq!(
        err,
        DeployError::NoTemplate { workload: "CronJob shop/nightly".into(), pointer: "/spec/jobTemplate/spec/template" }
    );
    assert_eq!(err.to_string(), "CronJob shop/nightly has no pod template at /spec/jobTemplate/spec/template");
}

// ---- GitOps marks -----------------------------------------------------------------------------

#[test]
fn every_gitops_mark_is_found_in_labels_and_in_annotations() {
    for mark in GITOPS_MARKS {
        for field in ["labels", "annotations"] {
            let object = json!({"metadata": {"name": "x", field: {"app": "petclinic", mark: "shop"}}});
            assert_eq!(gitops_owner(&object), Some(mark), "{mark} in {field}");
        }
    }
}

#[test]
fn an_object_without_a_mark_has_no_gitops_owner() {
    let plain = json!({"metadata": {
        "labels": {"app.kubernetes.io/instance": "petclinic", "app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"deployment.kubernetes.io/revision": "3"},
    }});
    assert_eq!(gitops_owner(&plain), None);
    assert_eq!(gitops_owner(&json!({"metadata": {"name": "x"}})), None);
    assert_eq!(gitops_owner(&json!({})), None);
    // A mark's key as a value is no mark.
    assert_eq!(gitops_owner(&json!({"metadata": {"labels": {"owner": "argocd.argoproj.io/instance"}}})), None);
}

// ---- apply bodies -----------------------------------------------------------------------------

#[test]
fn a_deployment_s_apply_body_holds_only_names_images_and_the_annotation() {
    let object = deployment(
        &[("migrate", "r.example/apps/petclinic:1")],
        &[("app", "r.example/apps/petclinic:1"), ("proxy", "envoyproxy/envoy:v1")],
    );
    let reference = format!("r.example/apps/petclinic@{DIGEST}");
    let images: Vec<(bool, Container)> = containers(WorkloadKind::Deployment, &object)
        .unwrap()
        .into_iter()
        .filter(|(_, c)| c.name != "proxy")
        .map(|(init, c)| (init, Container { image: reference.clone(), ..c }))
        .collect();
    let w = workload(WorkloadKind::Deployment, "petclinic", None);
    assert_eq!(
        apply_body(&w, &images, Some("3f2a")),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "petclinic", "namespace": "shop"},
            "spec": {"template": {
                "metadata": {"annotations": {"buildermonitor.dev/change": "3f2a"}},
                "spec": {
                    "initContainers": [{"name": "migrate", "image": reference}],
                    "containers": [{"name": "app", "image": reference}],
                },
            }},
        })
    );
    // An undo writes no annotation; a list without entries is left out.
    let main = [(false, Container { name: "app".into(), image: "r.example/apps/petclinic:1".into() })];
    assert_eq!(
        apply_body(&w, &main, None)["spec"],
        json!({"template": {"spec": {"containers": [{"name": "app", "image": "r.example/apps/petclinic:1"}]}}})
    );
}

#[test]
fn a_cronjob_s_apply_body_nests_the_template_in_its_job_template() {
    let w = workload(WorkloadKind::CronJob, "nightly", None);
    let images = [(false, Container { name: "job".into(), image: format!("r.example/apps/report@{DIGEST}") })];
    assert_eq!(
        apply_body(&w, &images, Some("3f2a")),
        json!({
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {"jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": {"buildermonitor.dev/change": "3f2a"}},
                "spec": {"containers": [{"name": "job", "image": format!("r.example/apps/report@{DIGEST}")}]},
            }}}},
        })
    );
    for kind in [WorkloadKind::StatefulSet, WorkloadKind::DaemonSet] {
        let body = apply_body(&workload(kind, "x", None), &images, None);
        assert_eq!((body["apiVersion"].as_str(), body["kind"].as_str()), (Some("apps/v1"), Some(kind.as_str())));
        assert!(body.pointer("/spec/template/spec/containers/0/image").is_some(), "{body}");
    }
}

// ---- health -----------------------------------------------------------------------------------

mod health;
use health::{object, progressing};

#[test]
fn a_selector_is_its_match_labels_in_order() {
    let with = |selector: Value| json!({"spec": {"selector": selector}});
    assert_eq!(
        selector(&with(json!({"matchLabels": {"tier": "web", "app": "petclinic"}}))).as_deref(),
        Some("app=petclinic,tier=web")
    );
    assert_eq!(
        selector(&with(json!({"matchLabels": {"app": "petclinic"}, "matchExpressions": []}))).as_deref(),
        Some("app=petclinic")
    );
    let expression = json!([{"key": "tier", "operator": "In", "values": ["web"]}]);
    assert_eq!(selector(&with(json!({"matchLabels": {"app": "x"}, "matchExpressions": expression}))), None);
    assert_eq!(selector(&with(json!({"matchLabels": {}}))), None);
    assert_eq!(selector(&with(json!({}))), None);
    assert_eq!(selector(&json!({"spec": {}})), None, "a CronJob has none");
}

#[test]
fn a_pod_is_selected_when_it_has_every_match_label() {
    let workload = json!({"spec": {"selector": {"matchLabels": {"tier": "web", "app": "petclinic"}}}});
    let labels = selector_labels(&workload).unwrap();
    let pod = |labels: Value| json!({"metadata": {"labels": labels}});
    assert!(selects(&labels, &pod(json!({"app": "petclinic", "tier": "web", "pod-template-hash": "7f"}))));
    assert!(!selects(&labels, &pod(json!({"app": "petclinic"}))), "one label missing");
    assert!(!selects(&labels, &pod(json!({"app": "petclinic", "tier": "db"}))), "one label differs");
    assert!(!selects(&labels, &json!({"metadata": {}})), "no labels");
}

/// The progress record keeps each workload flat beside its containers and state, as `status`
/// reads it back from the ledger.
#[test]
fn progress_reads_back_as_written() {
    let progress = DeployProgress {
        workloads: vec![WorkloadProgress {
            workload: Workload {
                kind: WorkloadKind::Deployment,
                namespace: "shop".into(),
                name: "petclinic".into(),
                container: None,
                gitops_owned: GitopsOwned::Skip,
            },
            containers: vec![ContainerWrite {
                name: "app".into(),
                init: false,
                previous: "r/app:1".into(),
                image: "r/app@sha256:a".into(),
            }],
            previous_change: None,
            state: WorkloadState::Healthy,
            detail: None,
            written_at: Some("2026-12-01T09:00:00Z".into()),
            failed_revision: None,
        }],
        started: false,
    };
    let json = serde_json::to_value(&progress).unwrap();
    assert_eq!(
        json,
        json!({ "workloads": [{ "kind": "Deployment", "namespace": "shop", "name": "petclinic", "state": "healthy",
            "containers": [{ "name": "app", "previous": "r/app:1", "image": "r/app@sha256:a" }],
            "written_at": "2026-12-01T09:00:00Z" }] })
    );
    assert_eq!(serde_json::from_value::<DeployProgress>(json).unwrap(), progress);
}

/// A deploy's key is its own: never a rebase's or rebuild's key of the same change and image.
#[test]
fn a_deploy_key_is_stable_and_its_own() {
    assert_eq!(action_key("c1", "app"), action_key("c1", "app"));
    assert_ne!(action_key("c1", "app"), format!("bm-{}", crate::id::stable_id(&["c1", "app"])));
    assert_ne!(action_key("c1", "app"), action_key("c2", "app"));
}

#[test]
fn on_delete_workloads_are_done_once_their_controller_has_the_template() {
    // Pods on the old revision and nothing updated: with OnDelete that is what a good deploy looks
    // like until someone deletes the pods.
    let mut set = object(
        5,
        3,
        json!({"observedGeneration": 5, "readyReplicas": 3, "updatedReplicas": 0, "currentRevision": "db-1",
               "updateRevision": "db-2"}),
    );
    set["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    assert_eq!(health(WorkloadKind::StatefulSet, &set), Health::Healthy);
    set["status"]["observedGeneration"] = json!(4);
    assert_eq!(progressing(health(WorkloadKind::StatefulSet, &set)), "the controller has not seen generation 5 yet");

    let mut daemons = json!({"metadata": {"generation": 2}, "spec": {"updateStrategy": {"type": "OnDelete"}},
        "status": {"observedGeneration": 2, "desiredNumberScheduled": 4, "updatedNumberScheduled": 0, "numberAvailable": 4}});
    assert_eq!(health(WorkloadKind::DaemonSet, &daemons), Health::Healthy);
    // RollingUpdate (the default) still waits for the nodes.
    daemons["spec"]["updateStrategy"] = json!({"type": "RollingUpdate"});
    assert_eq!(progressing(health(WorkloadKind::DaemonSet, &daemons)), "0 of 4 nodes updated, 4 available");
    // OnDelete says nothing for a Deployment (it has no such strategy): the replicas still count.
    let mut deployment = object(1, 2, json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 0}));
    deployment["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    assert!(matches!(health(WorkloadKind::Deployment, &deployment), Health::Progressing(_)));
}

// ---- what a deploy wrote, now ------------------------------------------------------------------

fn write(name: &str, init: bool) -> ContainerWrite {
    ContainerWrite { name: name.into(), init, previous: format!("r/{name}:1"), image: format!("r/{name}@sha256:a") }
}

fn with_change(mut object: Value, change: &str) -> Value {
    object["spec"]["template"]["metadata"] = json!({"annotations": {CHANGE_ANNOTATION: change}});
    object
}

/// The undo puts back only containers that still run what was written; one a person set since
/// is theirs (named with what it runs), one already on its previous image needs nothing, and the
/// annotation goes back only when every written container does.
#[test]
fn an_undo_restores_only_containers_that_still_run_what_was_written() {
    let writes = [write("migrate", true), write("app", false), write("worker", false)];
    let object = with_change(
        deployment(
            &[("migrate", "r/migrate@sha256:a")],
            &[("app", "r/app:hotfix"), ("worker", "r/worker:1"), ("sidecar", "proxy:1")],
        ),
        "c1",
    );
    let plan = undo_plan(WorkloadKind::Deployment, &object, &writes, "c1");
    assert_eq!(plan.restore, vec![writes[0].clone()]);
    assert_eq!(plan.others, vec![Changed { name: "app".into(), init: false, image: Some("r/app:hotfix".into()) }]);
    assert_eq!(plan.others[0].to_string(), "container app runs r/app:hotfix");
    assert!(!plan.annotation, "someone else's template keeps the change annotation it has");

    let all_ours = with_change(
        deployment(&[("migrate", "r/migrate@sha256:a")], &[("app", "r/app@sha256:a"), ("worker", "r/worker@sha256:a")]),
        "c1",
    );
    let plan = undo_plan(WorkloadKind::Deployment, &all_ours, &writes, "c1");
    assert_eq!((plan.restore.len(), plan.others.len(), plan.annotation), (3, 0, true));
    // Another change's annotation is not ours to put back.
    assert!(!undo_plan(WorkloadKind::Deployment, &with_change(all_ours.clone(), "c2"), &writes, "c1").annotation);

    // Never written (or already put back): nothing to do.
    let before = deployment(&[("migrate", "r/migrate:1")], &[("app", "r/app:1"), ("worker", "r/worker:1")]);
    let plan = undo_plan(WorkloadKind::Deployment, &before, &writes, "c1");
    assert!(plan.is_empty() && plan.others.is_empty(), "{plan:?}");

    // A container removed since is someone else's change too.
    let removed = deployment(&[], &[("app", "r/app@sha256:a")]);
    let plan = undo_plan(WorkloadKind::Deployment, &removed, &writes[1..], "c1");
    assert_eq!(plan.others, vec![Changed { name: "worker".into(), init: false, image: None }]);
    assert_eq!(plan.others[0].to_string(), "container worker was removed");
}

/// The undo's patch carries only the restored containers' previous images, the annotation back
/// (null removes it) and the resourceVersion read, nested at the kind's template.
#[test]
fn an_undo_patch_names_only_what_it_restores_and_the_version_it_read() {
    let plan =
        UndoPlan { restore: vec![write("migrate", true), write("app", false)], others: vec![], annotation: true };
    assert_eq!(
        undo_patch(WorkloadKind::Deployment, &plan, None, "41"),
        json!({"metadata": {"resourceVersion": "41"}, "spec": {"template": {
            "metadata": {"annotations": {CHANGE_ANNOTATION: null}},
            "spec": {"initContainers": [{"name": "migrate", "image": "r/migrate:1"}],
                     "containers": [{"name": "app", "image": "r/app:1"}]}}}})
    );
    let plan = UndoPlan { restore: vec![write("app", false)], others: vec![], annotation: false };
    let patch = undo_patch(WorkloadKind::CronJob, &plan, Some("c0"), "7");
    assert_eq!(
        patch["spec"]["jobTemplate"]["spec"]["template"],
        json!({"spec": {"containers": [{"name": "app", "image": "r/app:1"}]}})
    );
}

/// The guard's index: a workload event is checked against the newest guarded deploy of each
/// image that wrote it; a newer deploy replaces the older, and a removed image is not checked.
#[test]
fn the_override_index_finds_only_what_a_guarded_deploy_no_longer_runs() {
    let progress = |name: &str, state: WorkloadState, image: &str| DeployProgress {
        workloads: vec![WorkloadProgress {
            workload: workload(WorkloadKind::Deployment, name, None),
            containers: vec![ContainerWrite {
                name: "app".into(),
                init: false,
                previous: "r/app:1".into(),
                image: image.into(),
            }],
            previous_change: None,
            state,
            detail: None,
            written_at: None,
            failed_revision: None,
        }],
        started: true,
    };
    let guarded = |key: &str, p: DeployProgress| Guarded {
        image: "petclinic".into(),
        key: key.into(),
        change: "c1".into(),
        attempt: 1,
        progress: p,
    };
    let mut index = OverrideIndex::default();
    index.insert(guarded("k1", progress("web", WorkloadState::Healthy, "r/app@sha256:a")));
    let ours = deployment(&[], &[("app", "r/app@sha256:a")]);
    let theirs = deployment(&[], &[("app", "r/app:hotfix")]);
    assert!(index.check(WorkloadKind::Deployment, "shop", "web", &ours).is_empty());
    let found = index.check(WorkloadKind::Deployment, "shop", "web", &theirs);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].deploy.key.as_str(), found[0].changed[0].to_string().as_str()),
        ("k1", "container app runs r/app:hotfix")
    );
    assert!(index.check(WorkloadKind::Deployment, "shop", "api", &theirs).is_empty(), "another workload");
    assert!(index.check(WorkloadKind::StatefulSet, "shop", "web", &theirs).is_empty(), "another kind");

    // A newer deploy of the image replaces the older one.
    index.insert(guarded("k2", progress("web", WorkloadState::Healthy, "r/app:hotfix")));
    assert!(index.check(WorkloadKind::Deployment, "shop", "web", &theirs).is_empty());
    assert_eq!(index.check(WorkloadKind::Deployment, "shop", "web", &ours)[0].deploy.key, "k2");
    // A workload that never became healthy is not guarded; nor is a removed image.
    index.insert(guarded("k3", progress("web", WorkloadState::Failed, "r/app@sha256:a")));
    assert!(index.is_empty());
    index.insert(guarded("k4", progress("web", WorkloadState::Healthy, "r/app@sha256:a")));
    assert_eq!(index.len(), 1);
    index.remove("petclinic");
    assert!(index.is_empty() && index.check(WorkloadKind::Deployment, "shop", "web", &theirs).is_empty());
}
