//! A right taken from the running daemon (issue 62 item 5): under exactly the RBAC `builder-monitor
//! rbac` prints, one rule's verb is taken away while the daemon runs; what needs it waits for it —
//! named in `status` (text and JSON), `/readyz` and one log line — while the rest goes on; the
//! rule restored, the waiting work is done and the right clears, without a restart. Here: a
//! deploy (`patch` on Deployments) and a build Job (`create` on Jobs); the daemon's own state (the
//! ledger's ConfigMaps, the Lease, ClusterBuilder status) in `revoked_state`. [`Bound`] is their
//! shared setup.

use crate::support;

use std::path::{Path, PathBuf};

use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::exact_rbac::{apply, await_granted_in, token, write_kubeconfig};
use support::cnb::BuilderSpec;
use support::control_plane::{TestNamespace, control_plane};
use support::daemon::{Daemon, Output, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

pub const TOKEN_ENV: &str = "BM_REVOKED_TEST_TOKEN";
pub const TOKEN: &str = "revoked-right-test-token";
const STATE_DIR_ENV: &str = "BUILDER_MONITOR_STATE_DIR";
const REFUSED: &str = "the cluster refused a right the daemon needs";
pub const GRANTED: &str = "the right is granted again: what waited for it resumes";

pub async fn readyz(addr: &str) -> Value {
    support::http().get(format!("http://{addr}/readyz")).send().await.unwrap().json().await.unwrap()
}

/// A right as RBAC names it: `verb` on `resource` (a subresource after `/`) of `group`, in
/// `namespace` or cluster-wide.
#[derive(Clone, Copy)]
pub struct Right<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
}

impl Right<'_> {
    /// As the daemon names it (`rights::MissingRight`'s display).
    pub fn shown(&self) -> String {
        let resource = match self.resource.split_once('/') {
            _ if self.group.is_empty() => self.resource.to_string(),
            Some((r, sub)) => format!("{r}.{}/{sub}", self.group),
            None => format!("{}.{}", self.resource, self.group),
        };
        match self.namespace {
            Some(ns) => format!("{} {resource} in namespace \"{ns}\"", self.verb),
            None => format!("{} {resource} cluster-wide", self.verb),
        }
    }
}

/// The printed RBAC with `right`'s verb taken from every rule naming its resource (that resource
/// split off into a rule of its own first, so no other resource loses the verb).
pub fn without(printed: &[Value], right: Right<'_>) -> Vec<Value> {
    let mut revoked = printed.to_vec();
    for object in revoked.iter_mut().filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole") {
        let Some(rules) = object["rules"].as_array_mut() else { continue };
        let mut kept = Vec::new();
        for rule in rules.drain(..) {
            let names = |r: &Value| r.as_str() == Some(right.resource);
            let resources = rule["resources"].as_array().cloned().unwrap_or_default();
            if !resources.iter().any(names) || rule["apiGroups"][0] != right.group {
                kept.push(rule);
                continue;
            }
            let others: Vec<Value> = resources.iter().filter(|r| !names(r)).cloned().collect();
            if !others.is_empty() {
                let mut rest = rule.clone();
                rest["resources"] = Value::Array(others);
                kept.push(rest);
            }
            let verbs: Vec<Value> =
                rule["verbs"].as_array().unwrap().iter().filter(|v| v.as_str() != Some(right.verb)).cloned().collect();
            if !verbs.is_empty() {
                let mut alone = rule.clone();
                alone["resources"] = json!([right.resource]);
                alone["verbs"] = Value::Array(verbs);
                kept.push(alone);
            }
        }
        *rules = kept;
    }
    revoked
}

/// Waits until the server's authorizer gives ServiceAccount `account` of `account_namespace` the
/// answer `allowed` for `right` (SubjectAccessReview, by the admin): RBAC objects just applied take
/// effect once its informers have seen them.
pub async fn await_answer(
    client: &kube::Client,
    account_namespace: &str,
    account: &str,
    right: Right<'_>,
    allowed: bool,
) {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let (resource, subresource) = right.resource.split_once('/').unwrap_or((right.resource, ""));
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{account_namespace}:{account}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{account_namespace}"), "system:authenticated"],
        "resourceAttributes": {"namespace": right.namespace.unwrap_or_default(), "verb": right.verb,
            "group": right.group, "resource": resource, "subresource": subresource},
    }}))
    .unwrap();
    let answered = async {
        loop {
            let answer = reviews.create(&PostParams::default(), &review).await.expect("SubjectAccessReview");
            if answer.status.is_some_and(|s| s.allowed) == allowed {
                return;
            }
            // The authorizer's informers offer no event to wait on; ask again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(support::PATIENCE, answered)
        .await
        .unwrap_or_else(|_| panic!("{} never became {}", right.shown(), if allowed { "granted" } else { "refused" }));
}

/// A config run under exactly the RBAC `builder-monitor rbac` prints for it: ServiceAccount
/// `<namespace>-daemon` bound to it, its token (TokenRequest) in the kubeconfig at
/// `account.kubeconfig` of the workspace, which the config names. The daemon and the commands run
/// with the API token in `TOKEN_ENV` and the workspace as their state directory.
pub struct Bound {
    pub client: kube::Client,
    pub namespace: String,
    pub account: String,
    pub printed: Vec<Value>,
    pub config: PathBuf,
    dir: PathBuf,
}

impl Bound {
    pub async fn new(ns: &TestNamespace, ws: &Workspace, config: &Path) -> Self {
        let account = format!("{}-daemon", ns.name);
        let mut bound = Bound {
            client: ns.client.clone(),
            namespace: ns.name.clone(),
            account,
            printed: Vec::new(),
            config: config.to_path_buf(),
            dir: ws.path(""),
        };
        let out = bound.cli(&["rbac", "--output", "json", "--service-account", &bound.account]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        bound.printed = serde_json::from_str(&out.stdout).unwrap();
        apply(&bound.client, &bound.printed).await;
        // In force once the authorizer has seen it: the first rule of the first Role answers.
        let role = bound.printed.iter().find(|o| o["kind"] == "Role").expect("a Role");
        let rule = &role["rules"][0];
        let text = |v: &Value| v.as_str().unwrap().to_string();
        let (verb, group, resource) =
            (text(&rule["verbs"][0]), text(&rule["apiGroups"][0]), text(&rule["resources"][0]));
        let namespace = text(&role["metadata"]["namespace"]);
        await_granted_in(&bound.client, &ns.name, &bound.account, &namespace, &verb, &group, &resource).await;
        let token = token(&bound.client, &ns.name, &bound.account).await;
        write_kubeconfig(&ws.path("account.kubeconfig"), &ns.kubeconfig, &token, None);
        bound
    }

    fn env(&self) -> [(&str, &str); 3] {
        [(TOKEN_ENV, TOKEN), ("BUILDER_MONITOR_API_TOKEN", TOKEN), (STATE_DIR_ENV, self.dir.to_str().unwrap())]
    }

    /// Runs a command of the binary with this config.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", self.config.to_str().unwrap()]);
        run_with_env(&all, &self.env(), &self.dir)
    }

    pub fn start(&self) -> Daemon {
        Daemon::start_with_env(&self.config, &self.env())
    }

    /// Takes `right`'s verb away, and waits until the server refuses it.
    pub async fn revoke(&self, right: Right<'_>) {
        apply(&self.client, &without(&self.printed, right)).await;
        await_answer(&self.client, &self.namespace, &self.account, right, false).await;
    }

    /// Asks the daemon at `addr` to check `watch` now (its API).
    pub async fn check_now(&self, addr: &str, watch: &str) {
        let answer = support::http()
            .post(format!("http://{addr}/api/v1/builders/{watch}/check"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
    }

    /// Asserts the daemon reports `right` missing for `what`: a warning naming it in its log,
    /// `/readyz` degraded listing it, `status` (JSON and text) listing it.
    pub async fn reported_missing(&self, daemon: &mut Daemon, addr: &str, right: Right<'_>, what: &str) {
        let shown = right.shown();
        let refused = daemon.wait_for("the refusal", |l| {
            l["right"] == shown.as_str() && l["message"].as_str().is_some_and(|m| m.starts_with(REFUSED))
        });
        assert_eq!(refused["level"], "WARN", "{refused}");
        let listed = format!("{shown} (for {what})");
        let ready = readyz(addr).await;
        assert_eq!(ready["degraded"], true, "{ready}");
        assert!(ready["missing_rights"].as_array().unwrap().contains(&json!(listed)), "{listed}: {ready}");
        let out = self.cli(&["status", "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let status: Value = serde_json::from_str(&out.stdout).unwrap();
        assert!(status["missing_rights"].as_array().unwrap().contains(&json!(listed)), "{listed}: {status}");
        let text = self.cli(&["status"]).stdout;
        assert!(text.contains(&format!("missing right: {listed}")), "{text}");
    }

    /// Gives the printed rules back.
    pub async fn give_back(&self) {
        apply(&self.client, &self.printed).await;
    }

    /// Gives the printed rules back and waits until the daemon says `right` is granted again.
    pub async fn restore(&self, daemon: &mut Daemon, right: Right<'_>) {
        self.give_back().await;
        let shown = right.shown();
        daemon.wait_for("the right back", |l| l["right"] == shown.as_str() && l["message"] == GRANTED);
    }
}

/// `/readyz` at `addr` lists nothing missing.
pub async fn cleared(addr: &str) {
    let ready = readyz(addr).await;
    assert_eq!(ready["missing_rights"], json!([]), "{ready}");
    assert_eq!(ready["degraded"], false, "{ready}");
}

/// Stops the daemon; its log has one warning for `right`, however often it was refused or asked
/// again.
pub fn one_line_for(daemon: Daemon, right: Right<'_>) {
    let (status, log) = daemon.terminate();
    assert!(status.success(), "{}", log.join("\n"));
    let shown = format!("\"right\":\"{}\"", right.shown().replace('"', "\\\""));
    let refusals = log.iter().filter(|l| l.contains(REFUSED) && l.contains(&shown)).count();
    assert_eq!(refusals, 1, "one line when it went missing, however often it was asked again");
}

/// A registry with builder `demo/builder` (run image `run:1`) and app `apps/web`, and a test
/// namespace of the control plane.
async fn registry_and_namespace(prefix: &str) -> (TestRegistry, Pusher, TestNamespace) {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = registry.host.clone();
    pusher
        .push_image(
            "demo/builder",
            Some("latest"),
            &BuilderSpec::jammy(&format!("{host}/demo/run:1")).image(),
            Format::Oci,
        )
        .await;
    let ns = control_plane().namespace(prefix).await;
    (registry, pusher, ns)
}

async fn push_builder(pusher: &Pusher, host: &str, repo: &str, run: &str) {
    pusher
        .push_image(repo, Some("latest"), &BuilderSpec::jammy(&format!("{host}/demo/{run}")).image(), Format::Oci)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_waits_for_a_removed_right_and_resumes_when_it_is_restored() {
    let (registry, pusher, ns) = registry_and_namespace("revoked").await;
    let host = registry.host.clone();
    let v1 = pusher
        .push_image("apps/web", Some("latest"), &BuilderSpec::jammy("example.test/a:1").image(), Format::Oci)
        .await;
    ns.create(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": format!("{host}/apps/web@{}", v1.digest)}]}}}}))
        .await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\n\
         deploy = [{{ kind = \"Deployment\", namespace = \"{ns}\", name = \"web\" }}]\n\n\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{ns}\"\n",
        ws.path("account.kubeconfig").display(),
        ns = ns.name,
    ));
    let bound = Bound::new(&ns, &ws, &config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    daemon.wait_for_event("builder.pinned");

    let right = Right { verb: "patch", group: "apps", resource: "deployments", namespace: Some(&ns.name) };
    bound.revoke(right).await;
    let v2 = pusher
        .push_image("apps/web", Some("latest"), &BuilderSpec::jammy("example.test/a:2").image(), Format::Oci)
        .await;
    // A deploy by hand, through the daemon's API (what `builder-monitor deploy web` sends).
    let answer = support::http()
        .post(format!("http://{addr}/api/v1/images/web/deploy"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
    bound.reported_missing(&mut daemon, &addr, right, "image \"web\"'s deploy").await;
    // The deploy's own entry says what it waits for, too.
    let status: Value = serde_json::from_str(&bound.cli(&["status", "--json"]).stdout).unwrap();
    let entry = status["deploys"].as_array().unwrap().iter().find(|d| d["image"] == "web").unwrap().clone();
    assert_eq!(entry["detail"], format!("waiting for the right to {}", right.shown()), "{entry}");

    // The builder watch goes on: a move is pinned while the deploy waits.
    push_builder(&pusher, &host, "demo/builder", "run:2").await;
    daemon.wait_for_event("builder.changed");

    bound.restore(&mut daemon, right).await;
    daemon.wait_for_event("deploy.succeeded");
    let running = ns.get("apps/v1", "Deployment", "web").await.unwrap();
    assert_eq!(running["spec"]["template"]["spec"]["containers"][0]["image"], format!("{host}/apps/web@{}", v2.digest));
    cleared(&addr).await;
    one_line_for(daemon, right);
}

/// `create` on Jobs taken away: a rebuild's Job waits for it (the right named for the image's
/// Job), while another builder's watch goes on pinning its moves; given back, the Job is created
/// and the build succeeds, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_job_waits_for_a_removed_right_and_is_created_when_it_is_restored() {
    let (registry, pusher, ns) = registry_and_namespace("revokedjob").await;
    let host = registry.host.clone();
    push_builder(&pusher, &host, "demo/other", "run:1").await;
    pusher.push_image("apps/good", Some("latest"), &Image::new("amd64").salt("good"), Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n\
         [[builders]]\nname = \"other\"\nimage = \"{host}/demo/other:latest\"\nwatch_run_image = false\n\n\
         [[images]]\nname = \"good\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/good:latest\"\npolicy = \"rebuild\"\n\
         source = {{ git = \"https://example.com/good.git\", revision = \"main\" }}\n\n\
         [runner]\ntype = \"kubernetes\"\nmax_attempts = 1\n\n\
         [runner.kubernetes]\nnamespace = \"{ns}\"\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{ns}\"\n",
        ws.path("account.kubeconfig").display(),
        ns = ns.name,
    ));
    let bound = Bound::new(&ns, &ws, &config).await;
    let mut daemon = bound.start();
    let addr = daemon.server_addr();
    daemon.wait_for_event("builder.pinned");
    daemon.wait_for_event("builder.pinned");

    let right = Right { verb: "create", group: "batch", resource: "jobs", namespace: Some(&ns.name) };
    bound.revoke(right).await;
    push_builder(&pusher, &host, "demo/builder", "run:2").await;
    bound.reported_missing(&mut daemon, &addr, right, "image \"good\"'s Job").await;

    // Another watch goes on: its move is pinned while the Job waits.
    push_builder(&pusher, &host, "demo/other", "run:2").await;
    let changed = daemon.wait_for_event("builder.changed");
    assert_eq!(changed["builder"]["name"], "other", "{changed}");

    bound.restore(&mut daemon, right).await;
    let built = daemon.wait_for_event("build.succeeded");
    assert_eq!(built["action"]["image"], "good", "{built}");
    cleared(&addr).await;
    one_line_for(daemon, right);
}
