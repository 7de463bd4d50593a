//! The `kpack` runner's answers ([`FACTS`]). It builds in the pools of `[runner.kubernetes]` and
//! `[[runner.pools]]` like the `kubernetes` runner; what a kpack Build cannot carry is checked
//! where those sections and pod templates are read.

use super::RunnerKind;
use super::facts::{AfterRestart, BackendKind, EVERY_KIND, Facts, RebasePath, Rule};

/// A Build is one attempt: its failure is final. It lives in the cluster, so a restart follows it;
/// a rebase Build names the app by digest (`lastBuild`), so planning reads every app's.
pub const FACTS: Facts = Facts {
    backend: BackendKind::Runner(RunnerKind::Kpack),
    name: "kpack",
    setting: "[runner] type = \"kpack\"",
    permissions: &[Rule { group: "kpack.io", resource: "builds", verbs: &["create", "get", "list", "watch"] }],
    kinds: EVERY_KIND,
    retries: false,
    after_restart: AfterRestart::Follow,
    needs_app_digest: true,
    path: RebasePath::Runner,
    on_cluster: true,
    pools: true,
};
