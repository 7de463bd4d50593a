//! A real Kubernetes control plane for the tests: `scripts/control-plane` (etcd, kube-apiserver and
//! kube-controller-manager of Kubernetes v1.37.2, a stand-in node agent, the kpack and Kueue CRDs),
//! started once per test binary on first use and shared by its tests, each in a namespace of its
//! own ([`ControlPlane::namespace`]).
//!
//! It is stopped when the test binary ends, however it ends: it runs with its standard input a
//! pipe from this process and stops when that pipe closes (the kernel closes it when this process
//! exits, even by SIGKILL), then removes its state. It cannot start without Go; that is a test
//! failure naming the fix, in CI and locally alike, never a skip.
//!
//! What the node agent does with pods (bind, run, end Job pods with an exit code, fail image
//! pulls) and how a test asks it: `tests/kube-control-plane/README.md`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde_json::{Value, json};

/// The Pod Security label a namespace enforces its level by.
pub const ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// The running control plane of this test binary.
pub struct ControlPlane {
    kubeconfig: PathBuf,
    /// The pipes that keep it running: it stops when `stdin` closes.
    _process: Mutex<(Child, ChildStdin, ChildStdout)>,
}

static CONTROL_PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
static UNCACHED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// This test binary's control plane, started on first use (a cold build of the Go program
/// first, when `scripts/test` has not built it). Panics, saying why and what to do, when it
/// cannot start.
pub fn control_plane() -> &'static ControlPlane {
    match CONTROL_PLANE.get_or_init(|| start("", &[])) {
        Ok(control_plane) => control_plane,
        Err(why) => panic!("{why}"),
    }
}

/// The resources [`uncached_control_plane`] serves from etcd.
pub const UNCACHED_RESOURCES: &str = "configmaps";

/// A second control plane of this test binary, started on first use, whose apiserver serves
/// [`UNCACHED_RESOURCES`] without its watch cache (`CONTROL_PLANE_NO_WATCH_CACHE`): after
/// [`ControlPlane::compact`] a watch of them from an older resourceVersion gets 410 Gone, which
/// the watch cache of the shared one hides. For the tests that need that 410; the rest share
/// [`control_plane`].
pub fn uncached_control_plane() -> &'static ControlPlane {
    match UNCACHED.get_or_init(|| start("uncached", &[("CONTROL_PLANE_NO_WATCH_CACHE", UNCACHED_RESOURCES)])) {
        Ok(control_plane) => control_plane,
        Err(why) => panic!("{why}"),
    }
}

/// The name of a control plane's state folder (`PREFIX-PID`) and log (`PREFIX-PID.log`).
const PREFIX: &str = "builder-monitor-control-plane";

/// Starts `scripts/control-plane` with `env`; `suffix` tells its folder from the other's.
fn start(suffix: &str, env: &[(&str, &str)]) -> Result<ControlPlane, String> {
    remove_stale();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/control-plane");
    let name = match suffix {
        "" => format!("{PREFIX}-{}", std::process::id()),
        _ => format!("{PREFIX}-{}-{suffix}", std::process::id()),
    };
    let dir = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Beside the state, not in it: the state folder is removed at a clean stop, the log stays
    // for a failure to be read.
    let log_path = dir.with_extension("log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    eprintln!("starting the test control plane (scripts/control-plane, log {})", log_path.display());
    let mut child = Command::new(&script)
        .arg(&dir)
        .env("CONTROL_PLANE_STOP_ON_STDIN_EOF", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdin = child.stdin.take().expect("piped stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    let read = stdout.read_line(&mut first);
    if read.is_err() || first.trim().is_empty() {
        let status = child.wait().map(|s| s.to_string()).unwrap_or_else(|e| e.to_string());
        return Err(not_started(&log_path, &status));
    }
    let kubeconfig = PathBuf::from(first.trim());
    Ok(ControlPlane { kubeconfig, _process: Mutex::new((child, stdin, stdout.into_inner())) })
}

/// Removes the logs (and any state left) of the control planes of test processes that have ended:
/// the log outlives its run for a failure to be read, until the next run.
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PREFIX).and_then(|r| r.strip_prefix('-')) else { continue };
        let pid = rest.trim_end_matches(".log");
        let pid = pid.split('-').next().unwrap_or(pid);
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let path = entry.path();
            let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        }
    }
}

/// Why the control plane did not start, with the end of its log and what to do.
fn not_started(log_path: &Path, status: &str) -> String {
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
    let advice = if log.contains("Go is not installed") {
        "Install Go 1.26 or newer (the log above says how), then run the tests again."
    } else if std::env::var_os("CI").is_some() {
        "In CI the tests on the real control plane must run: fix the cause above (scripts/test builds it first)."
    } else {
        "See docs/testing.md (\"The real control plane\"); `scripts/control-plane DIR` shows the same by hand."
    };
    format!(
        "the test control plane (scripts/control-plane) did not start ({status}); the end of its log {}:\n{}\n{advice}",
        log_path.display(),
        tail.join("\n")
    )
}

/// A namespace of one test on the control plane.
pub struct TestNamespace {
    pub name: String,
    /// An admin client (its user is in `system:masters`).
    pub client: kube::Client,
    /// The admin kubeconfig, for the daemon binary.
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    /// The admin kubeconfig (bearer token, CA inline, namespace `default`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// An admin client, for the calling test's runtime.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).expect("kube client")
    }

    /// The admin client's config (`cluster_url` may be pointed elsewhere, e.g. at a relay: the
    /// serving certificate is for 127.0.0.1, any port).
    pub async fn config(&self) -> kube::Config {
        builder_monitor::install_crypto_provider();
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("the admin kubeconfig");
        let options = kube::config::KubeConfigOptions::default();
        kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.expect("kube config")
    }

    /// Compacts etcd's history before its current revision (the control plane's hook, `POST
    /// $(cat DIR/hooks-url)/compact`); returns that revision.
    pub async fn compact(&self) -> i64 {
        let dir = self.kubeconfig.parent().expect("the state folder");
        let hooks = std::fs::read_to_string(dir.join("hooks-url")).expect("DIR/hooks-url");
        let response = super::http().post(format!("{}/compact", hooks.trim())).send().await.expect("the hook");
        assert!(response.status().is_success(), "compact: {}", response.status());
        let answer: Value = response.json().await.expect("the hook's JSON");
        answer["revision"].as_i64().expect("a revision")
    }

    /// From now on the node agent fails the image pull of new pods whose container image starts
    /// with `prefix` (`ErrImagePull`, then `ImagePullBackOff`): a line of the ConfigMap
    /// `kube-system/fake-kubelet`, key `pull-failures`. The ConfigMap is the whole binary's, so the
    /// prefix should name something of the test's own, such as its registry's host.
    pub async fn fail_pulls(&self, prefix: &str) {
        let client = self.client().await;
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps");
        let api: Api<DynamicObject> = Api::namespaced_with(client, "kube-system", &resource);
        // Read, add the line, write back with the resourceVersion read: another test's line
        // written in between is a 409, and the loop reads again.
        loop {
            let existing = api.get_opt("fake-kubelet").await.expect("read kube-system/fake-kubelet");
            let result = match existing {
                None => {
                    let object = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "fake-kubelet", "namespace": "kube-system"},
                        "data": {"pull-failures": format!("{prefix}\n")},
                    }))
                    .unwrap();
                    api.create(&PostParams::default(), &object).await.map(|_| ())
                }
                Some(mut object) => {
                    let lines = object.data["data"]["pull-failures"].as_str().unwrap_or_default().to_string();
                    object.data["data"]["pull-failures"] = json!(format!("{lines}{prefix}\n"));
                    api.replace("fake-kubelet", &PostParams::default(), &object).await.map(|_| ())
                }
            };
            match result {
                Ok(()) => return,
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => panic!("write kube-system/fake-kubelet: {e}"),
            }
        }
    }

    /// A new namespace `PREFIX-N`, unique in this control plane, once its `default`
    /// ServiceAccount exists (pods are refused before).
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let name = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let client = self.client().await;
        let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &namespace_resource());
        let object = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
        }))
        .unwrap();
        namespaces.create(&PostParams::default(), &object).await.expect("create the test namespace");
        let ns = TestNamespace { name, client, kubeconfig: self.kubeconfig.clone() };
        ns.wait_for("v1", "ServiceAccount", "default", |_| true).await;
        ns
    }
}

fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Namespace"), "namespaces")
}

impl TestNamespace {
    /// Enforces Pod Security `restricted` in the namespace from now on (its existing pods stay;
    /// new ones that are not restricted are refused).
    pub async fn enforce_restricted(&self) {
        let namespaces: Api<DynamicObject> = Api::all_with(self.client.clone(), &namespace_resource());
        let patch = json!({"metadata": {"labels": {ENFORCE: "restricted"}}});
        namespaces
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("label the namespace");
    }

    /// The API of `kind` in `api_version` (found by discovery), in this namespace when namespaced.
    pub async fn api(&self, api_version: &str, kind: &str) -> Api<DynamicObject> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities): (ApiResource, ApiCapabilities) =
            kube::discovery::pinned_kind(&self.client, &gvk).await.unwrap_or_else(|e| panic!("discover {kind}: {e}"));
        match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(self.client.clone(), &self.name, &resource),
            Scope::Cluster => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Creates `object` (its `apiVersion` and `kind` say where) in this namespace; returns it as
    /// the server stored it (defaults filled in).
    pub async fn create(&self, object: Value) -> Value {
        let api = self.api(object["apiVersion"].as_str().unwrap(), object["kind"].as_str().unwrap()).await;
        let object: DynamicObject = serde_json::from_value(object).expect("an object");
        let created = api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create: {e}"));
        serde_json::to_value(created).unwrap()
    }

    /// The object, or `None` when it does not exist.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        let api = self.api(api_version, kind).await;
        let found = api.get_opt(name).await.unwrap_or_else(|e| panic!("get {kind} {name}: {e}"));
        found.map(|o| serde_json::to_value(o).unwrap())
    }

    /// Waits (on a watch) until object `name` of `kind` exists and `wanted` holds of it; returns
    /// it then. Fails the test after `PATIENCE`.
    pub async fn wait_for(&self, api_version: &str, kind: &str, name: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        self.wait_for_within(super::PATIENCE, api_version, kind, name, wanted).await
    }

    /// [`Self::wait_for`] with another patience: a fleet's set-up waits longer than one object's.
    pub async fn wait_for_within(
        &self,
        patience: std::time::Duration,
        api_version: &str,
        kind: &str,
        name: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let api = self.api(api_version, kind).await;
        let condition = move |o: Option<&DynamicObject>| o.is_some_and(|o| wanted(&serde_json::to_value(o).unwrap()));
        let found = tokio::time::timeout(patience, kube::runtime::wait::await_condition(api, name, condition))
            .await
            .unwrap_or_else(|_| panic!("{kind} {}/{name}: not as wanted within {patience:?}", self.name))
            .unwrap_or_else(|e| panic!("watch {kind} {name}: {e}"));
        serde_json::to_value(found.expect("the object")).unwrap()
    }
}
