//! One place per runner kind for everything the rest of the daemon asks of what carries out
//! actions. A [`Backend`] answers: the Kubernetes permissions it needs (`rbac`, the Helm chart,
//! the start-up check), which kinds of action it takes, whether the daemon retries a failed
//! attempt, what a restart does to its running actions, whether planning must read the app's
//! digest, which path a rebase takes, and what it would create for an action (`build-spec`).
//! Started, it carries actions out ([`Carrier`]). Each kind answers in its own file — `none`,
//! `exec`, `kubernetes`, `kpack` — and so do registry rebases (`registry_rebase`, `[runner]
//! rebase = "registry"`), one backend among the others; [`for_action`] says which one an action
//! goes to. `cluster`, `reaction`, `page` and the runner ask here instead of matching on
//! [`RunnerKind`].

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::attempt::Attempt;
use super::kubernetes::ActionRef;
use super::{PreviewError, Runner, RunnerError};
use crate::config::{Config, RebasePath, RunnerKind, RunnerSettings};
use crate::ledger::{ClaimedAction, Kinds};
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// A Kubernetes RBAC rule a backend needs in the build namespace (`[runner.kubernetes]
/// namespace`): verbs on one resource of one API group (`""`: the core group).
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

/// A runner kind's answers; one implementation per kind, each in its kind's file.
pub trait Backend: Send + Sync {
    /// Its name in logs and errors (`[runner] type`, or `registry` for registry rebases).
    fn name(&self) -> &'static str;
    /// The setting that puts it in force, as a permission's reason names it.
    fn setting(&self) -> &'static str;
    /// The permissions its objects need in the build namespace.
    fn permissions(&self) -> &'static [Rule];
    /// Whether it carries out actions of `kind` (runner `none`: none).
    fn takes(&self, kind: ActionKind) -> bool;
    /// Whether the daemon retries a failed attempt (after `[runner] backoff`, up to
    /// `max_attempts`); a backend that retries on its own (a Job's pods) or whose attempt is final
    /// (a kpack Build) says no.
    fn retries(&self) -> bool;
    fn after_restart(&self) -> AfterRestart;
    /// Whether planning reads every app image's digest (not only `auto` ones): the object it
    /// creates names the app by digest (kpack's rebase `lastBuild`).
    fn needs_app_digest(&self) -> bool;
    /// The path a rebase it carries out takes, as events and `build-spec` say it.
    fn path(&self) -> RebasePath;
    /// What it would create for `action` now (`build-spec`).
    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError>;
    /// Started for `config`: what carries out its actions. A Kubernetes backend needs the
    /// clients of its `clusters` and watches until `stop`.
    fn start(
        &self,
        config: &Config,
        clusters: &Clusters,
        stop: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError>;
}

/// The Kubernetes clients the daemon has: `[kubernetes]`'s, and one per pool with a cluster of
/// its own (by pool name).
#[derive(Clone, Default)]
pub struct Clusters {
    pub default: Option<kube::Client>,
    pub pools: std::collections::BTreeMap<String, kube::Client>,
    /// Why the actions on `[kubernetes]`'s cluster wait: it could not be configured (`default` is
    /// then none) or did not answer at start.
    pub waiting: Option<String>,
}

impl Clusters {
    /// The client of `pool`'s cluster.
    pub fn of(&self, pool: &crate::config::Pool) -> Option<kube::Client> {
        match &pool.cluster {
            Some(_) => self.pools.get(&pool.name).cloned(),
            None => self.default.clone(),
        }
    }
}

impl From<Option<kube::Client>> for Clusters {
    fn from(default: Option<kube::Client>) -> Self {
        Clusters { default, pools: Default::default(), waiting: None }
    }
}

/// A started backend: carries out one attempt of an action and says how it went.
pub trait Carrier: Send + Sync {
    fn attempt<'a>(
        &'a self,
        runner: &'a Runner,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
    ) -> BoxFuture<'a, Attempt>;
}

/// The backend of a runner kind (`[runner] type`).
pub fn of(kind: RunnerKind) -> &'static dyn Backend {
    match kind {
        RunnerKind::None => &super::none::RecordOnly,
        RunnerKind::Exec => &super::exec::Commands,
        RunnerKind::Kubernetes => &super::kubernetes::Jobs,
        RunnerKind::Kpack => &super::kpack::Builds,
    }
}

/// The backend that carries out actions of `kind`: rebases with `rebase = "registry"` run in the
/// daemon; deploys run `[runner.exec] deploy` when it is set and go to the workloads otherwise;
/// everything else goes to the configured kind's.
pub fn for_action(runner: &RunnerSettings, kind: ActionKind) -> &'static dyn Backend {
    match (kind, runner.rebase) {
        (ActionKind::Rebase, RebasePath::Registry) => &super::registry_rebase::RegistryRebase,
        (ActionKind::Deploy, _) if runner.exec.as_ref().is_some_and(|e| !e.deploy.is_empty()) => &super::exec::Commands,
        (ActionKind::Deploy, _) => &super::deploy::Workloads,
        (ActionKind::Gitops, _) => &super::gitops::Commits,
        _ => of(runner.kind),
    }
}

/// The kinds of action that build (move the app tag), in the order the runner routes them.
const ACTION_KINDS: [ActionKind; 2] = [ActionKind::Rebuild, ActionKind::Rebase];

/// The backends `runner` puts in force, each once: the configured kind's first.
pub fn in_force(runner: &RunnerSettings) -> Vec<&'static dyn Backend> {
    let mut out: Vec<&'static dyn Backend> = Vec::new();
    for backend in ACTION_KINDS.map(|kind| for_action(runner, kind)) {
        if !out.iter().any(|b| b.name() == backend.name()) {
            out.push(backend);
        }
    }
    out
}

/// Whether planning reads every app image's digest under `runner`.
pub fn needs_app_digest(runner: &RunnerSettings) -> bool {
    let kpack_pool = || runner.pools.iter().any(|p| p.kind == RunnerKind::Kpack);
    in_force(runner)
        .iter()
        .any(|b| b.needs_app_digest() || (matches!(b.name(), "kubernetes" | "kpack") && kpack_pool()))
}

/// Whether an action of `kind` is ever carried out under `runner` (not with runner `none`, unless
/// it is a rebase in the daemon).
pub fn carried_out(runner: &RunnerSettings, kind: ActionKind) -> bool {
    for_action(runner, kind).takes(kind)
}

/// One kind of action's backend, started.
struct Route {
    kind: ActionKind,
    backend: &'static dyn Backend,
    carrier: Arc<dyn Carrier>,
}

/// Whether a backend carries out its actions on `[kubernetes]`'s cluster (or its pools there).
pub fn on_the_cluster(backend: &dyn Backend) -> bool {
    matches!(backend.name(), "kubernetes" | "kpack" | "deploy")
}

/// The backends in force, started: where the runner sends each kind of action.
pub struct Backends {
    routes: Vec<Route>,
    /// The cluster client deploys write through, when deploys go to workloads (the guard of
    /// deployed workloads watches through it too).
    pub(super) deploy_client: Option<kube::Client>,
    /// Why the actions on the cluster wait (not claimed, so they stay pending), while they do.
    waiting: std::sync::Mutex<Option<String>>,
    /// The kinds of action that wait with the cluster.
    on_cluster: Kinds,
    /// The client to ask whether the cluster answers again (none: it cannot be configured, and
    /// they wait until the daemon restarts with one).
    pub(super) cluster: Option<kube::Client>,
}

impl Backends {
    /// The backends `config` asks for, each started once; the Kubernetes ones need `client` and
    /// watch until `stop`.
    pub fn for_config(config: &Config, clusters: Clusters, stop: CancellationToken) -> Result<Self, RunnerError> {
        let client = clusters.default.clone();
        let mut started: Vec<(&'static str, Arc<dyn Carrier>)> = Vec::new();
        let mut routes = Vec::new();
        let mut on_cluster = Kinds::NONE;
        for kind in ACTION_KINDS.into_iter().chain([ActionKind::Deploy, ActionKind::Gitops]) {
            // Without deploys (or gitops targets) configured none is ever recorded: nothing to
            // start (or to connect).
            let backend = match kind {
                ActionKind::Deploy if !config.deploys() => &super::none::RecordOnly,
                ActionKind::Gitops if config.gitops.is_empty() => &super::none::RecordOnly,
                _ => for_action(&config.runner, kind),
            };
            let waits = clusters.waiting.is_some() && on_the_cluster(backend);
            if waits && backend.takes(kind) {
                on_cluster = on_cluster.with(kind);
            }
            let carrier = match started.iter().find(|(name, _)| *name == backend.name()) {
                Some((_, carrier)) => carrier.clone(),
                // Without a client nothing of it can start; its actions are never claimed.
                None if waits && client.is_none() => super::none::RecordOnly.start(config, &clusters, stop.clone())?,
                None => {
                    let carrier = backend.start(config, &clusters, stop.clone())?;
                    started.push((backend.name(), carrier.clone()));
                    carrier
                }
            };
            routes.push(Route { kind, backend, carrier });
        }
        let deploy_client = routes
            .iter()
            .any(|r| r.kind == ActionKind::Deploy && r.backend.name() == "deploy")
            .then(|| client.clone())
            .flatten();
        let waiting = clusters.waiting.filter(|_| !on_cluster.is_empty());
        Ok(Backends {
            routes,
            deploy_client,
            cluster: client.filter(|_| waiting.is_some()),
            waiting: std::sync::Mutex::new(waiting),
            on_cluster,
        })
    }

    /// Why the actions on the cluster wait, while they do.
    pub fn cluster_wait(&self) -> Option<String> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The cluster answers: its actions are claimed again.
    pub(crate) fn cluster_answers(&self) {
        *self.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn route(&self, kind: ActionKind) -> &Route {
        self.routes.iter().find(|r| r.kind == kind).expect("a route for every kind of action")
    }

    /// The backend that answers for actions of `kind`.
    pub(super) fn backend(&self, kind: ActionKind) -> &'static dyn Backend {
        self.route(kind).backend
    }

    pub(super) fn carrier(&self, kind: ActionKind) -> &dyn Carrier {
        self.route(kind).carrier.as_ref()
    }

    fn taken(&self) -> impl Iterator<Item = ActionKind> + '_ {
        self.routes.iter().filter(|r| r.backend.takes(r.kind)).map(|r| r.kind)
    }

    /// Whether any action is carried out at all.
    pub(super) fn act(&self) -> bool {
        self.taken().next().is_some()
    }

    /// The kinds of action the runner claims: those its backends take, but not those on a cluster
    /// they wait for.
    pub(super) fn claims(&self) -> Kinds {
        let waiting = self.cluster_wait().is_some();
        self.taken().filter(|k| !(waiting && self.on_cluster.contains(*k))).fold(Kinds::NONE, Kinds::with)
    }

    /// Whether any backend follows actions again after a restart.
    pub(super) fn follow(&self) -> bool {
        self.routes.iter().any(|r| r.backend.after_restart() == AfterRestart::Follow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(kind: RunnerKind, rebase: RebasePath) -> RunnerSettings {
        RunnerSettings { kind, rebase, ..RunnerSettings::default() }
    }

    /// One backend's answers, as data.
    #[derive(Debug, PartialEq)]
    struct Answers {
        permissions: Vec<(&'static str, &'static str, Vec<&'static str>)>,
        /// (rebuilds, rebases)
        takes: (bool, bool),
        retries: bool,
        after_restart: AfterRestart,
        needs_app_digest: bool,
        path: RebasePath,
    }

    fn answers(b: &dyn Backend) -> Answers {
        Answers {
            permissions: b.permissions().iter().map(|r| (r.group, r.resource, r.verbs.to_vec())).collect(),
            takes: (b.takes(ActionKind::Rebuild), b.takes(ActionKind::Rebase)),
            retries: b.retries(),
            after_restart: b.after_restart(),
            needs_app_digest: b.needs_app_digest(),
            path: b.path(),
        }
    }

    /// The table every other module reads: a changed answer fails here first.
    #[test]
    fn each_kind_answers_for_itself() {
        let watch = || vec!["create", "get", "list", "watch"];
        let command = |permissions, retries, after_restart, needs_app_digest| Answers {
            permissions,
            takes: (true, true),
            retries,
            after_restart,
            needs_app_digest,
            path: RebasePath::Runner,
        };
        assert_eq!(
            answers(of(RunnerKind::None)),
            Answers { takes: (false, false), ..command(vec![], false, AfterRestart::Leave, false) }
        );
        assert_eq!(answers(of(RunnerKind::Exec)), command(vec![], true, AfterRestart::RunAgain, false));
        assert_eq!(
            answers(of(RunnerKind::Kubernetes)),
            command(vec![("batch", "jobs", watch()), ("", "pods", vec!["list"])], false, AfterRestart::Follow, false)
        );
        assert_eq!(
            answers(of(RunnerKind::Kpack)),
            command(vec![("kpack.io", "builds", watch())], false, AfterRestart::Follow, true)
        );
        assert_eq!(
            answers(&crate::runner::registry_rebase::RegistryRebase),
            Answers {
                takes: (false, true),
                path: RebasePath::Registry,
                ..command(vec![], true, AfterRestart::RunAgain, false)
            }
        );
        assert_eq!(of(RunnerKind::Kubernetes).setting(), "[runner] type = \"kubernetes\"");
        assert_eq!(of(RunnerKind::Kpack).setting(), "[runner] type = \"kpack\"");
        for kind in RunnerKind::ALL {
            assert_eq!(of(kind).name(), kind.as_str());
        }
    }

    #[test]
    fn rebases_in_the_daemon_are_one_backend_that_takes_only_rebases() {
        for kind in RunnerKind::ALL {
            let runner = settings(kind, RebasePath::Registry);
            let rebase = for_action(&runner, ActionKind::Rebase);
            assert_eq!((rebase.name(), rebase.path()), ("registry", RebasePath::Registry));
            assert!(rebase.takes(ActionKind::Rebase) && !rebase.takes(ActionKind::Rebuild));
            assert_eq!(for_action(&runner, ActionKind::Rebuild).name(), kind.as_str());
            assert!(carried_out(&runner, ActionKind::Rebase));
            assert_eq!(carried_out(&runner, ActionKind::Rebuild), kind != RunnerKind::None);

            let runner = settings(kind, RebasePath::Runner);
            assert_eq!(for_action(&runner, ActionKind::Rebase).name(), kind.as_str());
            assert_eq!(for_action(&runner, ActionKind::Rebase).path(), RebasePath::Runner);
            assert_eq!(in_force(&runner).len(), 1);
            assert_eq!(carried_out(&runner, ActionKind::Rebase), kind != RunnerKind::None);
        }
        let names = |r: &RunnerSettings| in_force(r).iter().map(|b| b.name()).collect::<Vec<_>>();
        assert_eq!(names(&settings(RunnerKind::Kpack, RebasePath::Registry)), ["kpack", "registry"]);
        // kpack's rebuilds keep planning reading every app, whatever path rebases take.
        assert!(needs_app_digest(&settings(RunnerKind::Kpack, RebasePath::Registry)));
        assert!(!needs_app_digest(&settings(RunnerKind::Kubernetes, RebasePath::Runner)));
    }

    /// What the runner claims from the ledger: every kind, only rebases (runner `none` with
    /// rebases in the daemon), or nothing.
    #[test]
    fn the_runner_claims_what_its_backends_take() {
        let backends = |runner: &str| {
            let text = format!("[[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:1\"\n[runner]\n{runner}");
            let config = Config::parse(std::path::Path::new("/config.toml"), &text).unwrap();
            Backends::for_config(&config, Clusters::default(), CancellationToken::new()).unwrap()
        };
        let none = backends("");
        assert!(!none.act());
        let none = backends("rebase = \"registry\"");
        assert!(none.act());
        assert_eq!(none.claims(), Kinds::from(ActionKind::Rebase));
        assert!(!none.follow());
        let exec = backends("type = \"exec\"\nrebase = \"registry\"\n[runner.exec]\nrebuild = [\"true\"]");
        let builds = Kinds::from(ActionKind::Rebase).with(ActionKind::Rebuild);
        assert_eq!((exec.act(), exec.claims()), (true, builds));
        assert_eq!(exec.backend(ActionKind::Rebuild).name(), "exec");
        assert_eq!(exec.backend(ActionKind::Rebase).name(), "registry");
    }

    /// Without a cluster client, a Kubernetes runner and deploys to workloads still start (before,
    /// `NoClient` stopped the daemon): their actions are not claimed while the cluster is waited
    /// for, registry rebases are, and once it answers everything is claimed again.
    #[test]
    fn actions_on_a_cluster_being_waited_for_are_not_claimed() {
        let text = "[[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:1\"\n\
                    [[images]]\nname = \"app\"\nbuilder = \"b\"\nimage = \"registry.example.com/app:1\"\n\
                    deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"app\" }]\n\
                    [runner]\ntype = \"kubernetes\"\nrebase = \"registry\"\n";
        let config = Config::parse(std::path::Path::new("/config.toml"), text).unwrap();
        let waiting = Clusters { waiting: Some("no Kubernetes cluster: …".into()), ..Clusters::default() };
        let backends = Backends::for_config(&config, waiting, CancellationToken::new()).unwrap();
        assert_eq!(backends.cluster_wait().as_deref(), Some("no Kubernetes cluster: …"));
        assert_eq!(backends.claims(), Kinds::from(ActionKind::Rebase));
        assert!(backends.act() && backends.cluster.is_none() && backends.deploy_client.is_none());
        backends.cluster_answers();
        let all = Kinds::from(ActionKind::Rebase).with(ActionKind::Rebuild).with(ActionKind::Deploy);
        assert_eq!(backends.claims(), all);
    }
}
