//! `status`'s deploys: where each configured workload of an app image stands, read from the
//! image's newest deploy action and the progress it recorded per workload and container.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::ImageSettings;
use crate::ledger::{ActionState, LatestAction};
use builder_monitor_core::deploy::{Workload, WorkloadKind, WorkloadProgress, WorkloadState};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::timestamp_millis;
use builder_monitor_core::text::escape;

/// One configured workload of an app image (one per container a deploy wrote, when it wrote
/// several), as the image's newest deploy left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeployStatus {
    /// The `[[images]]` name.
    pub image: String,
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    /// The container written; before a write, the one configured (none: every container that
    /// runs the app's repository).
    pub container: Option<String>,
    /// The digest written (`sha256:…`); while the deploy has not written the workload, the one it
    /// is to write; none when no deploy ever ran.
    pub digest: Option<String>,
    /// The workload's state (`writing`, `written`, `healthy`, `failed`, `skipped`, `undone`); the
    /// action's (`pending`, `awaiting_approval`, `held`, …) while it has not reached the workload;
    /// `none` when no deploy ever ran.
    pub state: String,
    pub healthy: bool,
    /// When the deploy action last moved (RFC 3339); none when no deploy ever ran.
    pub since: Option<String>,
    /// Why the deploy holds the image, when it does (a failed or overridden deploy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// What the deploy said of the workload (why it failed, was skipped or put back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The deploy action's key and change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
}

impl DeployStatus {
    /// `Deployment shop/petclinic app`.
    fn workload(&self) -> String {
        let container = self.container.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
        format!("{} {}/{}{container}", self.kind, self.namespace, self.name)
    }
}

/// One entry per configured workload (per container written) of each of `images`, in config
/// order, from the newest deploy action of each image among `latest` (which may hold the newest
/// actions of other kinds too).
pub fn deploys(images: &[ImageSettings], latest: &[LatestAction]) -> Vec<DeployStatus> {
    let mut out = Vec::new();
    for image in images {
        let action = latest.iter().find(|l| l.record.image == image.name && l.record.action == ActionKind::Deploy);
        for workload in &image.deploy {
            entries(&image.name, workload, action, &mut out);
        }
    }
    out
}

fn same(a: &Workload, b: &Workload) -> bool {
    (a.kind, &a.namespace, &a.name) == (b.kind, &b.namespace, &b.name)
}

/// `sha256:…` of `repo@sha256:…`.
fn digest_of(image: &str) -> Option<String> {
    image.rsplit_once('@').map(|(_, d)| d.to_string()).filter(|d| d.starts_with("sha256:"))
}

fn entries(image: &str, workload: &Workload, action: Option<&LatestAction>, out: &mut Vec<DeployStatus>) {
    let mut entry = DeployStatus {
        image: image.to_string(),
        kind: workload.kind,
        namespace: workload.namespace.clone(),
        name: workload.name.clone(),
        container: workload.container.clone(),
        digest: None,
        state: "none".into(),
        healthy: false,
        since: None,
        held: None,
        detail: None,
        action: None,
        change: None,
    };
    let target = action.and_then(|a| a.target.as_ref()).and_then(|t| t.plan.deploy());
    let progress: Option<WorkloadProgress> = action
        .and_then(|a| a.record.progress.as_ref()?.deploy())
        .and_then(|p| p.workloads.iter().find(|w| same(&w.workload, workload)).cloned());
    // A workload configured after the newest deploy was recorded: no deploy went to it yet.
    let Some(a) =
        action.filter(|_| progress.is_some() || target.is_none_or(|t| t.workloads.iter().any(|w| same(w, workload))))
    else {
        out.push(entry);
        return;
    };
    let r = &a.record;
    entry.since = Some(timestamp_millis(r.updated));
    entry.action = Some(r.key.clone());
    entry.change = Some(r.change.clone());
    entry.digest = target.map(|t| t.digest.clone());
    if (r.holds && !r.released) || r.state == ActionState::Held {
        entry.held = Some(r.detail.clone().unwrap_or_else(|| "held".into()));
    }
    let Some(progress) = progress else {
        entry.state = r.state.as_str().to_string();
        out.push(entry);
        return;
    };
    entry.state = progress.state.as_str().to_string();
    entry.healthy = progress.state == WorkloadState::Healthy;
    entry.detail = progress.detail.clone();
    if progress.containers.is_empty() {
        out.push(entry);
        return;
    }
    for c in &progress.containers {
        let mut one = entry.clone();
        one.container = Some(c.name.clone());
        one.digest = digest_of(&c.image).or_else(|| entry.digest.clone());
        out.push(one);
    }
}

/// `sha256:` and 12 hex digits (cut on a character boundary: the digest is read from a workload).
fn short(digest: &str) -> &str {
    let end = digest.char_indices().nth("sha256:".len() + 12).map_or(digest.len(), |(i, _)| i);
    &digest[..end]
}

/// The `deploys:` section of the text report (nothing without deploys).
pub fn render_text(out: &mut String, deploys: &[DeployStatus]) {
    if deploys.is_empty() {
        return;
    }
    let _ = writeln!(out, "deploys:");
    for d in deploys {
        let Some(since) = &d.since else {
            let _ = writeln!(out, "  {}  {}  no deploy yet", d.image, escape(&d.workload()));
            continue;
        };
        let detail = d.detail.as_deref().map(|t| format!(": {}", escape(t))).unwrap_or_default();
        let release =
            d.change.as_deref().map(|c| format!("; `builder-monitor release {c}` lets it go")).unwrap_or_default();
        let held = match d.held.as_deref() {
            Some(h) if h.starts_with("held") => format!("  {}{release}", escape(h)),
            // A failed deploy holds for the failure its detail already says.
            Some(h) if d.detail.as_deref().is_some_and(|t| h.contains(t)) => format!("  held{release}"),
            Some(h) => format!("  held: {}{release}", escape(h)),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {}  {}  {} {} since {since}{detail}{held}",
            d.image,
            escape(&d.workload()),
            d.digest.as_deref().map_or("-", short),
            d.state,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::ledger::ActionRecord;
    use builder_monitor_core::schedule::parse_timestamp;
    use serde_json::json;

    fn digest(fill: char) -> String {
        format!("sha256:{}", fill.to_string().repeat(64))
    }

    // Deploy workloads are set in code (the parser has its own tests).
    fn images() -> Vec<ImageSettings> {
        let text = ["petclinic", "orders", "billing", "api"]
            .map(|n| {
                format!("[[images]]\nname = \"{n}\"\nbuilder = \"jammy\"\nimage = \"r.example/apps/{n}:latest\"\n")
            })
            .join("\n");
        let text = format!("[[builders]]\nname = \"jammy\"\nimage = \"r.example/cnb/builder:latest\"\n\n{text}");
        let mut config = Config::parse(std::path::Path::new("/config.toml"), &text).unwrap();
        let workload = |kind, name: &str, container: Option<&str>| Workload {
            kind,
            namespace: "shop".into(),
            name: name.into(),
            container: container.map(str::to_string),
            gitops_owned: Default::default(),
        };
        config.images[0].deploy = vec![
            workload(WorkloadKind::Deployment, "petclinic", None),
            workload(WorkloadKind::CronJob, "report", None),
        ];
        config.images[1].deploy = vec![workload(WorkloadKind::Deployment, "orders", Some("app"))];
        config.images[2].deploy = vec![workload(WorkloadKind::StatefulSet, "billing", Some("app"))];
        config.images
    }

    fn latest(image: &str, state: ActionState, fill: char, progress: serde_json::Value) -> LatestAction {
        let t = parse_timestamp("2026-12-01T09:00:00.250Z").unwrap();
        let d = digest(fill);
        let workloads: Vec<serde_json::Value> = images()
            .into_iter()
            .find(|i| i.name == image)
            .unwrap()
            .deploy
            .iter()
            .map(|w| serde_json::to_value(w).unwrap())
            .collect();
        let target = json!({
            "image": format!("r.example/apps/{image}:latest"), "builder_name": "jammy", "builder": "b", "run_image": null,
            "source": null, "why": "w", "deploy": { "digest": d, "reference": format!("r.example/apps/{image}@{d}"),
            "workloads": workloads, "undo": "workload" },
        });
        LatestAction {
            record: ActionRecord {
                key: format!("bm-{image}"),
                change: format!("c-{image}"),
                image: image.into(),
                action: builder_monitor_core::plan::ActionKind::Deploy,
                state,
                attempts: 1,
                next_attempt: t,
                detail: None,
                output_tail: None,
                updated: t,
                wave: 1,
                needs_approval: false,
                released: false,
                decided_by: None,
                decided_at: None,
                created: t,
                progress: (!progress.is_null()).then(|| {
                    let kind = builder_monitor_core::plan::ActionKind::Deploy;
                    builder_monitor_core::progress::Progress::read(kind, progress).expect("a deploy's progress")
                }),
                holds: false,
                expedited: Default::default(),
            },
            target: Some(serde_json::from_value(target).unwrap()),
        }
    }

    /// Each configured workload is listed once per container written, with the state its image's
    /// newest deploy recorded; a failed deploy says it holds the image; an image never deployed
    /// says `none`; an image without workloads is not listed.
    #[test]
    fn each_workload_shows_its_newest_deploy() {
        let a = digest('a');
        let petclinic = latest(
            "petclinic",
            ActionState::Succeeded,
            'a',
            json!({ "workloads": [
                { "kind": "Deployment", "namespace": "shop", "name": "petclinic", "state": "healthy",
                  "containers": [
                      { "name": "migrate", "init": true, "previous": "r.example/apps/petclinic:old",
                        "image": format!("r.example/apps/petclinic@{a}") },
                      { "name": "app", "previous": "r.example/apps/petclinic:old",
                        "image": format!("r.example/apps/petclinic@{a}") } ] },
                { "kind": "CronJob", "namespace": "shop", "name": "report", "state": "skipped", "containers": [],
                  "detail": "owned by argocd.argoproj.io/instance" } ] }),
        );
        let mut orders = latest(
            "orders",
            ActionState::Failed,
            'b',
            json!({ "workloads": [
                { "kind": "Deployment", "namespace": "shop", "name": "orders", "container": "app", "state": "undone",
                  "detail": "ProgressDeadlineExceeded: too slow",
                  "containers": [ { "name": "app", "previous": "r.example/apps/orders:old",
                                     "image": format!("r.example/apps/orders@{}", digest('b')) } ] } ] }),
        );
        orders.record.holds = true;
        orders.record.detail =
            Some("Deployment shop/orders: ProgressDeadlineExceeded: too slow; put back: Deployment shop/orders".into());
        // An action of an image without workloads (an exec deploy) is not listed.
        let api = latest("api", ActionState::Pending, 'c', serde_json::Value::Null);
        let shown = deploys(&images(), &[api, orders, petclinic]);
        type Row<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, &'a str, bool);
        let rows: Vec<Row<'_>> = shown
            .iter()
            .map(|d| {
                (
                    d.image.as_str(),
                    d.name.as_str(),
                    d.container.as_deref(),
                    d.digest.as_deref(),
                    d.state.as_str(),
                    d.healthy,
                )
            })
            .collect();
        let (a, b) = (a.as_str(), digest('b'));
        assert_eq!(
            rows,
            vec![
                ("petclinic", "petclinic", Some("migrate"), Some(a), "healthy", true),
                ("petclinic", "petclinic", Some("app"), Some(a), "healthy", true),
                ("petclinic", "report", None, Some(a), "skipped", false),
                ("orders", "orders", Some("app"), Some(b.as_str()), "undone", false),
                ("billing", "billing", Some("app"), None, "none", false),
            ]
        );
        assert_eq!(shown[0].since.as_deref(), Some("2026-12-01T09:00:00.250Z"));
        assert_eq!(shown[3].held, orders_detail());
        assert_eq!((shown[4].since.as_ref(), shown[4].action.as_ref()), (None, None));
        let json = serde_json::to_value(&shown[3]).unwrap();
        assert_eq!(
            json,
            json!({ "image": "orders", "kind": "Deployment", "namespace": "shop", "name": "orders", "container": "app",
                    "digest": b, "state": "undone", "healthy": false, "since": "2026-12-01T09:00:00.250Z",
                    "held": orders_detail(), "detail": "ProgressDeadlineExceeded: too slow",
                    "action": "bm-orders", "change": "c-orders" })
        );
        assert_eq!(
            serde_json::to_value(&shown[4]).unwrap(),
            json!({ "image": "billing", "kind": "StatefulSet", "namespace": "shop", "name": "billing", "container": "app",
                    "digest": null, "state": "none", "healthy": false, "since": null })
        );

        let mut text = String::new();
        render_text(&mut text, &shown);
        assert!(
            text.starts_with(
                "deploys:\n  petclinic  Deployment shop/petclinic migrate  sha256:aaaaaaaaaaaa healthy since 2026-12-01T09:00:00.250Z\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  orders  Deployment shop/orders app  sha256:bbbbbbbbbbbb undone since 2026-12-01T09:00:00.250Z: ProgressDeadlineExceeded: too slow  held; `builder-monitor release c-orders` lets it go\n"),
            "{text}"
        );
        assert!(text.contains("  billing  StatefulSet shop/billing app  no deploy yet\n"), "{text}");
    }

    fn orders_detail() -> Option<String> {
        Some("Deployment shop/orders: ProgressDeadlineExceeded: too slow; put back: Deployment shop/orders".into())
    }

    /// Before it reaches a workload, a deploy shows the action's state and the digest it is to
    /// write; a held one says why; a workload configured after the newest deploy shows `none`.
    #[test]
    fn a_deploy_not_started_shows_its_state_and_digest() {
        let mut held = latest("orders", ActionState::Held, 'b', serde_json::Value::Null);
        held.record.detail = Some("held: canary petclinic failed".into());
        let mut old = latest("petclinic", ActionState::Succeeded, 'a', serde_json::Value::Null);
        // Its target named only the Deployment: the CronJob came later.
        if let Some(d) = old.target.as_mut().and_then(|t| t.plan.deploy_mut()) {
            d.workloads.truncate(1);
        }
        let shown = deploys(&images(), &[held, old]);
        assert_eq!((shown[0].state.as_str(), shown[0].digest.clone()), ("succeeded", Some(digest('a'))));
        assert_eq!(
            (shown[1].name.as_str(), shown[1].state.as_str(), shown[1].digest.as_ref()),
            ("report", "none", None)
        );
        assert_eq!((shown[2].state.as_str(), shown[2].digest.clone()), ("held", Some(digest('b'))));
        assert_eq!(shown[2].held.as_deref(), Some("held: canary petclinic failed"));
        let mut text = String::new();
        render_text(&mut text, &shown[2..3]);
        assert!(text.ends_with("held since 2026-12-01T09:00:00.250Z  held: canary petclinic failed; `builder-monitor release c-orders` lets it go\n"), "{text}");
    }
}
