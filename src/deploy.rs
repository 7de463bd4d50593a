//! `deploy`: a deploy of an app image asked for by hand — the digest its tag holds now, or one
//! named — recorded as one deploy action that the daemon's runner carries out exactly as it does
//! the deploy that follows a rebase or rebuild. Here: the request's checks, the action it
//! records, and what it says for people; the command and the API endpoint share them.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{Config, ImageSettings};
use crate::ledger::{ActionState, Ledger, LedgerError, NewAction};
use crate::reaction::{PlannedDeploy, action_target, deploys_after};
use crate::registry::{Registry, RegistryError};
use crate::runner::deploy::{Origin, deploy_action};
use builder_monitor_core::deploy::{Undo, Workload};
use builder_monitor_core::event::stable_id;
use builder_monitor_core::reference::{DigestInput, PrefixError, resolve_digest};
use builder_monitor_core::schedule::timestamp_millis;
use builder_monitor_core::text::escape;

/// Why a deploy was not recorded. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("no image \"{image}\" in [[images]] (configured: {})", configured.join(", "))]
    UnknownImage { image: String, configured: Vec<String> },
    #[error("--to {0}: not a digest (sha256:<64 hex digits>, or its first 12 or more)")]
    InvalidDigest(String),
    #[error("--to {0}")]
    Prefix(#[from] PrefixError),
    #[error(
        "{image} is deployed nowhere: add deploy = [{{ kind = \"Deployment\", namespace = \"…\", name = \"…\" }}] to its [[images]] entry (or set [runner.exec] deploy)"
    )]
    NotConfigured { image: String },
    #[error("{reference} does not exist, so it holds no digest to deploy; name one with --to")]
    NoTag { reference: String },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl DeployError {
    /// The request names something the config does not have, or no digest (exit 2; the API's 4xx).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            DeployError::UnknownImage { .. }
                | DeployError::InvalidDigest(_)
                | DeployError::Prefix(_)
                | DeployError::NotConfigured { .. }
        )
    }
}

/// A deploy asked for by hand: what it records (or, in a dry run, would record). The command's
/// `--json` and the API's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deploy {
    /// The action's key.
    pub key: String,
    /// The change it is recorded under (`manual-…`), the id `approve` and `release` take.
    pub change: String,
    /// The `[[images]]` name.
    pub image: String,
    pub digest: String,
    /// `repo@sha256:…`, what the containers' `image` becomes.
    pub reference: String,
    pub workloads: Vec<Workload>,
    /// The `[runner.exec] deploy` command, when it carries deploys out instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Vec<String>>,
    /// `pending`, or `awaiting_approval` when `[rollout] approve` or `[[images]] approve` says so.
    pub state: ActionState,
    pub wave: u32,
    /// What a failure puts back: never the tag, which a deploy by hand did not move.
    pub undo: Undo,
    /// False for a dry run: nothing was recorded.
    pub recorded: bool,
}

/// The `[[images]]` entry named `name`.
pub fn configured_image<'a>(config: &'a Config, name: &str) -> Result<&'a ImageSettings, DeployError> {
    config
        .image(name)
        .ok_or_else(|| DeployError::UnknownImage { image: name.to_string(), configured: config.image_names() })
}

/// The request's checks, each a usage error, in this order: the image is configured, `to` (when
/// given) is a digest, and the image is deployed somewhere.
pub fn check<'a>(config: &'a Config, name: &str, to: Option<&str>) -> Result<&'a ImageSettings, DeployError> {
    let image = configured_image(config, name)?;
    if let Some(to) = to.filter(|d| DigestInput::parse(d).is_none()) {
        return Err(DeployError::InvalidDigest(to.to_string()));
    }
    if !config.deploys_image(image) {
        return Err(DeployError::NotConfigured { image: image.name.clone() });
    }
    Ok(image)
}

/// `to` in full: a digest as given, or the one recorded digest of the image's tag (`ledger`, when
/// there is one to read) or the digest the tag holds now (`registry`) that its 12 or more hex
/// digits start.
pub async fn resolve_to(
    ledger: Option<&Ledger>,
    registry: Option<&Registry>,
    image: &ImageSettings,
    to: &str,
) -> Result<String, DeployError> {
    let input = DigestInput::parse(to).ok_or_else(|| DeployError::InvalidDigest(to.to_string()))?;
    if let DigestInput::Full(digest) = input {
        return Ok(digest);
    }
    let mut candidates = Vec::new();
    if let Some(ledger) = ledger {
        for m in ledger.tag_moves(Some(&image.name), usize::MAX >> 1).await? {
            candidates.extend(m.before.into_iter().chain(m.after));
        }
    }
    if let Some(registry) = registry
        && let Ok(head) = registry.head_manifest(&image.image).await
    {
        candidates.push(head.digest);
    }
    let within = format!("the digests recorded for {} and the one its tag holds", image.name);
    Ok(resolve_digest(&input, candidates.iter().map(String::as_str), &within)?)
}

/// The digest the image's tag holds now (a HEAD).
pub async fn tag_digest(registry: &Registry, image: &ImageSettings) -> Result<String, DeployError> {
    match registry.head_manifest(&image.image).await {
        Ok(head) => Ok(head.digest),
        Err(RegistryError::NotFound { .. }) => Err(DeployError::NoTag { reference: image.image.to_string() }),
        Err(e) => Err(e.into()),
    }
}

/// The action a deploy of `digest` to `image` records at `now`, and what it says of it (not
/// recorded yet). Pure.
pub fn prepare(config: &Config, image: &ImageSettings, digest: &str, now: DateTime<Utc>) -> (NewAction, Deploy) {
    // Its own change: a hand-made deploy belongs to no move of a builder. The time keeps a second
    // deploy of the same digest (after the first failed, say) from being the first again.
    let change = format!("manual-{}", stable_id(&[&image.name, digest, &timestamp_millis(now)]));
    let reference = image.image.pinned(digest);
    let exec = deploys_after(config, image).into_iter().find_map(|d| match d {
        PlannedDeploy::Exec { exec } => Some(exec),
        PlannedDeploy::Workload(_) => None,
    });
    // A deploy reads no builder; the configured tag stands for it in the exec command's `{builder}`.
    let builder = config.builder(&image.builder).map(|b| b.image.to_string()).unwrap_or_default();
    let why = format!("deploy of {digest} asked for by hand");
    let target = action_target(image, builder, None, why, None, Some(reference.clone()), Vec::new());
    let action = deploy_action(config, image, &change, target, digest.to_string(), reference.clone(), Origin::ByHand);
    let (key, needs_approval) = (action.key.clone(), action.needs_approval);
    let undo = action.target.plan.deploy().map_or(Undo::Workload, |d| d.undo);
    let deploy = Deploy {
        key,
        change,
        image: image.name.clone(),
        digest: digest.to_string(),
        reference,
        workloads: image.deploy.clone(),
        exec,
        state: if needs_approval { ActionState::AwaitingApproval } else { ActionState::Pending },
        wave: image.wave,
        undo,
        recorded: false,
    };
    (action, deploy)
}

/// Records the deploy of `digest` to `image` (checked with [`check`]), for the daemon's runner.
/// Like a change's actions, it supersedes the image's actions that have not started.
pub async fn record(
    config: &Config,
    ledger: &Ledger,
    image: &ImageSettings,
    digest: &str,
    now: DateTime<Utc>,
) -> Result<Deploy, DeployError> {
    let (action, mut deploy) = prepare(config, image, digest, now);
    ledger.record_actions(vec![action], now).await?;
    deploy.recorded = true;
    tracing::info!(image = %deploy.image, digest = %deploy.digest, action = %deploy.key, change = %deploy.change, "deploy recorded by hand");
    Ok(deploy)
}

impl Deploy {
    /// For people: what is (or would be) written where, what a failure puts back, and who acts.
    /// `asked`: the digest was named (`--to`), not read from the tag.
    pub fn render_text(&self, asked: bool) -> String {
        let mut out = String::new();
        let how = if asked { "as asked with --to".to_string() } else { "the digest its tag holds now".to_string() };
        if self.recorded {
            let _ = writeln!(
                out,
                "{}: recorded deploy {} of {} ({how}), change {}",
                self.image, self.key, self.reference, self.change
            );
        } else {
            let _ = writeln!(out, "dry run: {} would deploy {} ({how})", self.image, self.reference);
        }
        match &self.exec {
            Some(command) => {
                let _ = writeln!(out, "  by [runner.exec] deploy: {}", escape(&command.join(" ")));
            }
            None => {
                for w in &self.workloads {
                    let containers = match &w.container {
                        Some(c) => format!("container {c}"),
                        None => "every container that runs its repository".to_string(),
                    };
                    let _ = writeln!(out, "  to {w}, {}", escape(&containers));
                }
            }
        }
        let undo = match self.undo {
            Undo::None => "a failure puts nothing back (undo = \"none\"); the image is held",
            _ => "a failure puts back the workloads' images only: a deploy by hand moves no tag, so none is put back",
        };
        let _ = writeln!(out, "  {undo}");
        if !self.recorded {
            let _ = writeln!(
                out,
                "nothing recorded; the cluster was not read, so the containers' current images are not shown"
            );
        } else if self.state == ActionState::AwaitingApproval {
            let _ = writeln!(out, "it waits for approval: `builder-monitor approve {}`", self.change);
        } else {
            let _ = writeln!(out, "the daemon carries it out; `builder-monitor status` shows how far it got");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::deploy::WorkloadKind;
    use builder_monitor_core::deploy::action_key;
    use builder_monitor_core::plan::ActionKind;
    use builder_monitor_core::schedule::parse_timestamp;

    const CONFIG: &str = r#"
[[builders]]
name = "jammy"
image = "r.example/cnb/builder:latest"

[[images]]
name = "petclinic"
builder = "jammy"
image = "r.example/apps/petclinic:latest"
wave = 2

[[images]]
name = "orders"
builder = "jammy"
image = "r.example/apps/orders:latest"
"#;

    fn config(extra: &str) -> Config {
        let mut config = Config::parse(std::path::Path::new("/config.toml"), &format!("{CONFIG}{extra}")).unwrap();
        // Set in code (the parser has its own tests).
        config.images[0].deploy = vec![
            Workload {
                kind: WorkloadKind::Deployment,
                namespace: "shop".into(),
                name: "petclinic".into(),
                container: Some("app".into()),
                gitops_owned: Default::default(),
            },
            Workload {
                kind: WorkloadKind::CronJob,
                namespace: "shop".into(),
                name: "report".into(),
                container: None,
                gitops_owned: Default::default(),
            },
        ];
        config
    }

    fn digest(fill: char) -> String {
        format!("sha256:{}", fill.to_string().repeat(64))
    }

    /// Each check is a usage error naming what to fix, in the order the command makes them.
    #[test]
    fn a_request_is_checked_before_anything_is_read() {
        let c = config("");
        let unknown = check(&c, "nope", Some("x")).unwrap_err();
        assert!(unknown.is_usage());
        assert_eq!(unknown.to_string(), "no image \"nope\" in [[images]] (configured: petclinic, orders)");
        let bad = check(&c, "petclinic", Some("sha256:abc")).unwrap_err();
        assert_eq!(bad.to_string(), "--to sha256:abc: not a digest (sha256:<64 hex digits>, or its first 12 or more)");
        let nowhere = check(&c, "orders", None).unwrap_err();
        assert!(nowhere.is_usage());
        assert!(
            nowhere.to_string().contains("add deploy = [{ kind = \"Deployment\", namespace = \"…\", name = \"…\" }]"),
            "{nowhere}"
        );
        assert_eq!(check(&c, "petclinic", Some(&digest('a'))).unwrap().name, "petclinic");
    }

    /// The action is a deploy of the digest to the configured workloads under its own change, in
    /// the image's wave, waiting for approval when `[rollout] approve` covers deploys, and its undo
    /// never names the tag (none moved).
    #[test]
    fn the_action_deploys_the_digest_under_its_own_change() {
        let c = config("");
        let now = parse_timestamp("2026-12-01T09:00:00Z").unwrap();
        let image = c.image("petclinic").unwrap();
        let (action, deploy) = prepare(&c, image, &digest('a'), now);
        assert!(action.change_id.starts_with("manual-"), "{}", action.change_id);
        assert_eq!(action.key, action_key(&action.change_id, "petclinic"));
        assert_eq!((action.kind, action.wave, action.needs_approval), (ActionKind::Deploy, 2, false));
        let target = action.target.plan.deploy().unwrap();
        assert_eq!(target.reference, format!("r.example/apps/petclinic@{}", digest('a')));
        assert_eq!((target.workloads.len(), target.undo, target.tag_before.as_ref()), (2, Undo::Workload, None));
        assert_eq!(action.target.app_reference.as_deref(), Some(target.reference.as_str()));
        assert_eq!(
            (deploy.key.as_str(), deploy.state, deploy.recorded),
            (action.key.as_str(), ActionState::Pending, false)
        );
        let later = prepare(&c, image, &digest('a'), now + chrono::Duration::seconds(1)).0;
        assert_ne!(later.change_id, action.change_id, "a second deploy of the same digest is a new action");

        let json = serde_json::to_value(&deploy).unwrap();
        for field in ["key", "change", "image", "digest", "reference", "workloads"] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(
            json["workloads"][0],
            serde_json::json!({"kind": "Deployment", "namespace": "shop", "name": "petclinic", "container": "app"})
        );

        let text = deploy.render_text(false);
        assert!(
            text.starts_with(&format!(
                "dry run: petclinic would deploy r.example/apps/petclinic@{} (the digest its tag holds now)\n",
                digest('a')
            )),
            "{text}"
        );
        assert!(text.contains("  to Deployment shop/petclinic, container app\n  to CronJob shop/report, every container that runs its repository\n"), "{text}");
        assert!(text.contains("a deploy by hand moves no tag"), "{text}");
        assert!(
            text.ends_with(
                "nothing recorded; the cluster was not read, so the containers' current images are not shown\n"
            ),
            "{text}"
        );
    }

    /// Approval and an exec deploy command are said; `undo = "none"` stays none.
    #[test]
    fn approval_and_an_exec_command_are_said() {
        let mut c = config("[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n");
        c.images[0].approve = true;
        c.images[0].undo = Some(Undo::None);
        // Set in code until `[runner.exec] deploy` is parsed.
        if let Some(exec) = c.runner.exec.as_mut() {
            exec.deploy = vec!["deploy.sh".into(), "{reference}".into()];
        }
        let now = parse_timestamp("2026-12-01T09:00:00Z").unwrap();
        let (action, mut deploy) = prepare(&c, c.image("petclinic").unwrap(), &digest('b'), now);
        assert!(action.needs_approval);
        assert_eq!((deploy.state, deploy.undo), (ActionState::AwaitingApproval, Undo::None));
        assert!(check(&c, "orders", None).is_ok(), "the exec command deploys every image");
        deploy.recorded = true;
        let text = deploy.render_text(true);
        assert!(text.contains("(as asked with --to), change manual-"), "{text}");
        assert!(text.contains("  by [runner.exec] deploy: deploy.sh {reference}\n"), "{text}");
        assert!(text.contains("undo = \"none\""), "{text}");
        assert!(
            text.ends_with(&format!("it waits for approval: `builder-monitor approve {}`\n", deploy.change)),
            "{text}"
        );
    }
}
