//! Which backend carries out each kind of action, and the backends in force, started. The
//! backends are [`Backend`]s (`carrier`): one per runner kind — `none`, `exec`, and the kinds that
//! build in pools (`pool`: `kubernetes`, `kpack`) — and those beside the runner: registry rebases
//! (`registry_rebase`, `[runner] rebase = "registry"`), deploys to workloads (`deploy`), Git
//! write-back (`gitops`). Which one takes an action is decided once, as data, by
//! `RunnerSettings::carrier` in the config; here each decision finds its implementation.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::RunnerError;
pub use super::carrier::{ActionRef, Backend, Carrier, Clusters};
pub use crate::config::{AfterRestart, Rule};
use crate::config::{BackendKind, Config, Facts, RunnerKind, RunnerSettings};
use crate::ledger::Kinds;
use builder_monitor_core::plan::ActionKind;

/// The backend of a runner kind (`[runner] type`).
pub fn of(kind: RunnerKind) -> &'static dyn Backend {
    match kind {
        RunnerKind::None => &super::none::RecordOnly,
        RunnerKind::Exec => &super::exec::Commands,
        pooled => super::pool::backend(pooled).unwrap_or(&super::none::RecordOnly),
    }
}

/// The backend a table describes.
fn implementing(facts: &Facts) -> &'static dyn Backend {
    match facts.backend {
        BackendKind::Runner(kind) => of(kind),
        BackendKind::Registry => &super::registry_rebase::RegistryRebase,
        BackendKind::Workloads => &super::deploy::Workloads,
        BackendKind::Commits => &super::gitops::Commits,
    }
}

/// The backend that carries out actions of `kind` (`RunnerSettings::carrier` decides).
pub fn for_action(runner: &RunnerSettings, kind: ActionKind) -> &'static dyn Backend {
    implementing(runner.carrier(kind))
}

/// The kinds of action that build (move the app tag), in the order the runner routes them.
const ACTION_KINDS: [ActionKind; 2] = [ActionKind::Rebuild, ActionKind::Rebase];

/// The backends `runner` puts in force, each once: the configured kind's first.
pub fn in_force(runner: &RunnerSettings) -> Vec<&'static dyn Backend> {
    runner.in_force().into_iter().map(implementing).collect()
}

/// Whether planning reads every app image's digest under `runner`.
pub fn needs_app_digest(runner: &RunnerSettings) -> bool {
    runner.needs_app_digest()
}

/// Whether an action of `kind` is ever carried out under `runner` (not with runner `none`, unless
/// it is a rebase in the daemon).
pub fn carried_out(runner: &RunnerSettings, kind: ActionKind) -> bool {
    runner.carried_out(kind)
}

/// Whether a backend carries out its actions on `[kubernetes]`'s cluster (or its pools there).
pub fn on_the_cluster(backend: &dyn Backend) -> bool {
    backend.facts().on_cluster
}

/// One kind of action's backend, started.
struct Route {
    kind: ActionKind,
    backend: &'static dyn Backend,
    carrier: Arc<dyn Carrier>,
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
        let others = ActionKind::ALL.into_iter().filter(|k| !k.builds());
        for kind in ACTION_KINDS.into_iter().chain(others) {
            // Without deploys (or gitops targets) configured none is ever recorded: nothing to
            // start (or to connect).
            let backend = match config.records(kind) {
                false => &super::none::RecordOnly,
                true => for_action(&config.runner, kind),
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
            .any(|r| r.kind == ActionKind::Deploy && r.backend.facts().backend == BackendKind::Workloads)
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
    use crate::config::RebasePath;

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
            command(
                vec![("batch", "jobs", watch()), ("", "pods", vec!["list", "delete"])],
                false,
                AfterRestart::Follow,
                false
            )
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
