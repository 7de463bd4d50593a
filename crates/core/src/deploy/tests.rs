use super::*;

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
        }],
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
    assert_ne!(action_key("c1", "app"), format!("bm-{}", crate::event::stable_id(&["c1", "app"])));
    assert_ne!(action_key("c1", "app"), action_key("c2", "app"));
}
