//! Planning a reaction: deploys named after an action, previews, a fleet planned in batches.

use super::*;
use crate::metrics::Metrics;
use builder_monitor_core::event::Pin;

const CONFIG: &str = r#"
[[builders]]
name = "jammy"
image = "127.0.0.1:1/cnb/builder:latest"

[[images]]
name = "petclinic"
builder = "jammy"
image = "127.0.0.1:1/apps/petclinic:latest"
"#;

/// A rebase or rebuild of an image is followed by a deploy to its workloads, or by the exec
/// command when `[runner.exec] deploy` takes every deploy; `plan --json` shows either.
#[test]
fn a_planned_action_names_the_deploy_after_it() {
    use builder_monitor_core::deploy::WorkloadKind;
    let mut config = Config::parse(std::path::Path::new("/config.toml"), CONFIG).unwrap();
    assert!(deploys_after(&config, &config.images[0]).is_empty());
    // Set in code (the parser has its own tests).
    config.images[0].deploy = vec![Workload {
        kind: WorkloadKind::Deployment,
        namespace: "shop".into(),
        name: "petclinic".into(),
        container: Some("app".into()),
        gitops_owned: Default::default(),
    }];
    let after = deploys_after(&config, &config.images[0]);
    assert_eq!(
        after.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["Deployment shop/petclinic (container app)"]
    );
    assert_eq!(
        serde_json::to_value(&after).unwrap(),
        serde_json::json!([{ "kind": "Deployment", "namespace": "shop", "name": "petclinic", "container": "app" }])
    );
    let exec =
        format!("{CONFIG}\n[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n");
    let mut config = Config::parse(std::path::Path::new("/config.toml"), &exec).unwrap();
    // Set in code until `[runner.exec] deploy` is parsed.
    if let Some(e) = config.runner.exec.as_mut() {
        e.deploy = vec!["deploy.sh".into(), "{reference}".into()];
    }
    let after = deploys_after(&config, &config.images[0]);
    assert_eq!(after[0].to_string(), "[runner.exec] deploy");
    assert_eq!(serde_json::to_value(&after).unwrap(), serde_json::json!([{ "exec": ["deploy.sh", "{reference}"] }]));
}

#[tokio::test]
async fn a_preview_says_why_there_is_no_action_to_show() {
    let config = Config::parse(std::path::Path::new("/config.toml"), CONFIG).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let reaction = Reaction { config: &config, ledger: &ledger, registry: &registry };

    let unknown = reaction.preview("nope", ActionKind::Rebuild).await.unwrap_err();
    assert!(matches!(&unknown, PreviewError::UnknownImage { image, .. } if image == "nope"), "{unknown:?}");
    assert_eq!(unknown.to_string(), "no image named \"nope\" (configured: petclinic)");

    let unpinned = reaction.preview("petclinic", ActionKind::Rebase).await.unwrap_err();
    assert!(matches!(&unpinned, PreviewError::NotPinned { builder } if builder == "jammy"), "{unpinned:?}");
    assert_eq!(unpinned.to_string(), "builder \"jammy\" is not pinned yet; run `builder-monitor run --once` first");
}

/// A fleet planned in batches: the actions of every batch but the last are recorded as they are
/// planned and only summed up in `Planned`, yet the approval event lists every action waiting for
/// a person, in planning order, and a gitops target whose only image is in the first batch still
/// gets its commit, in the wave after every app's.
#[tokio::test]
async fn a_fleet_planned_in_batches_keeps_every_action_for_its_events_and_commits() {
    let mut text = "[[builders]]\nname = \"jammy\"\nimage = \"127.0.0.1:1/cnb/builder:latest\"\n".to_string();
    let n = FIRST_BATCH + 4;
    for i in 0..n {
        let wave = if i == n - 1 { 3 } else { 1 };
        text += &format!(
            "[[images]]\nname = \"app-{i:02}\"\nbuilder = \"jammy\"\nimage = \"127.0.0.1:1/apps/app-{i:02}:latest\"\npolicy = \"rebuild\"\napprove = true\nwave = {wave}\n"
        );
    }
    text += "[[gitops]]\nname = \"fleet\"\nrepo = \"file:///nowhere/fleet.git\"\n\
             files = [{ path = \"apps/app-00/kustomization.yaml\", format = \"kustomize\", image = \"app-00\" }]\n";
    let (planned, ledger, _dir) = plan_rebuilds(&text).await;

    // The first batch was recorded and is only summed up; the rest, and the gitops commit, are
    // for the check's commit.
    assert_eq!(planned.recorded.len(), FIRST_BATCH);
    assert_eq!(ledger.actions(100).await.unwrap().len(), FIRST_BATCH);
    let to_commit: Vec<&str> = planned.actions.iter().map(|a| a.image.as_str()).collect();
    assert_eq!(to_commit.len(), n - FIRST_BATCH + 1, "{to_commit:?}");
    let waiting: Vec<String> = planned.awaiting_approval().into_iter().map(|a| a.image).collect();
    let apps: Vec<String> = (0..n).map(|i| format!("app-{i:02}")).collect();
    assert_eq!(waiting, apps, "every rebuild waits for a person, in planning order");

    let gitops = planned.actions.iter().find(|a| a.kind == ActionKind::Gitops).expect("a gitops action");
    assert_eq!(gitops.wave, 4, "after the highest app wave (3)");
    assert_eq!(planned.decisions.len(), n);
}

/// Without gitops targets, a batch recorded ahead of the commit leaves in `Planned` only what the
/// approval event needs: the actions waiting for a person, none here.
#[tokio::test]
async fn a_fleet_without_gitops_or_approvals_keeps_no_summaries_of_recorded_actions() {
    let mut text = "[[builders]]\nname = \"jammy\"\nimage = \"127.0.0.1:1/cnb/builder:latest\"\n".to_string();
    let n = FIRST_BATCH + 4;
    for i in 0..n {
        let approve = i == 0;
        text += &format!(
            "[[images]]\nname = \"app-{i:02}\"\nbuilder = \"jammy\"\nimage = \"127.0.0.1:1/apps/app-{i:02}:latest\"\npolicy = \"rebuild\"\napprove = {approve}\n"
        );
    }
    let (planned, ledger, _dir) = plan_rebuilds(&text).await;
    assert_eq!(ledger.actions(100).await.unwrap().len(), FIRST_BATCH, "the first batch is recorded");
    let summed: Vec<&str> = planned.recorded.iter().map(|a| a.summary.image.as_str()).collect();
    assert_eq!(summed, ["app-00"], "only the one awaiting approval");
    let waiting: Vec<String> = planned.awaiting_approval().into_iter().map(|a| a.image).collect();
    assert_eq!(waiting, ["app-00"]);
    assert_eq!(planned.actions.len(), n - FIRST_BATCH);
}

/// A rebuild of every app image of builder `jammy` in the config `text`, planned over an empty
/// SQLite ledger (kept in the directory answered) with no registry reads.
async fn plan_rebuilds(text: &str) -> (Planned, Ledger, tempfile::TempDir) {
    let config = Config::parse(std::path::Path::new("/config.toml"), text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
    let registry = Registry::new(config.registries.values().cloned(), Metrics::new());
    let reaction = Reaction { config: &config, ledger: &ledger, registry: &registry };
    let change: Change = serde_json::from_value(serde_json::json!({"kind": "rebuild"})).unwrap();
    let current = Pin {
        digest: format!("sha256:{}", "b".repeat(64)),
        reference: "127.0.0.1:1/cnb/builder@sha256:b".into(),
        platforms: Default::default(),
    };
    let builders = ["jammy".to_string()];
    let mv = Moved {
        watch: "jammy",
        kind: WatchKind::Builder,
        builders: &builders,
        change_id: "change-1",
        change: &change,
        current: &current,
        metadata: None,
        now: chrono::Utc::now(),
    };
    (reaction.plan_actions(&mv).await.unwrap(), ledger, dir)
}
