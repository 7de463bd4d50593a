//! What a deployment expects of its config: `builder-monitor check --expect KEY=VALUE`.
//!
//! The Helm chart shapes the pod (its port, replicas, data volume) and its RBAC from values, not by
//! reading the TOML (Helm has no TOML parser). Its init container runs `check` with one
//! expectation per value it took, so a config that disagrees stops the pod with what to change
//! rather than starting a daemon that lacks a permission or listens where no probe looks.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use super::{DEPLOYS, required_permissions};
use crate::config::{Config, RunnerKind, StateLocation};

/// One `--expect KEY=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expectation {
    /// `listen-port=PORT`: a `[server]` listening on every interface of the pod on PORT.
    ListenPort(u16),
    /// `namespace=NS`: the daemon's namespace (`[kubernetes] namespace`, default `$POD_NAMESPACE`),
    /// where its own Role is.
    Namespace(String),
    /// `in-cluster=true`: no `[kubernetes] kubeconfig` or `context`: the pod's service account.
    InCluster,
    /// `publish=BOOL`: `[kubernetes] publish`.
    Publish(bool),
    /// `prune=BOOL`: `[kubernetes] prune` in effect (with `publish`).
    Prune(bool),
    /// `leader-election=BOOL`: `[kubernetes] leader_election`.
    LeaderElection(bool),
    /// `state=kubernetes`, or `state=DIR`: a SQLite ledger inside DIR (absolute).
    State(ExpectedState),
    /// `runner=TYPE`: `[runner] type`.
    Runner(RunnerKind),
    /// `runner-namespace=NS`: where the runner's permissions are granted, when it needs any.
    RunnerNamespace(String),
    /// `deploy-namespaces=NS,NS`: the namespaces deploys to workloads are granted in (may be empty).
    DeployNamespaces(BTreeSet<String>),
    /// `pools=NAME,NAME`: the kubeconfigs mounted at `POOL_KUBECONFIGS/NAME/kubeconfig` (may be
    /// empty): the pools' kubeconfigs in that directory are exactly these files.
    Pools(BTreeSet<String>),
}

/// Where the chart mounts each pool's kubeconfig: `POOL_KUBECONFIGS/NAME/kubeconfig`, NAME being an
/// entry of its `pools` value.
pub const POOL_KUBECONFIGS: &str = "/etc/builder-monitor/pools";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedState {
    Kubernetes,
    SqliteIn(PathBuf),
}

/// The keys, as `--help` and errors list them.
pub const KEYS: &str = "listen-port, namespace, in-cluster, publish, prune, leader-election, state, runner, runner-namespace, deploy-namespaces, pools";

#[derive(Debug, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

impl FromStr for Expectation {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let fail = |why: String| Err(ParseError(format!("\"{text}\": {why}")));
        let Some((key, value)) = text.split_once('=') else {
            return fail(format!("not KEY=VALUE (keys: {KEYS})"));
        };
        let boolean = |value: &str| match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(ParseError(format!("\"{text}\": {key} is true or false"))),
        };
        let label = |value: &str, what: &str| {
            if crate::config::is_dns_label(value) {
                Ok(value.to_string())
            } else {
                Err(ParseError(format!("\"{text}\": \"{value}\" is not a {what} name")))
            }
        };
        let name = |value: &str| label(value, "namespace");
        Ok(match key {
            "listen-port" => match value.parse::<u16>() {
                Ok(port) if port > 0 => Expectation::ListenPort(port),
                _ => return fail("listen-port is a port number, 1-65535".into()),
            },
            "namespace" => Expectation::Namespace(name(value)?),
            "in-cluster" if value == "true" => Expectation::InCluster,
            "in-cluster" => return fail("in-cluster can only be expected true".into()),
            "publish" => Expectation::Publish(boolean(value)?),
            "prune" => Expectation::Prune(boolean(value)?),
            "leader-election" => Expectation::LeaderElection(boolean(value)?),
            "state" if value == "kubernetes" => Expectation::State(ExpectedState::Kubernetes),
            "state" if Path::new(value).is_absolute() => Expectation::State(ExpectedState::SqliteIn(value.into())),
            "state" => return fail("state is \"kubernetes\" or the absolute directory of the SQLite ledger".into()),
            "runner" => match RunnerKind::ALL.into_iter().find(|k| k.as_str() == value) {
                Some(kind) => Expectation::Runner(kind),
                None => {
                    let types: Vec<&str> = RunnerKind::ALL.iter().map(|k| k.as_str()).collect();
                    return fail(format!("runner is one of {}", types.join(", ")));
                }
            },
            "runner-namespace" => Expectation::RunnerNamespace(name(value)?),
            "deploy-namespaces" => Expectation::DeployNamespaces(
                value.split(',').filter(|n| !n.is_empty()).map(name).collect::<Result<_, _>>()?,
            ),
            "pools" => Expectation::Pools(
                value.split(',').filter(|n| !n.is_empty()).map(|n| label(n, "pool")).collect::<Result<_, _>>()?,
            ),
            _ => return fail(format!("unknown key {key} (keys: {KEYS})")),
        })
    }
}

/// What in `config` is not as `expected`, one sentence each, naming the config's side of the fix.
pub fn unmet(config: &Config, expected: &[Expectation]) -> Vec<String> {
    expected
        .iter()
        .flat_map(|e| match e {
            Expectation::Pools(mounted) => pool_problems(config, mounted),
            _ => problem(config, e).into_iter().collect(),
        })
        .collect()
}

fn problem(config: &Config, expected: &Expectation) -> Option<String> {
    let kube = &config.kubernetes;
    let flag = |key: &str, actual: bool, wanted: bool| {
        (actual != wanted).then(|| {
            format!(
                "[kubernetes] {} is {actual}, but the deployment expects {key}={wanted}: set {} = {wanted} (or expect {actual})",
                key.replace('-', "_"),
                key.replace('-', "_")
            )
        })
    };
    match expected {
        Expectation::ListenPort(port) => {
            let wanted = format!("\"0.0.0.0:{port}\"");
            let Some(server) = &config.server else {
                return Some(format!(
                    "no [server] table: the deployment's probes, Service and metrics need [server] listen = {wanted}"
                ));
            };
            let listen = server.listen;
            if listen.ip().is_loopback() {
                Some(format!(
                    "[server] listen = \"{listen}\" only accepts connections from inside the pod; use {wanted}"
                ))
            } else if !listen.ip().is_unspecified() {
                Some(format!("[server] listen = \"{listen}\" is one address, not the pod's every interface; use {wanted}"))
            } else if listen.port() != *port {
                Some(format!(
                    "[server] listen = \"{listen}\" is port {}, but the deployment expects listen-port={port}: use {wanted} (or expect port {})",
                    listen.port(),
                    listen.port()
                ))
            } else {
                None
            }
        }
        Expectation::Namespace(namespace) => (&kube.namespace != namespace).then(|| {
            format!(
                "[kubernetes] namespace = \"{}\", but the daemon runs in namespace \"{namespace}\", where its Role is: leave [kubernetes] namespace unset (it defaults to $POD_NAMESPACE)",
                kube.namespace
            )
        }),
        Expectation::InCluster => (kube.kubeconfig.is_some() || kube.context.is_some()).then(|| {
            "[kubernetes] kubeconfig or context is set, but in the pod the daemon uses its service account: leave [kubernetes] kubeconfig and context unset".to_string()
        }),
        Expectation::Publish(wanted) => flag("publish", kube.publish, *wanted),
        Expectation::Prune(wanted) => flag("prune", kube.publish && kube.prune, *wanted),
        Expectation::LeaderElection(wanted) => flag("leader-election", kube.leader_election, *wanted),
        Expectation::State(wanted) => state_problem(&config.monitor.state, wanted),
        Expectation::Runner(kind) => (config.runner.kind != *kind).then(|| {
            format!(
                "[runner] type = \"{}\", but the deployment expects runner={}: set type = \"{}\" (or expect {})",
                config.runner.kind.as_str(),
                kind.as_str(),
                kind.as_str(),
                config.runner.kind.as_str()
            )
        }),
        Expectation::RunnerNamespace(namespace) => {
            let used = namespaces(config, |p| p.for_runner());
            (!used.is_empty() && used.iter().any(|n| n != namespace)).then(|| {
                format!(
                    "[runner.kubernetes] namespace is {}, but the deployment grants the runner's permissions in \"{namespace}\": set namespace = \"{namespace}\" (or expect that namespace)",
                    listed(&used)
                )
            })
        }
        Expectation::DeployNamespaces(granted) => {
            let used = namespaces(config, |p| p.needed_for == DEPLOYS);
            (&used != granted).then(|| {
                format!(
                    "the [[images]] deploy workloads are in namespaces {}, but the deployment grants deploys in {}: grant exactly {}",
                    listed(&used),
                    listed(granted),
                    listed(&used)
                )
            })
        }
        // Several at once, each its own line: `pool_problems`.
        Expectation::Pools(_) => None,
    }
}

/// The pools' kubeconfigs in `POOL_KUBECONFIGS` against the ones mounted there: each pool's file
/// mounted, each mounted file some pool's. Kubeconfigs elsewhere (mounted by other means) are not
/// this expectation's business.
fn pool_problems(config: &Config, mounted: &BTreeSet<String>) -> Vec<String> {
    let dir = Path::new(POOL_KUBECONFIGS);
    let file = |name: &str| format!("{POOL_KUBECONFIGS}/{name}/kubeconfig");
    let mut out = Vec::new();
    let mut used = BTreeSet::new();
    for pool in &config.runner.pools {
        let Some(path) = pool.cluster.as_ref().and_then(|c| c.kubeconfig.as_deref()) else { continue };
        let Ok(rest) = path.strip_prefix(dir) else { continue };
        let parts: Vec<Component> = rest.components().collect();
        let name = match parts[..] {
            [Component::Normal(name), Component::Normal(leaf)] if leaf == "kubeconfig" => name.to_str(),
            _ => None,
        };
        match name {
            Some(name) if mounted.contains(name) => {
                used.insert(name.to_string());
            }
            Some(name) => out.push(format!(
                "pool \"{}\": kubeconfig = \"{}\" is not mounted (the deployment mounts kubeconfigs for {}): use one it mounts (or expect pools with \"{name}\")",
                pool.name,
                path.display(),
                listed(mounted)
            )),
            None => out.push(format!(
                "pool \"{}\": kubeconfig = \"{}\" is not where the deployment mounts a pool's kubeconfig: use \"{}\"",
                pool.name,
                path.display(),
                file("NAME")
            )),
        }
    }
    for name in mounted.difference(&used) {
        out.push(format!(
            "the deployment mounts the kubeconfig {}, but no pool reads it: set kubeconfig = \"{}\" on the pool that builds in that cluster (or expect pools without \"{name}\")",
            file(name),
            file(name)
        ));
    }
    out
}

fn state_problem(state: &StateLocation, wanted: &ExpectedState) -> Option<String> {
    match (state, wanted) {
        (StateLocation::Kubernetes, ExpectedState::Kubernetes) => None,
        (StateLocation::Sqlite(file), ExpectedState::Kubernetes) => Some(format!(
            "[monitor] state is the SQLite file {}, but the deployment expects state=kubernetes (the ledger in ConfigMaps, shared by its replicas): set [monitor] state = \"kubernetes\"",
            file.display()
        )),
        (StateLocation::Kubernetes, ExpectedState::SqliteIn(dir)) => Some(format!(
            "[monitor] state = \"kubernetes\", but the deployment expects a SQLite ledger in {} (and grants no ConfigMaps): remove [monitor] state or make it a file name (or expect state=kubernetes)",
            dir.display()
        )),
        (StateLocation::Sqlite(file), ExpectedState::SqliteIn(dir)) => {
            let inside = file.starts_with(dir) && !file.components().any(|c| c == Component::ParentDir);
            (!inside).then(|| {
                format!(
                    "[monitor] state = \"{}\" is outside the writable data directory {}: remove [monitor] state or make it a relative path (it resolves against ${})",
                    file.display(),
                    dir.display(),
                    crate::config::STATE_DIR_ENV
                )
            })
        }
    }
}

fn namespaces(config: &Config, which: impl Fn(&super::Permission) -> bool) -> BTreeSet<String> {
    required_permissions(config).into_iter().filter(|p| which(p)).filter_map(|p| p.namespace).collect()
}

fn listed(namespaces: &BTreeSet<String>) -> String {
    if namespaces.is_empty() {
        return "none".into();
    }
    namespaces.iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let text = format!("{text}\n[[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n");
        Config::parse_in(Path::new("/etc/bm/config.toml"), &text, crate::config::Secrets::Skip, Some("/data".into()))
            .unwrap()
    }

    fn expect(items: &[&str]) -> Vec<Expectation> {
        items.iter().map(|i| i.parse().unwrap()).collect()
    }

    #[test]
    fn expectations_parse_and_refuse_what_they_cannot_mean() {
        assert_eq!(expect(&["listen-port=9464"]), [Expectation::ListenPort(9464)]);
        assert_eq!(expect(&["deploy-namespaces="]), [Expectation::DeployNamespaces(BTreeSet::new())]);
        assert_eq!(
            expect(&["deploy-namespaces=shop,jobs"]),
            [Expectation::DeployNamespaces(["jobs".to_string(), "shop".to_string()].into())]
        );
        assert_eq!(expect(&["state=/data"]), [Expectation::State(ExpectedState::SqliteIn("/data".into()))]);
        assert_eq!(expect(&["pools="]), [Expectation::Pools(BTreeSet::new())]);
        assert_eq!(expect(&["pools=win,arm"]), [Expectation::Pools(["arm".to_string(), "win".to_string()].into())]);
        for (bad, why) in [
            ("publish", "not KEY=VALUE"),
            ("publish=yes", "publish is true or false"),
            ("listen-port=0", "1-65535"),
            ("state=data", "absolute directory"),
            ("runner=nomad", "one of none, exec, kubernetes, kpack"),
            ("namespace=Shop", "not a namespace name"),
            ("pools=arm,Win", "\"Win\" is not a pool name"),
            ("colour=blue", "unknown key colour"),
        ] {
            let error = bad.parse::<Expectation>().unwrap_err().to_string();
            assert!(error.contains(why), "{bad}: {error}");
        }
    }

    #[test]
    fn a_config_that_fits_meets_every_expectation() {
        let fits = config(
            "[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n\
             [kubernetes]\nnamespace = \"monitoring\"\npublish = true\nprune = true\nleader_election = true\n\
             [runner]\ntype = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"builds\"\n",
        );
        let all = expect(&[
            "listen-port=9464",
            "namespace=monitoring",
            "in-cluster=true",
            "publish=true",
            "prune=true",
            "leader-election=true",
            "state=kubernetes",
            "runner=kubernetes",
            "runner-namespace=builds",
            "deploy-namespaces=",
            "pools=",
        ]);
        assert_eq!(unmet(&fits, &all), Vec::<String>::new());
        // A SQLite ledger given relative (or not at all) lands in the state directory.
        let sqlite = config("server = { listen = \"[::]:9464\" }");
        assert_eq!(
            unmet(&sqlite, &expect(&["state=/data", "listen-port=9464", "runner-namespace=x"])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_disagreement_names_the_config_key_to_change() {
        let cases = [
            (
                "",
                "listen-port=9464",
                "no [server] table: the deployment's probes, Service and metrics need [server] listen = \"0.0.0.0:9464\"",
            ),
            (
                "[server]\nlisten = \"127.0.0.1:9464\"",
                "listen-port=9464",
                "only accepts connections from inside the pod; use \"0.0.0.0:9464\"",
            ),
            ("[server]\nlisten = \"10.1.2.3:9464\"", "listen-port=9464", "is one address"),
            (
                "[server]\nlisten = \"0.0.0.0:8080\"",
                "listen-port=9464",
                "is port 8080, but the deployment expects listen-port=9464",
            ),
            ("[kubernetes]\nnamespace = \"x\"", "namespace=monitoring", "leave [kubernetes] namespace unset"),
            ("[kubernetes]\nkubeconfig = \"/k\"", "in-cluster=true", "leave [kubernetes] kubeconfig and context unset"),
            (
                "[kubernetes]\npublish = true",
                "publish=false",
                "[kubernetes] publish is true, but the deployment expects publish=false",
            ),
            ("[kubernetes]\npublish = false\nprune = true", "prune=true", "[kubernetes] prune is false"),
            ("[kubernetes]\nleader_election = true", "leader-election=false", "set leader_election = false"),
            ("", "state=kubernetes", "set [monitor] state = \"kubernetes\""),
            ("[monitor]\nstate = \"kubernetes\"", "state=/data", "expects a SQLite ledger in /data"),
            (
                "[monitor]\nstate = \"/etc/x.db\"",
                "state=/data",
                "\"/etc/x.db\" is outside the writable data directory /data",
            ),
            ("[monitor]\nstate = \"../x.db\"", "state=/data", "outside the writable data directory"),
            (
                "[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]",
                "runner=none",
                "[runner] type = \"exec\", but the deployment expects runner=none",
            ),
            (
                "[runner]\ntype = \"kpack\"\n[runner.kubernetes]\nnamespace = \"b\"",
                "runner-namespace=builds",
                "[runner.kubernetes] namespace is \"b\"",
            ),
            (
                "[[images]]\nname = \"web\"\nbuilder = \"b\"\nimage = \"registry.example.com/web:1\"\ndeploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"web\" }]",
                "deploy-namespaces=jobs",
                "in namespaces \"shop\", but the deployment grants deploys in \"jobs\"",
            ),
        ];
        for (text, expectation, message) in cases {
            let problems = unmet(&config(text), &expect(&[expectation]));
            assert!(problems.len() == 1 && problems[0].contains(message), "{text} / {expectation}: {problems:?}");
        }
    }

    /// Pools whose kubeconfigs `arm` and `win` name, and one elsewhere (mounted by other means),
    /// which the expectation leaves alone.
    fn pooled(arm: &str, win: &str) -> Config {
        config(&format!(
            "[runner]\ntype = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"builds\"\n\
             [[runner.pools]]\nname = \"arm\"\nplatforms = [\"linux/arm64\"]\nkubeconfig = \"{arm}\"\n\
             [[runner.pools]]\nname = \"win\"\ntype = \"kpack\"\nplatforms = [\"windows/amd64\"]\nkubeconfig = \"{win}\"\ncontext = \"win\"\n\
             [[runner.pools]]\nname = \"site\"\nkubeconfig = \"/var/run/site/kubeconfig\"\n"
        ))
    }

    #[test]
    fn the_pools_kubeconfigs_are_exactly_the_mounted_ones() {
        let fits = pooled("/etc/builder-monitor/pools/arm/kubeconfig", "/etc/builder-monitor/pools/windows/kubeconfig");
        assert_eq!(
            unmet(&fits, &expect(&["pools=arm,windows"])),
            Vec::<String>::new(),
            "any pool may read any mounted file"
        );
        // Two pools of one cluster share its kubeconfig; the default pool may have one too.
        let shared = config(
            "[runner]\ntype = \"kubernetes\"\n[runner.kubernetes]\nkubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\"\n\
             [[runner.pools]]\nname = \"arm2\"\nnamespace = \"b2\"\nkubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\"\n",
        );
        assert_eq!(unmet(&shared, &expect(&["pools=arm"])), Vec::<String>::new());
        assert_eq!(
            unmet(&shared, &expect(&["pools="])),
            [
                "pool \"default\": kubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\" is not mounted (the deployment mounts kubeconfigs for none): use one it mounts (or expect pools with \"arm\")",
                "pool \"arm2\": kubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\" is not mounted (the deployment mounts kubeconfigs for none): use one it mounts (or expect pools with \"arm\")",
            ]
        );
        // No pools at all, nothing mounted: met.
        assert_eq!(unmet(&config(""), &expect(&["pools="])), Vec::<String>::new());
        let problems = unmet(&fits, &expect(&["pools=arm,linux"]));
        assert_eq!(
            problems,
            [
                "pool \"win\": kubeconfig = \"/etc/builder-monitor/pools/windows/kubeconfig\" is not mounted (the deployment mounts kubeconfigs for \"arm\", \"linux\"): use one it mounts (or expect pools with \"windows\")",
                "the deployment mounts the kubeconfig /etc/builder-monitor/pools/linux/kubeconfig, but no pool reads it: set kubeconfig = \"/etc/builder-monitor/pools/linux/kubeconfig\" on the pool that builds in that cluster (or expect pools without \"linux\")",
            ]
        );
        for wrong in [
            "/etc/builder-monitor/pools/arm/config",
            "/etc/builder-monitor/pools/arm",
            "/etc/builder-monitor/pools/x/../arm/kubeconfig",
        ] {
            let problems =
                unmet(&pooled(wrong, "/etc/builder-monitor/pools/windows/kubeconfig"), &expect(&["pools=windows"]));
            assert_eq!(
                problems,
                [format!(
                    "pool \"arm\": kubeconfig = \"{wrong}\" is not where the deployment mounts a pool's kubeconfig: use \"/etc/builder-monitor/pools/NAME/kubeconfig\""
                )],
                "{wrong}"
            );
        }
    }
}
