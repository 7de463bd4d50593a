//! The reaction to a move: which app images get a rebase or rebuild (planning, with the app images
//! read from their registry), how far each app image is from its builder's pin and where the
//! deploy after its action goes (`plan`), and the action an image would get now (`build-spec`).
//! Reads the config, the ledger and registries.

use builder_monitor_core::rollout::{Expedite, Expedited};
use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;

use crate::config::{Config, ImageSettings, Policy, run_image_watch};
use crate::inspect;
use crate::ledger::{Ledger, LedgerError, NewAction, WatchKind, WatchRecord};
use crate::registry::Registry;
use builder_monitor_core::cnb::{self, BuilderMetadata, Change, PinnedMetadata, run_watch_name};
use builder_monitor_core::deploy::Workload;
use builder_monitor_core::event;
use builder_monitor_core::plan::{
    self, ActionKind, ActionPlan, ActionTarget, AppState, Decision, GitopsPlan, Move, RunImageTarget,
};
use builder_monitor_core::reference::ImageRef;

/// App images planning reads at once.
const PLAN_READS: usize = 16;
/// App images in planning's first batch; each next one is twice as large, up to [`MAX_BATCH`].
const FIRST_BATCH: usize = PLAN_READS;
const MAX_BATCH: usize = 1024;

/// Each builder's pin and metadata (user, platform APIs, stack) for the runners, read once per
/// builder in a planning, not once per app image.
#[derive(Default)]
struct BuilderPins(BTreeMap<String, (Option<String>, Option<BuilderMetadata>)>);

impl BuilderPins {
    async fn of(
        &mut self,
        reaction: &Reaction<'_>,
        mv: &Moved<'_>,
        builder: &str,
    ) -> Result<&(Option<String>, Option<BuilderMetadata>), LedgerError> {
        if !self.0.contains_key(builder) {
            let pin = match mv.kind {
                WatchKind::Builder => {
                    (Some(mv.current.reference.clone()), mv.metadata.and_then(|m| m.preferred()).cloned())
                }
                WatchKind::RunImage => {
                    let record = reaction.ledger.watch(builder).await?;
                    let meta =
                        record.as_ref().and_then(WatchRecord::pinned_metadata).and_then(|m| m.preferred().cloned());
                    (record.and_then(|r| r.pin).map(|p| p.reference), meta)
                }
            };
            self.0.insert(builder.to_string(), pin);
        }
        Ok(&self.0[builder])
    }
}

/// The parts a reaction reads.
#[derive(Clone, Copy)]
pub struct Reaction<'a> {
    pub config: &'a Config,
    pub ledger: &'a Ledger,
    pub registry: &'a Registry,
}

/// One app image measured against its builder's current pin (`plan`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Assessment {
    pub image: String,
    pub builder: String,
    pub policy: Policy,
    pub action: Option<ActionKind>,
    /// For a rebase: where it would run, `registry` (in the daemon) or `runner`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'static str>,
    pub why: String,
    /// The image's open action (newest), with its state and why it waits; set by `plan`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open: Option<crate::ledger::OpenAction>,
    /// What follows the rebase or rebuild once it moved the tag: a deploy of the new digest.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deploy: Vec<PlannedDeploy>,
    /// The change the action would carry out and what it fixes: the open action's change (set by
    /// `plan`), else the newest move of what the action applies (the run image for a rebase, the
    /// builder for a rebuild). `None` when no action is due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<PendingChange>,
}

/// A change as the ledger recorded it, for what applying it would fix (`plan`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PendingChange {
    pub id: String,
    /// Its fixes (`[]`: it matched none); absent without vulnerability data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes: Option<Vec<builder_monitor_core::vulns::Fix>>,
    /// Why nothing could be matched to it (a side without package lists, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes_note: Option<String>,
    /// Notices a platform shows fixed that are not claimed, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixes_unknown: Vec<builder_monitor_core::vulns::UnknownFix>,
    /// Where the data of its fixes came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fixes_source: Option<builder_monitor_core::vulns::DataSource>,
}

impl PendingChange {
    pub fn of(record: &crate::ledger::ChangeRecord) -> Self {
        PendingChange {
            id: record.id.clone(),
            fixes: record.change.fixes.clone(),
            fixes_note: record.change.fixes_note.clone(),
            fixes_unknown: record.change.fixes_unknown.clone(),
            fixes_source: record.change.fixes_source.clone(),
        }
    }
}

/// Where a deploy after an image's rebase or rebuild goes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum PlannedDeploy {
    /// A workload of `[[images]] deploy` (`{"kind", "namespace", "name", "container"}`).
    Workload(Workload),
    /// The `[runner.exec] deploy` command, which takes every deploy (`{"exec": [argv]}`).
    Exec { exec: Vec<String> },
}

impl std::fmt::Display for PlannedDeploy {
    /// `Deployment shop/petclinic (container app)`, `[runner.exec] deploy`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlannedDeploy::Workload(w) => match &w.container {
                Some(c) => write!(f, "{w} (container {c})"),
                None => write!(f, "{w}"),
            },
            PlannedDeploy::Exec { .. } => f.write_str("[runner.exec] deploy"),
        }
    }
}

/// The deploy that follows an action of `image` that moves its tag: the exec command when
/// `[runner.exec] deploy` is set (it takes every deploy), else each of its workloads.
pub fn deploys_after(config: &Config, image: &ImageSettings) -> Vec<PlannedDeploy> {
    match config.runner.deploy_command() {
        Some(exec) => vec![PlannedDeploy::Exec { exec: exec.to_vec() }],
        None => image.deploy.iter().cloned().map(PlannedDeploy::Workload).collect(),
    }
}

/// What a runner needs for `image`: the one place an [`ActionTarget`] is built.
pub fn action_target(
    image: &ImageSettings,
    builder: String,
    run_image: Option<String>,
    why: String,
    meta: Option<&BuilderMetadata>,
    app_reference: Option<String>,
    reasons: Vec<String>,
) -> ActionTarget {
    ActionTarget {
        image: image.image.to_string(),
        builder_name: image.builder.clone(),
        builder,
        run_image,
        source: image.source.clone(),
        env: image.env.clone(),
        why,
        user_id: meta.and_then(|m| m.user_id),
        group_id: meta.and_then(|m| m.group_id),
        platform_apis: meta.map(|m| m.lifecycle.platform_apis.clone()).unwrap_or_default(),
        stack_id: meta.and_then(|m| m.stack_id.clone()),
        app_reference,
        reasons,
        plan: Default::default(),
        scheduling: image.scheduling.clone(),
        vex: None,
    }
}

/// The reasons of a change as their wire names (`STACK`, `BUILDPACK`, …), for annotations.
fn reason_names(change: &Change) -> Vec<String> {
    change.reasons.iter().filter_map(|r| serde_json::to_value(r).ok()?.as_str().map(str::to_string)).collect()
}

/// An action's idempotency key: stable for (change, image), DNS-safe, short enough to name objects.
pub fn action_key(change_id: &str, image: &str) -> String {
    format!("bm-{}", event::stable_id(&[change_id, image]))
}

impl Reaction<'_> {
    /// Plans the reaction of every app image the move concerns; reads the app images it needs.
    pub async fn plan_actions(&self, mv: &Moved<'_>) -> Result<Planned, LedgerError> {
        let mut planned = self.plan_app_actions(mv).await?;
        let gitops = self.gitops_actions(mv, &planned).await?;
        let expedited = self.expedited_by(mv.change);
        planned.actions.extend(gitops.into_iter().map(|a| a.expedited(expedited.clone())));
        planned.expedite = self.expedite(mv.change);
        Ok(planned)
    }

    /// Whether `change` lets its actions skip the soak and the windows (`[rollout] expedite`):
    /// fixes that high, from vulnerability data of the configured source over a verified
    /// connection (the change records its source).
    fn expedite(&self, change: &Change) -> Expedite {
        let source = change.fixes_source.as_ref();
        builder_monitor_core::rollout::expedite(self.config.rollout.expedite, change.fixes.as_deref(), source)
    }

    /// What the move fixes, for the OpenVEX attestation of each digest its actions write: only
    /// when `[signing]` attests and the move claims a fix (a fleet's actions carry nothing else).
    fn vex_facts(&self, mv: &Moved<'_>) -> Option<builder_monitor_core::vulns::openvex::VexFacts> {
        self.config.signing.as_ref().filter(|s| s.attest && s.key_resolved)?;
        let change = mv.change;
        builder_monitor_core::vulns::openvex::VexFacts::of(
            mv.change_id,
            change.fixes.as_deref().unwrap_or_default(),
            &change.fixes_unknown,
            change.fixes_source.as_ref(),
            change.fixes_release.as_deref(),
        )
    }

    /// What expedites `change`'s actions (the records and the data's source); empty when it is
    /// off, the change fixes nothing that high, or its data may not expedite.
    fn expedited_by(&self, change: &Change) -> Expedited {
        match self.expedite(change) {
            Expedite::Yes(expedited) => expedited,
            Expedite::No | Expedite::Refused { .. } => Expedited::default(),
        }
    }

    /// The gitops actions of a move: one per `[[gitops]]` target that has a file of an image with
    /// an action in it, or a marker file (which may name any image, or the builder: a builder move
    /// alone gives those one). Each runs after the change's other actions (one wave above the
    /// highest), and writes what the ledger holds newest then (`runner::gitops`).
    async fn gitops_actions(&self, mv: &Moved<'_>, apps: &Planned) -> Result<Vec<NewAction>, LedgerError> {
        let mut out = Vec::new();
        if self.config.gitops.is_empty() {
            return Ok(out);
        }
        let wave = apps.images_and_waves().map(|(_, w)| w.saturating_add(1)).max().unwrap_or(0);
        let images: BTreeSet<&str> = apps.images_and_waves().map(|(image, _)| image).collect();
        let builder_moved = mv.kind == WatchKind::Builder;
        for target in &self.config.gitops {
            let has_app = target.files.iter().any(|f| f.image().is_some_and(|i| images.contains(i)));
            let markers = target.files.iter().any(|f| f.format == crate::config::FileFormat::Marker);
            if !(has_app || (markers && (builder_moved || !images.is_empty()))) {
                continue;
            }
            // The builder the commit names: the moved builder, or (a run image move) the first one
            // of the move's builders that is pinned.
            let mut builder = None;
            for name in mv.builders {
                let reference = match mv.kind {
                    WatchKind::Builder => Some(mv.current.reference.clone()),
                    WatchKind::RunImage => self.ledger.watch(name).await?.and_then(|r| r.pin).map(|p| p.reference),
                };
                if let Some(reference) = reference {
                    builder = Some((name.clone(), reference));
                    break;
                }
            }
            let Some((builder_name, builder_ref)) = builder else { continue };
            let summary = match mv.kind {
                WatchKind::Builder => format!("{builder_name}: {}", builder_monitor_core::cnb::explain(mv.change)),
                WatchKind::RunImage => {
                    format!("run image of {builder_name}: {}", builder_monitor_core::cnb::explain(mv.change))
                }
            };
            let why = format!("commit change {} to {}", mv.change_id, target.name);
            let fixes = mv.change.fixes.clone().unwrap_or_default();
            let plan = GitopsPlan { target: target.name.clone(), summary, fixes, batch: Vec::new() };
            out.push(self.gitops_action(
                mv.change_id,
                plan,
                builder_name,
                builder_ref,
                why,
                reason_names(mv.change),
                wave,
            ));
        }
        Ok(out)
    }

    /// A builder's pin without a change (its first, or an index whose watched platforms stayed):
    /// the targets with marker files get it all the same, under a change id of the pin's own.
    pub fn pin_gitops_actions(&self, builder: &str, reference: &str, digest: &str) -> Vec<NewAction> {
        let change_id = format!("pin-{}", event::stable_id(&[builder, digest]));
        let short = digest.strip_prefix("sha256:").map_or(digest, |d| &d[..d.len().min(12)]);
        self.config
            .gitops
            .iter()
            .filter(|t| t.files.iter().any(|f| f.format == crate::config::FileFormat::Marker))
            .map(|t| {
                let plan = GitopsPlan {
                    target: t.name.clone(),
                    summary: format!("{builder}: pinned to sha256:{short}"),
                    fixes: Vec::new(),
                    batch: Vec::new(),
                };
                let why = format!("commit the pin of {builder} to {}", t.name);
                self.gitops_action(&change_id, plan, builder.to_string(), reference.to_string(), why, Vec::new(), 0)
            })
            .collect()
    }

    /// One target's gitops action of a change.
    #[allow(clippy::too_many_arguments)]
    fn gitops_action(
        &self,
        change_id: &str,
        plan: GitopsPlan,
        builder_name: String,
        builder: String,
        why: String,
        reasons: Vec<String>,
        wave: u32,
    ) -> NewAction {
        let subject = crate::config::gitops_subject(&plan.target);
        let configured = self.config.gitops.iter().find(|t| t.name == plan.target);
        let image = configured.map(|t| t.repo.clone()).unwrap_or_default();
        let batch = configured.and_then(|t| t.batch);
        let target = ActionTarget {
            image,
            builder_name,
            builder,
            run_image: None,
            source: None,
            env: Default::default(),
            why,
            user_id: None,
            group_id: None,
            platform_apis: Vec::new(),
            stack_id: None,
            app_reference: None,
            reasons,
            scheduling: Default::default(),
            vex: None,
            plan: ActionPlan::Gitops(plan),
        };
        let needs_approval = self.config.rollout.approve.contains(&ActionKind::Gitops);
        NewAction::new(action_key(change_id, &subject), change_id.to_string(), subject, ActionKind::Gitops, target)
            .gated(wave, needs_approval)
            .batched(batch)
    }

    /// The actions of a move's app images, planned in batches of images in wave order: every
    /// batch's but the last is recorded as soon as it is planned (`Ledger::record_planned`), so a
    /// fleet's first actions start while the rest of it is read, and a lower wave is always
    /// recorded whole before a higher one (the roll-out gate holds a wave back by the lower ones
    /// it sees). The check's commit records the last batch's, with the change; of the others,
    /// `Planned::recorded` keeps what the commit's events need. A crash before the commit finds
    /// the same move again and records what is missing, by key.
    async fn plan_app_actions(&self, mv: &Moved<'_>) -> Result<Planned, LedgerError> {
        let (builders, change, current) = (mv.builders, mv.change, mv.current);
        let images: Vec<&ImageSettings> = self.config.images.iter().filter(|i| builders.contains(&i.builder)).collect();
        if images.is_empty() || change.kind == cnb::ChangeKind::None {
            return Ok(Planned::default());
        }
        // The run image to rebase onto: the moved run image itself, or the one the builder moved to.
        let run_reference = match mv.kind {
            WatchKind::RunImage => Some(current.reference.clone()),
            WatchKind::Builder => change
                .run_image
                .as_ref()
                .and_then(|r| r.to.clone())
                .filter(|r| r.contains('@'))
                .or_else(|| mv.metadata.and_then(|m| m.run_image.as_ref()).and_then(|r| r.reference.clone())),
        };
        let run_target = match (&run_reference, mv.kind) {
            (Some(reference), WatchKind::RunImage) => Some(RunImageTarget {
                reference: reference.clone(),
                digests: std::iter::once(current.digest.clone()).chain(current.platforms.values().cloned()).collect(),
            }),
            (Some(reference), WatchKind::Builder) => Some(self.run_image_target(reference).await),
            (None, _) => None,
        };
        // Images in wave order; the config's order within a wave.
        let mut order: Vec<usize> = (0..images.len()).collect();
        order.sort_by_key(|&i| images[i].wave);
        let mut decisions: Vec<Option<Decision>> = vec![None; images.len()];
        let mut builder_pins = BuilderPins::default();
        let gitops = !self.config.gitops.is_empty();
        let (mut actions, mut recorded) = (Vec::new(), Vec::new());
        let (mut start, mut size) = (0, FIRST_BATCH);
        while start < order.len() {
            let end = (start + size).min(order.len());
            let batch: Vec<&ImageSettings> = order[start..end].iter().map(|&i| images[i]).collect();
            let planned = self.plan_batch(mv, &batch, run_target.as_ref(), &mut builder_pins).await?;
            for (&i, d) in order[start..end].iter().zip(planned.decisions) {
                decisions[i] = Some(d);
            }
            if end < order.len() && !planned.actions.is_empty() {
                // Only what the commit reads: every action's image and wave for the gitops
                // targets' commit (when there are any), else the ones waiting for a person (the
                // approval event), and an expedited change's (its `action.expedited` names them
                // all). A fleet of 10,000 kept 1.4 MiB of summaries for nothing.
                let summed = planned.actions.iter().filter(|a| gitops || a.needs_approval || !a.expedited.is_empty());
                recorded.extend(summed.map(RecordedAction::of));
                self.ledger.record_planned(mv.watch, planned.actions, mv.now).await?;
            } else {
                actions.extend(planned.actions);
            }
            (start, size) = (end, (size * 2).min(MAX_BATCH));
        }
        Ok(Planned { decisions: decisions.into_iter().flatten().collect(), actions, recorded, ..Default::default() })
    }

    /// One batch of [`Self::plan_app_actions`]: its app images read (a few at a time), a decision
    /// for each, in `images`' order, and the actions.
    async fn plan_batch(
        &self,
        mv: &Moved<'_>,
        images: &[&ImageSettings],
        run_target: Option<&RunImageTarget>,
        builder_pins: &mut BuilderPins,
    ) -> Result<Planned, LedgerError> {
        // App images are read for `auto` decisions, and for kpack, whose rebase names the app's digest.
        let read_all = self.config.runner.needs_app_digest();
        // Read a few at a time: a fleet of a thousand apps is read in a fraction of a second, not
        // one after the other, and never with a burst of a thousand requests.
        // Owned items: a closure taking `&ImageSettings` makes a future that is not `Send` for every
        // lifetime, and checks run on spawned tasks.
        let wanted: Vec<(String, ImageRef)> = images
            .iter()
            .filter(|i| read_all || i.policy == Policy::Auto)
            .map(|i| (i.name.clone(), i.image.clone()))
            .collect();
        let apps: BTreeMap<String, AppState> = futures::stream::iter(wanted)
            .map(|(name, image)| async move { (name, self.app_state(&image).await) })
            .buffer_unordered(PLAN_READS)
            .collect()
            .await;
        let decisions =
            plan::plan(&Move { change: mv.change, builders: mv.builders, run_image: run_target }, images, &apps);
        let mut actions = Vec::new();
        let vex = self.vex_facts(mv);
        // `plan` answers one decision per image, in order (all of them are the move's builders').
        for (d, image) in decisions.iter().zip(images) {
            let Some(kind) = d.action else { continue };
            let (builder_ref, meta) = builder_pins.of(self, mv, &image.builder).await?;
            let Some(builder_ref) = builder_ref.clone() else {
                tracing::warn!(image = %image.name, builder = %image.builder, "builder not pinned yet; no action");
                continue;
            };
            let app_reference = match apps.get(&image.name) {
                Some(AppState::Built { digest: Some(digest), .. }) => Some(image.image.pinned(digest)),
                _ => None,
            };
            let mut target = action_target(
                image,
                builder_ref,
                run_target.map(|t| t.reference.clone()),
                d.why.clone(),
                meta.as_ref(),
                app_reference,
                reason_names(mv.change),
            );
            // Only where what the action writes is signed: a rebase, or a build with `builds`.
            let signs_build = self.config.signing.as_ref().is_some_and(|s| s.builds);
            target.vex = vex.clone().filter(|_| kind == ActionKind::Rebase || signs_build);
            actions.push(
                NewAction::new(
                    action_key(mv.change_id, &image.name),
                    mv.change_id.to_string(),
                    image.name.clone(),
                    kind,
                    target,
                )
                .gated(image.wave, image.needs_approval(kind, &self.config.rollout))
                .expedited(self.expedited_by(mv.change)),
            );
        }
        Ok(Planned { decisions, actions, ..Default::default() })
    }

    /// Every digest that counts as "on" this run image reference: its own, and its platforms'.
    async fn run_image_target(&self, reference: &str) -> RunImageTarget {
        let mut digests = BTreeSet::new();
        let Ok(image) = ImageRef::parse(reference) else {
            return RunImageTarget { reference: reference.to_string(), digests };
        };
        if let Some(digest) = image.digest() {
            digests.insert(digest.to_string());
            match inspect::observe(self.registry, &image, digest, self.config.monitor.max_platforms).await {
                Ok(observation) => digests.extend(observation.platforms.into_values()),
                Err(err) => {
                    tracing::warn!(run_image = %reference, error = %err, "cannot list the run image's platforms")
                }
            }
        }
        RunImageTarget { reference: reference.to_string(), digests }
    }

    /// What the app image's registry says about it now.
    pub async fn app_state(&self, image: &ImageRef) -> AppState {
        // Kept: a registry rebase that follows reads the app back from memory.
        match inspect::app_metadata(&self.registry.keeping(), image, self.config.monitor.max_platforms).await {
            Ok(None) => AppState::Missing,
            Ok(Some(app)) => match app.metadata {
                Ok(Some(m)) => AppState::Built {
                    run_image_digest: m.run_image_digest().map(str::to_string),
                    buildpacks: m.buildpacks,
                    launcher_version: m.launcher_version,
                    digest: Some(app.digest),
                },
                Ok(None) | Err(_) => AppState::NotCnb,
            },
            Err(err) => AppState::Unreachable(err.to_string()),
        }
    }

    /// For the current pins and app images: what each image would get, and why.
    pub async fn assess(&self) -> Result<Vec<Assessment>, LedgerError> {
        let mut out = Vec::new();
        for image in &self.config.images {
            let record = self.ledger.watch(&image.builder).await?;
            let metadata = record.as_ref().and_then(WatchRecord::pinned_metadata);
            let builder = metadata.as_ref().and_then(|m| m.preferred()).cloned();
            let run_reference = self.newest_run_image(&image.builder, metadata.as_ref()).await?;
            let run_target = match &run_reference {
                Some(reference) => Some(self.run_image_target(reference).await),
                None => None,
            };
            let app = self.app_state(&image.image).await;
            let last_builder_move = self.ledger.changes(Some(&image.builder), 1).await?.into_iter().next();
            let last_move = last_builder_move.as_ref().map(|c| c.change.clone());
            let decision = plan::assess(image, &app, builder.as_ref(), run_target.as_ref(), last_move.as_ref());
            let change = match decision.action {
                Some(ActionKind::Rebase) => match self.run_watch(&image.builder, metadata.as_ref()) {
                    Some(watch) => self.ledger.changes(Some(&watch), 1).await?.into_iter().next(),
                    None => last_builder_move,
                },
                Some(_) => last_builder_move,
                None => None,
            };
            out.push(Assessment {
                image: image.name.clone(),
                builder: image.builder.clone(),
                policy: image.policy,
                action: decision.action,
                path: (decision.action == Some(ActionKind::Rebase)).then(|| self.config.runner.rebase.as_str()),
                deploy: match decision.action {
                    Some(kind) if kind.moves_tag() => deploys_after(self.config, image),
                    _ => Vec::new(),
                },
                why: decision.why,
                open: None,
                change: change.as_ref().map(PendingChange::of),
            });
        }
        Ok(out)
    }

    /// The newest immutable reference of a builder's run image: the run image watch's pin, else
    /// the one recorded with the builder's pin.
    async fn newest_run_image(
        &self,
        builder: &str,
        metadata: Option<&PinnedMetadata>,
    ) -> Result<Option<String>, LedgerError> {
        if let Some(watch) = self.run_watch(builder, metadata)
            && let Some(r) = self.ledger.watch(&watch).await?
            && let Some(pin) = r.pin
        {
            return Ok(Some(pin.reference));
        }
        Ok(metadata.and_then(|m| m.run_image.as_ref()).and_then(|r| r.reference.clone()))
    }

    /// The ledger's name of the watch of a builder's run image, when one is watched.
    fn run_watch(&self, builder: &str, metadata: Option<&PinnedMetadata>) -> Option<String> {
        let watch = self.config.builder(builder).and_then(|b| run_image_watch(b, metadata).ok().flatten())?;
        Some(run_watch_name(&watch))
    }

    /// What an action for `image` would be given now, from the current pins (`build-spec`).
    pub async fn preview(&self, image: &str, kind: ActionKind) -> Result<ActionPreview, PreviewError> {
        let image = configured_image(self.config, image)?;
        let record = self.ledger.watch(&image.builder).await?;
        let pin = record
            .as_ref()
            .and_then(|r| r.pin.clone())
            .ok_or_else(|| PreviewError::NotPinned { builder: image.builder.clone() })?;
        let metadata = record.as_ref().and_then(WatchRecord::pinned_metadata);
        let meta = metadata.as_ref().and_then(|m| m.preferred()).cloned();
        let run_image = self.newest_run_image(&image.builder, metadata.as_ref()).await?;
        if kind == ActionKind::Rebase && run_image.is_none() {
            return Err(PreviewError::NoRunImage { builder: image.builder.clone() });
        }
        let app_reference = match self.app_state(&image.image).await {
            AppState::Built { digest: Some(d), .. } => Some(image.image.pinned(&d)),
            _ => None,
        };
        let change = self.ledger.changes(Some(&image.builder), 1).await?;
        let change_id = change.first().map(|c| c.id.clone()).unwrap_or_else(|| event::stable_id(&["pin", &pin.digest]));
        let reasons = change.first().map(|c| reason_names(&c.change)).unwrap_or_default();
        let why = format!("{} requested with build-spec", kind.as_str());
        let target = action_target(image, pin.reference, run_image, why, meta.as_ref(), app_reference, reasons);
        Ok(ActionPreview { key: action_key(&change_id, &image.name), change_id, target })
    }
}

/// The action `build-spec` shows for an image: what the runner would get for it now.
#[derive(Debug, Clone)]
pub struct ActionPreview {
    /// The action's idempotency key ([`action_key`]), which names the runner's object.
    pub key: String,
    /// The builder's latest change, or its pin when it has none yet.
    pub change_id: String,
    pub target: ActionTarget,
}

/// Why `build-spec` cannot say what an image's action would be.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    #[error("no image named \"{image}\" (configured: {})", configured.join(", "))]
    UnknownImage { image: String, configured: Vec<String> },
    #[error("builder \"{builder}\" is not pinned yet; run `builder-monitor run --once` first")]
    NotPinned { builder: String },
    #[error("the run image of builder \"{builder}\" is not known; a rebase needs it")]
    NoRunImage { builder: String },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The `[[images]]` entry named `name`.
pub fn configured_image<'a>(config: &'a Config, name: &str) -> Result<&'a ImageSettings, PreviewError> {
    config
        .image(name)
        .ok_or_else(|| PreviewError::UnknownImage { image: name.to_string(), configured: config.image_names() })
}

mod planned;
pub use planned::{Moved, Planned, RecordedAction};

#[cfg(test)]
mod tests;
