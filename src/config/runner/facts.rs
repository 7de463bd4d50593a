//! What carries out actions, as data: the path rebases take, and the shape of the one constant table ([`Facts`]) each kind, and each other backend (registry
//! rebases, deploys to workloads, Git write-back), answers the daemon's questions from. The tables
//! stand beside their sections (`runner/exec.rs`, `runner/kubernetes.rs`, …); here only their
//! shape, so every section can name it without naming another.

use super::RunnerKind;
use builder_monitor_core::plan::ActionKind;

/// Which path a `rebase` action takes (`[runner] rebase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RebasePath {
    /// The configured runner (a command, Job or kpack Build), like a rebuild.
    #[default]
    Runner,
    /// In the daemon, by registry writes only (`crate::rebase`), whatever the runner type.
    Registry,
}

impl RebasePath {
    pub fn as_str(self) -> &'static str {
        match self {
            RebasePath::Runner => "runner",
            RebasePath::Registry => "registry",
        }
    }
}

/// A Kubernetes RBAC rule a backend needs: verbs on one resource of one API group (`""`: the core
/// group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// What a restart does to an action the backend was running when the daemon stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRestart {
    /// It runs again, its attempt still counted: it lived in the dead process (a registry
    /// rebase), or what outlived it is stopped first (a command's process group).
    RunAgain,
    /// It lives in the cluster (a Job, a Build): the runner follows it again.
    Follow,
    /// Left as it is: this backend runs nothing.
    Leave,
}

/// Which backend a table describes: a runner kind, or one of the backends the configuration puts
/// beside it for some kinds of action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// `[runner] type`.
    Runner(RunnerKind),
    /// Rebases in the daemon by registry writes (`[runner] rebase = "registry"`).
    Registry,
    /// Deploys written to `[[images]] deploy` workloads.
    Workloads,
    /// Git write-back to `[[gitops]]` repositories.
    Commits,
}

/// One backend's answers to everything the rest of the daemon asks of what carries out actions:
/// one constant per backend, beside its section.
#[derive(Debug, PartialEq, Eq)]
pub struct Facts {
    pub backend: BackendKind,
    /// Its name in logs and errors (`[runner] type`, or `registry` for registry rebases).
    pub name: &'static str,
    /// The setting that puts it in force, as a permission's reason names it.
    pub setting: &'static str,
    /// The permissions its objects need in the build namespace.
    pub permissions: &'static [Rule],
    /// The kinds of action it carries out (runner `none`: none).
    pub kinds: &'static [ActionKind],
    /// Whether the daemon retries a failed attempt (after `[runner] backoff`, up to
    /// `max_attempts`); a backend that retries on its own (a Job's pods) or whose attempt is final
    /// (a kpack Build) says no.
    pub retries: bool,
    pub after_restart: AfterRestart,
    /// Whether planning reads every app image's digest (not only `auto` ones): the object it
    /// creates names the app by digest (kpack's rebase `lastBuild`).
    pub needs_app_digest: bool,
    /// The path a rebase it carries out takes, as events and `build-spec` say it.
    pub path: RebasePath,
    /// Whether it carries out its actions on `[kubernetes]`'s cluster (or its pools there).
    pub on_cluster: bool,
    /// Whether it builds in `[[runner.pools]]` (each pool then says which kind's objects it makes).
    pub pools: bool,
}

impl Facts {
    /// Whether it carries out actions of `kind`.
    pub fn takes(&self, kind: ActionKind) -> bool {
        self.kinds.contains(&kind)
    }
}

/// What a runner kind that carries out actions takes: every kind the runner is sent.
pub const EVERY_KIND: &[ActionKind] = &ActionKind::ALL;
