//! The `none` runner: actions are planned and recorded, never run (a dry run); `status` and the
//! page show them waiting.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Next};
use super::carrier::{ActionRef, Backend, Carrier, Clusters, Context};
use super::{PreviewError, RunnerError};
use crate::config::{Config, Facts, RebasePath};
use crate::ledger::ClaimedAction;
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// Runner `none`'s answers: it takes nothing, so it needs nothing.
pub struct RecordOnly;

impl Backend for RecordOnly {
    fn facts(&self) -> &'static Facts {
        crate::config::RunnerKind::None.facts()
    }

    /// The command a `[runner.exec]` table would give it, if the config has one.
    /// What would be recorded, and that nothing would run (no `command`).
    fn preview(&self, _: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        let path = (action.kind == ActionKind::Rebase).then_some(RebasePath::Runner.as_str());
        Ok(serde_json::json!({
            "runner": "none",
            "path": path,
            "target": target,
            "note": NOTHING_TO_RUN,
        }))
    }

    fn start(&self, _: &Config, _: &Clusters, _: CancellationToken) -> Result<Arc<dyn Carrier>, RunnerError> {
        Ok(Arc::new(RecordOnly))
    }
}

impl Carrier for RecordOnly {
    /// Never called (it takes nothing); an action sent here anyway ends for good.
    fn attempt<'a>(
        &'a self,
        _: &'a Context,
        _: &'a ClaimedAction,
        _: &'a ActionTarget,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(async { Attempt::failed("runner none runs nothing".into(), Next::Final) })
    }
}

/// What `build-spec` says for runner `none`.
pub const NOTHING_TO_RUN: &str = "runner type \"none\" records actions and never runs them: nothing to run. Set \
     [runner] type = \"exec\", \"kubernetes\" or \"kpack\" to run them";
