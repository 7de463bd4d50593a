//! `[runner]`: what carries out actions — not at all, local commands, Jobs or kpack Builds in
//! pools — how many at once and how often tried; and, in one place, which backend carries out
//! each kind of action ([`RunnerSettings::carrier`]: rebases in the daemon, deploys by the
//! `[runner.exec] deploy` command or to workloads, Git write-back) with that backend's answers
//! ([`Facts`]). Each kind's own section and answers stand beside this file: `runner/exec.rs`
//! (`[runner.exec]`), `runner/kubernetes.rs` (`[runner.kubernetes]`), `runner/kpack.rs`,
//! `runner/pools.rs` (`[[runner.pools]]`). `cluster`, `status` and `page` read these answers as
//! data; the runner (`crate::runner`) carries them out.

mod exec;
mod facts;
mod kpack;
mod kubernetes;
mod pools;

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{DurationText, Validator};
use builder_monitor_core::plan::ActionKind;
use exec::RawExec;
pub use exec::{DEPLOY_PLACEHOLDERS, ExecSettings, PLACEHOLDERS};
pub use facts::{AfterRestart, BackendKind, EVERY_KIND, Facts, RebasePath, Rule};
pub(super) use kubernetes::RawKubeRunner;
pub use kubernetes::{DEFAULT_GIT_IMAGE, KubeRunnerSettings};
pub(super) use pools::PoolSummary;
pub use pools::{Cluster, DEFAULT_PLATFORM, DEFAULT_POOL, PRIORITY_LABEL, PodTemplate, Pool, QUEUE_LABEL};

/// A runner kind (`[runner] type`, a pool's `type`). A new kind is its variant, its section's
/// `mod` line above and its table's row in [`RUNNERS`]: its name and answers come from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerKind {
    /// Plan and record actions, never run them (a dry run).
    None,
    /// Local commands.
    Exec,
    /// A `batch/v1` Job per action.
    Kubernetes,
    /// A `kpack.io/v1alpha2` Build per action.
    Kpack,
}

/// Every runner kind's table (each stands beside its section), in the order the variants are
/// declared, which is the order the docs list them.
const RUNNERS: [&Facts; 4] = [&NONE, &exec::FACTS, &kubernetes::FACTS, &kpack::FACTS];

const fn every_runner() -> [RunnerKind; RUNNERS.len()] {
    let mut out = [RunnerKind::None; RUNNERS.len()];
    let mut n = 0;
    while n < RUNNERS.len() {
        if let BackendKind::Runner(kind) = RUNNERS[n].backend {
            out[n] = kind;
        }
        n += 1;
    }
    out
}

impl RunnerKind {
    /// Every runner type, as the docs list them.
    pub const ALL: [RunnerKind; RUNNERS.len()] = every_runner();

    /// The kind's answers.
    pub fn facts(self) -> &'static Facts {
        RUNNERS[self as usize]
    }

    pub fn as_str(self) -> &'static str {
        self.facts().name
    }
}

/// Runner `none`'s answers: it takes nothing, so it needs nothing.
pub const NONE: Facts = Facts {
    backend: BackendKind::Runner(RunnerKind::None),
    name: "none",
    setting: "[runner] type = \"none\"",
    permissions: &[],
    kinds: &[],
    retries: false,
    after_restart: AfterRestart::Leave,
    needs_app_digest: false,
    path: RebasePath::Runner,
    on_cluster: false,
    pools: false,
};

/// Rebases in the daemon (`rebase = "registry"`): idempotent, and lived in the dead process only,
/// so they run again after a restart.
pub const REGISTRY: Facts = Facts {
    backend: BackendKind::Registry,
    name: "registry",
    setting: "[runner] rebase = \"registry\"",
    permissions: &[],
    kinds: &[ActionKind::Rebase],
    retries: true,
    after_restart: AfterRestart::RunAgain,
    needs_app_digest: false,
    path: RebasePath::Registry,
    on_cluster: false,
    pools: false,
};

/// Deploys to `[[images]] deploy` workloads: the roll-out lives in the cluster and the write is
/// recorded, so it is followed again. None of its permissions are in the build namespace: they
/// are in the deploy namespaces ([`DEPLOY_PERMISSIONS`]).
pub const WORKLOADS: Facts = Facts {
    backend: BackendKind::Workloads,
    name: "deploy",
    setting: "[[images]] deploy",
    permissions: &[],
    kinds: &[ActionKind::Deploy],
    retries: true,
    after_restart: AfterRestart::Follow,
    needs_app_digest: false,
    path: RebasePath::Runner,
    on_cluster: true,
    pools: false,
};

const DEPLOY_VERBS: &[&str] = &["get", "list", "watch", "patch"];

/// What a deploy needs in each namespace it deploys to.
pub const DEPLOY_PERMISSIONS: &[Rule] = &[
    Rule { group: "apps", resource: "deployments", verbs: DEPLOY_VERBS },
    Rule { group: "apps", resource: "statefulsets", verbs: DEPLOY_VERBS },
    Rule { group: "apps", resource: "daemonsets", verbs: DEPLOY_VERBS },
    Rule { group: "batch", resource: "cronjobs", verbs: DEPLOY_VERBS },
    // delete: a StatefulSet's forced rollback after an undo (pods stuck on the undone revision).
    Rule { group: "", resource: "pods", verbs: &["list", "watch", "delete"] },
];

/// Git write-back to `[[gitops]]`: the head commit's trailer tells whether the push landed, so it
/// runs again after a restart.
pub const COMMITS: Facts = Facts {
    backend: BackendKind::Commits,
    name: "gitops",
    setting: "[[gitops]]",
    permissions: &[],
    kinds: &[ActionKind::Gitops],
    retries: true,
    after_restart: AfterRestart::RunAgain,
    needs_app_digest: false,
    path: RebasePath::Runner,
    on_cluster: false,
    pools: false,
};

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerSettings {
    pub kind: RunnerKind,
    /// Where `rebase` actions run.
    pub rebase: RebasePath,
    /// Actions carried out at once by the runner's backends (pods, commands, builds), registry
    /// rebases aside.
    pub max_concurrent: usize,
    /// Registry rebases (`rebase = "registry"`) carried out at once: a few small requests each in
    /// the daemon, bounded apart from `max_concurrent` (and by each registry's pace).
    pub max_registry_rebases: usize,
    /// Tries per action; a failed try is retried after `backoff`, doubling.
    pub max_attempts: u32,
    pub backoff: Duration,
    pub exec: Option<ExecSettings>,
    /// Where builds run with the `kubernetes` and `kpack` runners: `[runner.kubernetes]` (pool
    /// `default`) first, then `[[runner.pools]]` in order.
    pub pools: Vec<Pool>,
}

/// The kinds of action that build (move the app tag), in the order the runner routes them.
const BUILDS: [ActionKind; 2] = [ActionKind::Rebuild, ActionKind::Rebase];

impl RunnerSettings {
    /// The pool named `name`.
    pub fn pool(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The `[runner.exec] deploy` command, when it is set: it then carries out every deploy (and
    /// no image's workloads are written by the daemon).
    pub fn deploy_command(&self) -> Option<&[String]> {
        self.exec.as_ref().map(|e| e.deploy.as_slice()).filter(|d| !d.is_empty())
    }

    /// The backend that carries out actions of `kind` — the one place that decides it: rebases
    /// with `rebase = "registry"` run in the daemon; deploys run [`Self::deploy_command`] when it
    /// is set and go to the workloads otherwise; Git write-back runs in the daemon; everything
    /// else goes to the configured kind.
    pub fn carrier(&self, kind: ActionKind) -> &'static Facts {
        match (kind, self.rebase) {
            (ActionKind::Rebase, RebasePath::Registry) => &REGISTRY,
            (ActionKind::Deploy, _) if self.deploy_command().is_some() => &exec::FACTS,
            (ActionKind::Deploy, _) => &WORKLOADS,
            (ActionKind::Gitops, _) => &COMMITS,
            (ActionKind::Rebase, RebasePath::Runner) | (ActionKind::Rebuild, _) => self.kind.facts(),
        }
    }

    /// The backends the runner puts in force for builds, each once: the configured kind's first.
    pub fn in_force(&self) -> Vec<&'static Facts> {
        let mut out: Vec<&'static Facts> = Vec::new();
        for facts in BUILDS.map(|kind| self.carrier(kind)) {
            if !out.iter().any(|f| f.name == facts.name) {
                out.push(facts);
            }
        }
        out
    }

    /// Whether planning reads every app image's digest: a backend in force needs it, or builds in
    /// pools one of which makes objects that do (kpack's rebase names the app by digest).
    pub fn needs_app_digest(&self) -> bool {
        let pool_needs = || self.pools.iter().any(|p| p.kind.facts().needs_app_digest);
        self.in_force().iter().any(|f| f.needs_app_digest || (f.pools && pool_needs()))
    }

    /// Whether an action of `kind` is a registry rebase, in the daemon: it takes one of
    /// `max_registry_rebases`' slots, not one of `max_concurrent`'s.
    pub fn in_registry(&self, kind: ActionKind) -> bool {
        self.carrier(kind).backend == BackendKind::Registry
    }

    /// The slots actions of `kind` share: `max_registry_rebases` for registry rebases,
    /// `max_concurrent` for everything else.
    pub fn slots(&self, kind: ActionKind) -> usize {
        if self.in_registry(kind) { self.max_registry_rebases } else { self.max_concurrent }
    }

    /// Whether an action of `kind` is ever carried out (not with runner `none`, unless it is a
    /// rebase in the daemon).
    pub fn carried_out(&self, kind: ActionKind) -> bool {
        self.carrier(kind).takes(kind)
    }

    /// Whether an action of `kind` is carried out on `[kubernetes]`'s cluster (or its pools
    /// there), so it waits while that cluster cannot be reached.
    pub fn on_cluster(&self, kind: ActionKind) -> bool {
        let facts = self.carrier(kind);
        facts.on_cluster && facts.takes(kind)
    }
}

impl Default for RunnerSettings {
    fn default() -> Self {
        RunnerSettings {
            kind: RunnerKind::None,
            rebase: RebasePath::Runner,
            max_concurrent: 2,
            max_registry_rebases: 16,
            max_attempts: 3,
            backoff: Duration::from_secs(30),
            exec: None,
            pools: Vec::new(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRunner {
    #[serde(rename = "type")]
    kind: Option<Spanned<String>>,
    rebase: Option<Spanned<String>>,
    max_concurrent: Option<Spanned<i64>>,
    max_registry_rebases: Option<Spanned<i64>>,
    max_attempts: Option<Spanned<i64>>,
    backoff: Option<Spanned<DurationText>>,
    exec: Option<Spanned<RawExec>>,
    kubernetes: Option<RawKubeRunner>,
    pools: Option<Vec<Spanned<RawKubeRunner>>>,
}

impl Validator<'_> {
    pub(in crate::config) fn runner(&mut self, raw: RawRunner) -> Option<RunnerSettings> {
        let errors_before = self.diagnostics.len();
        let mut s = RunnerSettings::default();
        if let Some(kind) = &raw.kind {
            match RunnerKind::ALL.into_iter().find(|k| k.as_str() == kind.get_ref()) {
                Some(known) => s.kind = known,
                None => {
                    let names: Vec<&str> = RunnerKind::ALL.iter().map(|k| k.as_str()).collect();
                    let (last, rest) = names.split_last().expect("runner types");
                    let expected = format!("{} or {last}", rest.join(", "));
                    self.error(kind.span(), format!("unknown runner type \"{}\", expected {expected}", kind.get_ref()))
                }
            }
        }
        match raw.rebase.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
            None | Some(("runner", _)) => {}
            Some(("registry", _)) => s.rebase = RebasePath::Registry,
            Some((other, span)) => {
                self.error(span, format!("unknown rebase path \"{other}\", expected registry or runner"))
            }
        }
        if let Some(m) = &raw.max_concurrent {
            match usize::try_from(*m.get_ref()) {
                Ok(n) if (1..=256).contains(&n) => s.max_concurrent = n,
                _ => self.error(m.span(), "max_concurrent must be between 1 and 256"),
            }
        }
        if let Some(m) = &raw.max_registry_rebases {
            match usize::try_from(*m.get_ref()) {
                Ok(n) if (1..=256).contains(&n) => s.max_registry_rebases = n,
                _ => self.error(m.span(), "max_registry_rebases must be between 1 and 256"),
            }
        }
        if let Some(m) = &raw.max_attempts {
            match u32::try_from(*m.get_ref()) {
                Ok(n) if (1..=100).contains(&n) => s.max_attempts = n,
                _ => self.error(m.span(), "max_attempts must be between 1 and 100"),
            }
        }
        if let Some(b) = &raw.backoff
            && let Some(d) = self.positive_duration(b, "backoff")
        {
            s.backoff = d;
        }
        if let Some(exec) = raw.exec {
            let span = exec.span();
            s.exec = self.exec(exec.into_inner(), span, s.rebase, s.kind);
        }
        let kind_span = raw.kind.as_ref().map(|k| k.span());
        let pool_kinds: Vec<RunnerKind> = RunnerKind::ALL.into_iter().filter(|k| k.facts().pools).collect();
        s.pools = self.pools(s.kind, &pool_kinds, kind_span, raw.kubernetes, raw.pools.unwrap_or_default());
        if s.kind == RunnerKind::Exec && s.exec.is_none() && self.diagnostics.len() == errors_before {
            let span = raw.kind.as_ref().map(|k| k.span()).unwrap_or(0..0);
            self.error(span, "runner type \"exec\" needs a [runner.exec] table with rebuild and rebase commands");
        }
        (self.diagnostics.len() == errors_before).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runner_table_stands_at_its_variant() {
        for (n, kind) in RunnerKind::ALL.into_iter().enumerate() {
            assert_eq!((kind as usize, kind.facts().backend), (n, BackendKind::Runner(kind)));
        }
    }

    #[test]
    fn registry_rebases_have_slots_of_their_own() {
        let parse = |runner: &str| {
            let text = format!("[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n[runner]\n{runner}\n");
            crate::config::Config::parse(std::path::Path::new("/c.toml"), &text)
        };
        let defaults = parse("rebase = \"registry\"").unwrap().runner;
        assert_eq!((defaults.max_concurrent, defaults.max_registry_rebases), (2, 16));
        assert_eq!((defaults.slots(ActionKind::Rebase), defaults.slots(ActionKind::Rebuild)), (16, 2));
        let set = parse("rebase = \"registry\"\nmax_registry_rebases = 64").unwrap().runner;
        assert_eq!(set.slots(ActionKind::Rebase), 64);
        // Rebases by the runner's backend take its slots.
        assert_eq!(
            parse("type = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]")
                .unwrap()
                .runner
                .slots(ActionKind::Rebase),
            2
        );
        for bad in ["0", "257", "-1"] {
            let refused = parse(&format!("max_registry_rebases = {bad}")).unwrap_err().to_string();
            assert!(refused.contains("max_registry_rebases must be between 1 and 256"), "{refused}");
        }
    }

    #[test]
    fn runner_types_are_their_names() {
        let parse = |kind: &str| {
            let text = format!("[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n[runner]\ntype = \"{kind}\"\n");
            crate::config::Config::parse(std::path::Path::new("/c.toml"), &text)
        };
        for kind in [RunnerKind::None, RunnerKind::Kubernetes, RunnerKind::Kpack] {
            assert_eq!(parse(kind.as_str()).unwrap().runner.kind, kind);
        }
        let refused = parse("nomad").unwrap_err().to_string();
        assert!(
            refused.contains("unknown runner type \"nomad\", expected none, exec, kubernetes or kpack"),
            "{refused}"
        );
    }

    /// Each kind's table names it, and the kinds that build in pools are the Kubernetes ones.
    #[test]
    fn each_kind_has_its_table() {
        for kind in RunnerKind::ALL {
            assert_eq!(kind.facts().name, kind.as_str());
            assert_eq!(kind.facts().backend, BackendKind::Runner(kind));
        }
        let pooled: Vec<RunnerKind> = RunnerKind::ALL.into_iter().filter(|k| k.facts().pools).collect();
        assert_eq!(pooled, [RunnerKind::Kubernetes, RunnerKind::Kpack]);
    }
}
