//! The end of a failed deploy: each workload it wrote is read and only the containers that still
//! run what it wrote get their previous image back (unless `undo = "none"`); a container someone
//! else set since is theirs and stays as they set it, and the detail names it. The write is a
//! strategic merge patch with the resourceVersion read as its precondition: a workload deleted
//! since is never created again (a server-side apply to a missing object would create it), and
//! a write by someone else between the read and ours is a conflict, read again. Then the app tag
//! goes back (`workload-and-tag`) when anything had been written, and the image is held. A
//! StatefulSet put back also has its pods stuck on the undone revision replaced ([`super::forced`]).

use kube::api::{Patch, PatchParams};
use serde_json::Value;

use super::super::attempt::{Attempt, Digests, Next};
use super::super::context::Context;
use super::{Deploying, overridden, short};
use crate::ledger::ClaimedAction;
use builder_monitor_core::deploy::{self as core, FIELD_MANAGER, WorkloadState};
use builder_monitor_core::plan::ActionTarget;
use builder_monitor_core::schedule::timestamp;

/// How many times an undo reads a workload again after someone else's write came between.
const CONFLICT_READS: usize = 5;

/// How the undo of one workload ended.
enum Undone {
    /// Its containers run what they ran before (put back now, or never written); `replaced`: the
    /// pods a StatefulSet's forced rollback deleted, or why it could not.
    Back { restored: bool, replaced: Result<Vec<String>, String> },
    /// Someone else's containers stay; the rest were put back.
    Others(Vec<core::Changed>),
    /// Deleted during the deploy: not created again.
    Gone,
}

impl Deploying<'_> {
    /// Ends a failed deploy: what it wrote put back per `undo`, the image held.
    pub(super) async fn fail(mut self, why: String) -> Attempt {
        let mut problems = Vec::new();
        // Recorded before the undo writes: a restart after a crash finishes the undo (see `go`).
        for wp in self.progress.workloads.iter_mut() {
            if matches!(wp.state, WorkloadState::Writing | WorkloadState::Written | WorkloadState::Healthy) {
                wp.state = WorkloadState::Failed;
            }
        }
        if let Err(why) = self.record().await {
            problems.push(why);
        }
        let mut gone = Vec::new();
        let mut replaced = Vec::new();
        if self.deploy.undo.workloads() {
            for i in 0..self.progress.workloads.len() {
                if self.progress.workloads[i].state != WorkloadState::Failed {
                    continue;
                }
                let w = self.progress.workloads[i].workload.clone();
                match self.undo_one(i).await {
                    Ok(Undone::Back { restored, replaced: pods }) => {
                        match pods {
                            Ok(pods) if !pods.is_empty() => replaced.push(format!("{} of {w}", pods.join(", "))),
                            Ok(_) => {}
                            Err(why) => problems.push(why),
                        }
                        let wp = &mut self.progress.workloads[i];
                        wp.state = WorkloadState::Undone;
                        if restored && wp.written_at.is_none() {
                            // A write an attempt before a crash made without recording it.
                            wp.written_at = Some(timestamp(self.ctx.clock.now()));
                        }
                    }
                    Ok(Undone::Others(changed)) => {
                        let wp = &mut self.progress.workloads[i];
                        wp.state = WorkloadState::Overridden;
                        wp.detail = Some(overridden(&changed, "during the deploy"));
                    }
                    Ok(Undone::Gone) => {
                        let wp = &mut self.progress.workloads[i];
                        wp.detail = Some("deleted during the deploy: not created again".into());
                        gone.push(w.to_string());
                    }
                    Err(e) => problems.push(e),
                }
            }
        }
        if let Err(why) = self.record().await {
            problems.push(why);
        }
        // Those an earlier attempt put back count too.
        let undone: Vec<String> = self
            .progress
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Undone && w.written_at.is_some())
            .map(|w| w.workload.to_string())
            .collect();
        let others: Vec<String> = self
            .progress
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Overridden)
            .map(|w| format!("{}: {}", w.workload, w.detail.as_deref().unwrap_or("changed by someone else")))
            .collect();
        let mut tag = None;
        if self.deploy.undo.tag()
            && self.progress.wrote()
            && let Some(before) = &self.deploy.tag_before
        {
            match self.ctx.undo_tag(self.action, self.target, &self.deploy.digest, before).await {
                Ok(Some(moved)) => tag = Some(moved),
                Ok(None) => {}
                Err(e) => problems.push(e),
            }
        }
        let mut detail = why;
        if !undone.is_empty() {
            detail.push_str(&format!("; put back: {}", undone.join(", ")));
        }
        if !replaced.is_empty() {
            detail.push_str(&format!(
                "; replaced {} (not Ready on the undone revision: its controller waits for them to be deleted)",
                replaced.join("; ")
            ));
        }
        if !gone.is_empty() {
            detail.push_str(&format!("; deleted during the deploy, not created again: {}", gone.join(", ")));
        }
        // The override that ended the deploy is its reason already; those the undo found are not.
        let found: Vec<&str> = others.iter().map(String::as_str).filter(|o| !detail.contains(o)).collect();
        if !found.is_empty() {
            detail.push_str(&format!("; {}", found.join("; ")));
        }
        if let Some((from, to)) = &tag {
            detail.push_str(&format!("; tag {} moved back {} → {}", self.target.image, short(from), short(to)));
        }
        if !problems.is_empty() {
            detail.push_str(&format!("; could not undo: {}", problems.join("; ")));
        }
        let mut attempt = Attempt::failed(detail, Next::Final);
        attempt.deploy_mut().hold_image = true;
        attempt.deploy_mut().rolled_back = !undone.is_empty() || tag.is_some();
        if !others.is_empty() {
            attempt.deploy_mut().overridden = Some(format!(
                "held: {}; run `builder-monitor release {}` to let deploys go again",
                others.join("; "),
                self.action.change_id
            ));
        }
        attempt.deploy_mut().workloads = std::mem::take(&mut self.progress.workloads);
        // The tag's move back is recorded by the rollback that made it; these are for the event.
        if let Some((from, to)) = tag {
            attempt.digests = Digests { before: Some(from), after: Some(to) };
        }
        attempt.moved = false;
        attempt
    }

    /// Puts back the containers of workload `i` that still run what the deploy wrote; a
    /// StatefulSet's revision the deploy rolled out is recorded first, so that its pods stuck on
    /// it are replaced even when a crash comes between the put-back and their deletion.
    async fn undo_one(&mut self, i: usize) -> Result<Undone, String> {
        let w = self.progress.workloads[i].workload.clone();
        let w = &w;
        for _ in 0..CONFLICT_READS {
            let Some(object) = self.get(w).await? else { return Ok(Undone::Gone) };
            let wp = &self.progress.workloads[i];
            let plan = core::undo_plan(w.kind, &object, &wp.containers, &self.action.change_id);
            if plan.is_empty() {
                if !plan.others.is_empty() {
                    return Ok(Undone::Others(plan.others));
                }
                // Put back already (an attempt before a crash): its stuck pods may still be there.
                let replaced = match wp.failed_revision.clone() {
                    Some(failed) => self.replace_stuck(w, &failed).await,
                    None => Ok(Vec::new()),
                };
                return Ok(Undone::Back { restored: false, replaced });
            }
            // A StatefulSet's roll-out of the deploy's template, its pods on it to replace after.
            let failed = (w.kind == core::WorkloadKind::StatefulSet).then(|| core::rolling_revision(&object)).flatten();
            if failed.is_some() && wp.failed_revision != failed {
                self.progress.workloads[i].failed_revision = failed.clone();
                self.record().await?;
            }
            let wp = &self.progress.workloads[i];
            let version = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
            let body = core::undo_patch(w.kind, &plan, wp.previous_change.as_deref(), version);
            let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
            match self.api(w).patch(&w.name, &params, &Patch::Strategic(&body)).await {
                Ok(_) if plan.others.is_empty() => {
                    let replaced = match &failed {
                        Some(failed) => self.replace_stuck(w, failed).await,
                        None => Ok(Vec::new()),
                    };
                    return Ok(Undone::Back { restored: true, replaced });
                }
                Ok(_) => return Ok(Undone::Others(plan.others)),
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Undone::Gone),
                // Someone wrote it since our read: read again, theirs may now be in it.
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(format!("cannot put back {w}: {e}")),
            }
        }
        Err(format!("cannot put back {w}: it kept changing under the undo ({CONFLICT_READS} reads)"))
    }
}

impl Context {
    /// Moves the app tag back from `digest` to `before` after a failed deploy, as `rollback` does
    /// (recorded before the write); only when the tag still holds `digest`. Answers the move made.
    async fn undo_tag(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        digest: &str,
        before: &str,
    ) -> Result<Option<(String, String)>, String> {
        let Some(image) = self.config.image(&action.image) else {
            return Err(format!("image {} is no longer configured: its tag is left", action.image));
        };
        match self.app_digest(&target.image).await {
            Some(now) if now == digest => {}
            Some(now) => {
                tracing::warn!(image = %action.image, tag = %now, "the app tag moved on after the deploy; not moved back");
                return Ok(None);
            }
            None => return Err(format!("cannot read {}: its tag is left", target.image)),
        }
        match crate::rollback::rollback(
            &self.config,
            &self.ledger,
            &self.registry,
            self.signing.as_deref(),
            image,
            Some(before),
            &format!("builder-monitor (undo of deploy {})", action.key),
            self.clock.now(),
        )
        .await
        {
            Ok(done) if done.moved => Ok(Some((digest.to_string(), before.to_string()))),
            Ok(_) => Ok(None),
            Err(err) => Err(format!("cannot move {} back to {}: {err}", target.image, short(before))),
        }
    }
}
