//! What a deployment expects of its config: `builder-monitor check --expect KEY=VALUE[@NAME]`.
//!
//! The Helm chart shapes the pod (its port, replicas, data volume) and its RBAC from values, not by
//! reading the TOML (Helm has no TOML parser). Its init container runs `check` with one
//! expectation per value it took, so a config that disagrees stops the pod with what to change
//! rather than starting a daemon that lacks a permission or listens where no probe looks. Each
//! expectation may name the setting it came from (`publish=true@features.publish`): an operator
//! edits Helm values, not `--expect` flags, so a disagreement then offers that setting as the other
//! fix. Without a name the CLI speaks of its own flags, for deployments that are not the chart.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use super::{DEPLOYS, required_permissions};
use crate::config::{Config, RunnerKind, StateLocation};

/// One `--expect KEY=VALUE[@NAME]`: what the deployment expects, and where that came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub expected: Expected,
    /// The setting the deployment took the value from (a Helm value such as `features.publish`),
    /// named in each disagreement as the deployment's side of the fix.
    pub from: Option<String>,
}

/// What an `--expect` says, by its KEY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
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

impl From<Expected> for Expectation {
    fn from(expected: Expected) -> Self {
        Expectation { expected, from: None }
    }
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

/// A setting's name after `@`: a Helm value's path (`features.runner.type`, `pools`) or a flag
/// (`--namespace`); no `=`, `/` or space, so it cannot be part of a value mistaken for a name.
fn is_setting_name(name: &str) -> bool {
    let name = name.strip_prefix("--").unwrap_or(name);
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-[]".contains(c))
}

impl FromStr for Expectation {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let (pair, from) = match text.rsplit_once('@') {
            Some((pair, name)) if is_setting_name(name) => (pair, Some(name.to_string())),
            Some(_) => {
                return Err(ParseError(format!(
                    "\"{text}\": after @ comes the name of the setting the value came from, e.g. publish=true@features.publish"
                )));
            }
            None => (text, None),
        };
        Ok(Expectation { expected: parse_pair(text, pair)?, from })
    }
}

/// KEY=VALUE of `text` (the whole argument, for errors).
fn parse_pair(text: &str, pair: &str) -> Result<Expected, ParseError> {
    let fail = |why: String| Err(ParseError(format!("\"{text}\": {why}")));
    let Some((key, value)) = pair.split_once('=') else {
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
            Ok(port) if port > 0 => Expected::ListenPort(port),
            _ => return fail("listen-port is a port number, 1-65535".into()),
        },
        "namespace" => Expected::Namespace(name(value)?),
        "in-cluster" if value == "true" => Expected::InCluster,
        "in-cluster" => return fail("in-cluster can only be expected true".into()),
        "publish" => Expected::Publish(boolean(value)?),
        "prune" => Expected::Prune(boolean(value)?),
        "leader-election" => Expected::LeaderElection(boolean(value)?),
        "state" if value == "kubernetes" => Expected::State(ExpectedState::Kubernetes),
        "state" if Path::new(value).is_absolute() => Expected::State(ExpectedState::SqliteIn(value.into())),
        "state" => return fail("state is \"kubernetes\" or the absolute directory of the SQLite ledger".into()),
        "runner" => match RunnerKind::ALL.into_iter().find(|k| k.as_str() == value) {
            Some(kind) => Expected::Runner(kind),
            None => {
                let types: Vec<&str> = RunnerKind::ALL.iter().map(|k| k.as_str()).collect();
                return fail(format!("runner is one of {}", types.join(", ")));
            }
        },
        "runner-namespace" => Expected::RunnerNamespace(name(value)?),
        "deploy-namespaces" => {
            Expected::DeployNamespaces(value.split(',').filter(|n| !n.is_empty()).map(name).collect::<Result<_, _>>()?)
        }
        "pools" => Expected::Pools(
            value.split(',').filter(|n| !n.is_empty()).map(|n| label(n, "pool")).collect::<Result<_, _>>()?,
        ),
        _ => return fail(format!("unknown key {key} (keys: {KEYS})")),
    })
}

/// What in `config` is not as `expected`, one sentence each, naming the config's side of the fix
/// and the deployment's: the `--expect` to pass instead, or the setting it came from.
pub fn unmet(config: &Config, expected: &[Expectation]) -> Vec<String> {
    expected
        .iter()
        .flat_map(|e| {
            let other = Other(e.from.as_deref());
            match &e.expected {
                Expected::Pools(mounted) => pool_problems(config, mounted, other),
                what => problem(config, what, other).into_iter().collect(),
            }
        })
        .collect()
}

/// The deployment's side of a fix, as said after the config's: the other `--expect` (when the
/// expectation names no setting), or what to do with the setting it came from.
#[derive(Clone, Copy)]
struct Other<'a>(Option<&'a str>);

impl Other<'_> {
    /// " (or expect CLI)", or " (or SETTING(name))".
    fn or(self, cli: &str, setting: impl FnOnce(&str) -> String) -> String {
        match self.0 {
            None => format!(" (or expect {cli})"),
            Some(name) => format!(" (or {})", setting(name)),
        }
    }

    /// Only with a named setting: " (SETTING(name))", for a fix the config alone can make or one
    /// that has no `--expect` of its own.
    fn note(self, setting: impl FnOnce(&str) -> String) -> String {
        self.0.map(|name| format!(" ({})", setting(name))).unwrap_or_default()
    }
}

/// `[server] listen` against the deployment's `listen-port`: every interface, that port.
fn listen_problem(config: &Config, port: u16, other: Other) -> Option<String> {
    let the_port = |name: &str| format!("the port is {name}");
    let wanted = format!("\"0.0.0.0:{port}\"");
    let Some(server) = &config.server else {
        return Some(format!(
            "no [server] table: the deployment's probes, Service and metrics need [server] listen = {wanted}{}",
            other.note(the_port)
        ));
    };
    let listen = server.listen;
    if listen.ip().is_loopback() {
        Some(format!(
            "[server] listen = \"{listen}\" only accepts connections from inside the pod; use {wanted}{}",
            other.note(the_port)
        ))
    } else if !listen.ip().is_unspecified() {
        Some(format!(
            "[server] listen = \"{listen}\" is one address, not the pod's every interface; use {wanted}{}",
            other.note(the_port)
        ))
    } else if listen.port() != port {
        let actual = listen.port();
        Some(format!(
            "[server] listen = \"{listen}\" is port {actual}, but the deployment expects listen-port={port}: use {wanted}{}",
            other.or(&format!("port {actual}"), |name| format!("set {name}: {actual}"))
        ))
    } else {
        None
    }
}

fn problem(config: &Config, expected: &Expected, other: Other) -> Option<String> {
    let kube = &config.kubernetes;
    let flag = |key: &str, actual: bool, wanted: bool| {
        (actual != wanted).then(|| {
            let toml = key.replace('-', "_");
            format!(
                "[kubernetes] {toml} is {actual}, but the deployment expects {key}={wanted}: set {toml} = {wanted}{}",
                other.or(&actual.to_string(), |name| format!("set {name}: {actual}"))
            )
        })
    };
    match expected {
        Expected::ListenPort(port) => listen_problem(config, *port, other),
        Expected::Namespace(namespace) => (&kube.namespace != namespace).then(|| {
            format!(
                "[kubernetes] namespace = \"{}\", but the daemon runs in namespace \"{namespace}\", where its Role is: leave [kubernetes] namespace unset (it defaults to $POD_NAMESPACE){}",
                kube.namespace,
                other.note(|name| format!("or install the release with {name} {}", kube.namespace))
            )
        }),
        Expected::InCluster => (kube.kubeconfig.is_some() || kube.context.is_some()).then(|| {
            format!(
                "[kubernetes] kubeconfig or context is set, but in the pod the daemon uses its service account: leave [kubernetes] kubeconfig and context unset{}",
                other.note(|name| format!("the account is {name}'s"))
            )
        }),
        Expected::Publish(wanted) => flag("publish", kube.publish, *wanted),
        Expected::Prune(wanted) => flag("prune", kube.publish && kube.prune, *wanted),
        Expected::LeaderElection(wanted) => flag("leader-election", kube.leader_election, *wanted),
        Expected::State(wanted) => state_problem(&config.monitor.state, wanted, other),
        Expected::Runner(kind) => (config.runner.kind != *kind).then(|| {
            let actual = config.runner.kind.as_str();
            format!(
                "[runner] type = \"{actual}\", but the deployment expects runner={}: set type = \"{}\"{}",
                kind.as_str(),
                kind.as_str(),
                other.or(actual, |name| format!("set {name}: {actual}"))
            )
        }),
        Expected::RunnerNamespace(namespace) => {
            let used = namespaces(config, |p| p.for_runner());
            (!used.is_empty() && used.iter().any(|n| n != namespace)).then(|| {
                let setting = |name: &str| match used.first().filter(|_| used.len() == 1) {
                    Some(one) => format!("set {name}: {one}"),
                    None => format!("set {name} to the one namespace the runner uses"),
                };
                format!(
                    "[runner.kubernetes] namespace is {}, but the deployment grants the runner's permissions in \"{namespace}\": set namespace = \"{namespace}\"{}",
                    listed(&used),
                    other.or("that namespace", setting)
                )
            })
        }
        Expected::DeployNamespaces(granted) => {
            let used = namespaces(config, |p| p.needed_for == DEPLOYS);
            (&used != granted).then(|| {
                let fix = match other.0 {
                    // A YAML flow list, as it would be written in the values file.
                    Some(name) => {
                        let items: Vec<String> = used.iter().map(|n| format!("\"{n}\"")).collect();
                        format!("set {name}: [{}]", items.join(", "))
                    }
                    None => format!("grant exactly {}", listed(&used)),
                };
                format!(
                    "the [[images]] deploy workloads are in namespaces {}, but the deployment grants deploys in {}: {fix}",
                    listed(&used),
                    listed(granted),
                )
            })
        }
        // Several at once, each its own line: `pool_problems`.
        Expected::Pools(_) => None,
    }
}

/// The pools' kubeconfigs in `POOL_KUBECONFIGS` against the ones mounted there: each pool's file
/// mounted, each mounted file some pool's. Kubeconfigs elsewhere (mounted by other means) are not
/// this expectation's business.
fn pool_problems(config: &Config, mounted: &BTreeSet<String>, other: Other) -> Vec<String> {
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
                "pool \"{}\": kubeconfig = \"{}\" is not mounted (the deployment mounts kubeconfigs for {}): use one it mounts{}",
                pool.name,
                path.display(),
                listed(mounted),
                other.or(&format!("pools with \"{name}\""), |setting| format!(
                    "add an entry named \"{name}\" to {setting}, with the Secret holding that kubeconfig"
                ))
            )),
            None => out.push(format!(
                "pool \"{}\": kubeconfig = \"{}\" is not where the deployment mounts a pool's kubeconfig: use \"{}\"{}",
                pool.name,
                path.display(),
                file("NAME"),
                other.note(|setting| format!("NAME being an entry of {setting}"))
            )),
        }
    }
    for name in mounted.difference(&used) {
        out.push(format!(
            "the deployment mounts the kubeconfig {}, but no pool reads it: set kubeconfig = \"{}\" on the pool that builds in that cluster{}",
            file(name),
            file(name),
            other.or(&format!("pools without \"{name}\""), |setting| format!(
                "remove the entry named \"{name}\" from {setting}"
            ))
        ));
    }
    out
}

fn state_problem(state: &StateLocation, wanted: &ExpectedState, other: Other) -> Option<String> {
    match (state, wanted) {
        (StateLocation::Kubernetes, ExpectedState::Kubernetes) => None,
        (StateLocation::Sqlite(file), ExpectedState::Kubernetes) => Some(format!(
            "[monitor] state is the SQLite file {}, but the deployment expects state=kubernetes (the ledger in ConfigMaps, shared by its replicas): set [monitor] state = \"kubernetes\"{}",
            file.display(),
            other.note(|name| format!("or set {name}: false, for one replica with the SQLite ledger"))
        )),
        (StateLocation::Kubernetes, ExpectedState::SqliteIn(dir)) => Some(format!(
            "[monitor] state = \"kubernetes\", but the deployment expects a SQLite ledger in {} (and grants no ConfigMaps): remove [monitor] state or make it a file name{}",
            dir.display(),
            other.or("state=kubernetes", |name| format!("set {name}: true"))
        )),
        (StateLocation::Sqlite(file), ExpectedState::SqliteIn(dir)) => {
            let inside = file.starts_with(dir) && !file.components().any(|c| c == Component::ParentDir);
            (!inside).then(|| {
                format!(
                    "[monitor] state = \"{}\" is outside the writable data directory {}: remove [monitor] state or make it a relative path (it resolves against ${}){}",
                    file.display(),
                    dir.display(),
                    crate::config::STATE_DIR_ENV,
                    other.note(|name| format!(
                        "or keep the ledger in the cluster: [monitor] state = \"kubernetes\" and {name}: true"
                    ))
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

    /// What `items` expect, without where it came from.
    fn expected(items: &[&str]) -> Vec<Expected> {
        expect(items).into_iter().map(|e| e.expected).collect()
    }

    #[test]
    fn expectations_parse_and_refuse_what_they_cannot_mean() {
        assert_eq!(expected(&["listen-port=9464"]), [Expected::ListenPort(9464)]);
        assert_eq!(expected(&["deploy-namespaces="]), [Expected::DeployNamespaces(BTreeSet::new())]);
        assert_eq!(
            expected(&["deploy-namespaces=shop,jobs"]),
            [Expected::DeployNamespaces(["jobs".to_string(), "shop".to_string()].into())]
        );
        assert_eq!(expected(&["state=/data"]), [Expected::State(ExpectedState::SqliteIn("/data".into()))]);
        assert_eq!(expected(&["pools="]), [Expected::Pools(BTreeSet::new())]);
        assert_eq!(expected(&["pools=win,arm"]), [Expected::Pools(["arm".to_string(), "win".to_string()].into())]);
        for (bad, why) in [
            ("publish", "not KEY=VALUE"),
            ("publish=yes", "publish is true or false"),
            ("listen-port=0", "1-65535"),
            ("state=data", "absolute directory"),
            ("runner=nomad", "one of none, exec, kubernetes, kpack"),
            ("namespace=Shop", "not a namespace name"),
            ("pools=arm,Win", "\"Win\" is not a pool name"),
            ("colour=blue", "unknown key colour"),
            ("publish=true@", "after @ comes the name of the setting"),
            ("publish=true@features publish", "after @ comes the name of the setting"),
            ("state=/data@x/y", "after @ comes the name of the setting"),
            ("publish=yes@features.publish", "publish is true or false"),
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

    #[test]
    fn an_expectation_may_name_the_setting_it_came_from() {
        assert_eq!(
            expect(&["publish=true@features.publish", "namespace=monitoring@--namespace", "pools=a@pools"]),
            [
                Expectation { expected: Expected::Publish(true), from: Some("features.publish".into()) },
                Expectation { expected: Expected::Namespace("monitoring".into()), from: Some("--namespace".into()) },
                Expectation { expected: Expected::Pools(["a".to_string()].into()), from: Some("pools".into()) },
            ]
        );
        assert_eq!(expect(&["publish=true"]), [Expectation::from(Expected::Publish(true))]);
    }

    /// With the setting named (as the chart names its Helm values), every disagreement offers that
    /// setting as the deployment's side of the fix, never an `--expect` the operator does not write.
    #[test]
    fn each_disagreement_names_the_setting_the_expectation_came_from() {
        let deploy = "[[images]]\nname = \"web\"\nbuilder = \"b\"\nimage = \"registry.example.com/web:1\"\ndeploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"web\" }]";
        let cases = [
            (
                "",
                "listen-port=9464@features.port",
                "need [server] listen = \"0.0.0.0:9464\" (the port is features.port)",
            ),
            ("[server]\nlisten = \"127.0.0.1:9464\"", "listen-port=9464@features.port", "(the port is features.port)"),
            ("[server]\nlisten = \"10.1.2.3:9464\"", "listen-port=9464@features.port", "(the port is features.port)"),
            ("[server]\nlisten = \"0.0.0.0:8080\"", "listen-port=9464@features.port", "(or set features.port: 8080)"),
            (
                "[kubernetes]\nnamespace = \"x\"",
                "namespace=monitoring@--namespace",
                "(or install the release with --namespace x)",
            ),
            (
                "[kubernetes]\nkubeconfig = \"/k\"",
                "in-cluster=true@serviceAccount",
                "(the account is serviceAccount's)",
            ),
            (
                "[kubernetes]\npublish = true",
                "publish=false@features.publish",
                "set publish = false (or set features.publish: true)",
            ),
            (
                "[kubernetes]\npublish = true",
                "prune=true@features.prune",
                "set prune = true (or set features.prune: false)",
            ),
            (
                "[kubernetes]\nleader_election = true",
                "leader-election=false@features.leaderElection",
                "(or set features.leaderElection: true)",
            ),
            (
                "",
                "state=kubernetes@features.clusterState",
                "(or set features.clusterState: false, for one replica with the SQLite ledger)",
            ),
            (
                "[monitor]\nstate = \"kubernetes\"",
                "state=/data@features.clusterState",
                "(or set features.clusterState: true)",
            ),
            (
                "[monitor]\nstate = \"/etc/x.db\"",
                "state=/data@features.clusterState",
                "and features.clusterState: true)",
            ),
            (
                "[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]",
                "runner=none@features.runner.type",
                "set type = \"none\" (or set features.runner.type: exec)",
            ),
            (
                "[runner]\ntype = \"kpack\"\n[runner.kubernetes]\nnamespace = \"b\"",
                "runner-namespace=builds@features.runner.namespace",
                "(or set features.runner.namespace: b)",
            ),
            (
                deploy,
                "deploy-namespaces=jobs@deployNamespaces",
                "grants deploys in \"jobs\": set deployNamespaces: [\"shop\"]",
            ),
            ("", "deploy-namespaces=jobs@deployNamespaces", "set deployNamespaces: []"),
        ];
        for (text, expectation, message) in cases {
            let problems = unmet(&config(text), &expect(&[expectation]));
            assert!(problems.len() == 1 && problems[0].contains(message), "{text} / {expectation}: {problems:?}");
            assert!(!problems[0].contains("expect "), "no --expect to write: {problems:?}");
        }
        let fits = pooled("/etc/builder-monitor/pools/arm/kubeconfig", "/etc/builder-monitor/pools/windows/kubeconfig");
        assert_eq!(
            unmet(&fits, &expect(&["pools=arm,linux@pools"])),
            [
                "pool \"win\": kubeconfig = \"/etc/builder-monitor/pools/windows/kubeconfig\" is not mounted (the deployment mounts kubeconfigs for \"arm\", \"linux\"): use one it mounts (or add an entry named \"windows\" to pools, with the Secret holding that kubeconfig)",
                "the deployment mounts the kubeconfig /etc/builder-monitor/pools/linux/kubeconfig, but no pool reads it: set kubeconfig = \"/etc/builder-monitor/pools/linux/kubeconfig\" on the pool that builds in that cluster (or remove the entry named \"linux\" from pools)",
            ]
        );
        let elsewhere = pooled("/etc/builder-monitor/pools/arm", "/etc/builder-monitor/pools/windows/kubeconfig");
        let problems = unmet(&elsewhere, &expect(&["pools=windows@pools"]));
        assert!(problems.len() == 1 && problems[0].ends_with("(NAME being an entry of pools)"), "{problems:?}");
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
