//! What a person running the daemon sees, through the real binary: log lines without colour codes
//! off a terminal, each error cause once, one exit code for unknown names, `build-spec` before a
//! pin, the next cron firings,
//! RBAC ready to apply, and a Grafana dashboard that queries only metrics the daemon serves.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::kube::KubeDouble;
use support::proxy::{Fault, Proxy};
use support::receiver::Receiver;
use support::registry::TestRegistry;

const ESC: char = '\u{1b}';

/// A config whose `run --once` logs at INFO and finishes at once: its one builder's registry
/// refuses the connection and gets one attempt (so the run exits 1, a failed check).
const QUIET: &str = "[monitor]\nstate = \"state/ledger.db\"\n\n[registries.\"127.0.0.1:1\"]\nmax_attempts = 1\n\n[[builders]]\nname = \"quiet\"\nimage = \"127.0.0.1:1/quiet/b:latest\"\n";

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let ws = Workspace::new();
    let config = ws.config(QUIET);
    let out = ws.run(&["run", "--once", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "the check fails: {}", out.stderr);
    assert!(out.stderr.contains("builder-monitor starting"), "{}", out.stderr);
    assert!(!out.stderr.contains(ESC), "ANSI codes in a pipe: {:?}", out.stderr);
}

/// Runs the binary with its stderr on a pseudo-terminal and returns what it wrote there.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn stderr_on_a_terminal(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> String {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut controller, mut terminal) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the out-parameters; the null pointers ask
    // for no name, no settings and no window size.
    let rc = unsafe {
        libc::openpty(&mut controller, &mut terminal, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned by nothing else.
    let (controller, terminal) = unsafe { (OwnedFd::from_raw_fd(controller), OwnedFd::from_raw_fd(terminal)) };
    let mut child = std::process::Command::new(support::daemon::BINARY)
        .args(args)
        .current_dir(cwd)
        .env("BUILDER_MONITOR_LOG", "info")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(terminal)
        .spawn()
        .expect("start builder-monitor");
    let mut controller = std::fs::File::from(controller);
    let mut text = Vec::new();
    // Reading ends with EIO once the child, the terminal's last holder, has exited.
    let _ = controller.read_to_end(&mut text);
    // Exit 1: QUIET's one check fails; what it logged is what is looked at.
    assert_eq!(child.wait().unwrap().code(), Some(1), "{}", String::from_utf8_lossy(&text));
    String::from_utf8_lossy(&text).into_owned()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn text_logs_are_coloured_on_a_terminal_unless_no_color_is_set() {
    let ws = Workspace::new();
    let config = ws.config(QUIET);
    let args = ["run", "--once", "--config", config.to_str().unwrap()];
    let coloured = stderr_on_a_terminal(&args, &[], ws.dir.path());
    assert!(coloured.contains("builder-monitor starting") && coloured.contains(ESC), "{coloured:?}");
    let plain = stderr_on_a_terminal(&args, &[("NO_COLOR", "1")], ws.dir.path());
    assert!(plain.contains("builder-monitor starting"), "{plain:?}");
    assert!(!plain.contains(ESC), "NO_COLOR is set: {plain:?}");
}

#[test]
fn each_error_cause_is_printed_once() {
    let ws = Workspace::new();
    let not_found = std::io::Error::from_raw_os_error(2).to_string(); // ENOENT
    let missing = ws.path("missing.toml");
    let out = ws.run(&["check", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.starts_with(&format!("error: {}: cannot read config file:", missing.display())),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.matches(&not_found).count(), 1, "{}", out.stderr);
    assert_eq!(out.stderr.matches("(os error").count(), 1, "{}", out.stderr);

    // The ledger's lock file cannot be created: its directory is a regular file.
    std::fs::write(ws.path("state"), "not a directory").unwrap();
    let config = ws.config(QUIET);
    let out = ws.run(&["run", "--once", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(1));
    let error = out.stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(error.starts_with("error: cannot lock the ledger: "), "{error}");
    assert_eq!(error.matches("(os error").count(), 1, "{error}");
}

#[test]
fn unknown_names_exit_2_like_any_usage_error() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\nstate = \"state/ledger.db\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"registry.example/b:latest\"\n\n[[images]]\nname = \"app\"\nbuilder = \"jammy\"\nimage = \"registry.example/app:latest\"\nsource = { git = \"https://example.com/app.git\" }\n\n[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/hook\"\n",
    );
    let config = config.to_str().unwrap();
    // No ledger exists: the name is refused before anything is read.
    let out = ws.run(&["build-spec", "--config", config, "--image", "nope", "--action", "rebuild"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("no image named \"nope\" (configured: app)"), "{}", out.stderr);
    assert!(!ws.path("state").exists(), "nothing created");
    let out = ws.run(&["alert", "test", "--config", config, "--name", "nope"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("no alert named \"nope\" (configured: hook)"), "{}", out.stderr);
}

/// `build-spec` before the builder's first pin: a runtime failure (exit 1) that says what to do.
#[test]
fn build_spec_before_the_first_pin_says_to_run_once() {
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "{QUIET}\n[[images]]\nname = \"app\"\nbuilder = \"quiet\"\nimage = \"127.0.0.1:1/quiet/app:latest\"\n"
    ));
    let config = config.to_str().unwrap();
    // The check fails (its registry refuses), so the ledger exists but holds no pin.
    assert_eq!(ws.run(&["run", "--once", "--config", config]).code, Some(1));
    let out = ws.run(&["build-spec", "--config", config, "--image", "app", "--action", "rebuild"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let error = out.stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert_eq!(error, "error: builder \"quiet\" is not pinned yet; run `builder-monitor run --once` first");
}

#[test]
fn check_shows_the_next_cron_firings_with_weekday_names() {
    let ws = Workspace::new();
    let config = ws.config(
        "[[builders]]\nname = \"weekly\"\nimage = \"registry.example/b:latest\"\nschedule = \"0 0 9 * * 1\"\n\n[[builders]]\nname = \"every\"\nimage = \"registry.example/c:latest\"\n",
    );
    let out = ws.run(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let next: Vec<&str> = out.stdout.lines().filter_map(|l| l.trim().strip_prefix("next: ")).collect();
    assert_eq!(next.len(), 1, "only the cron schedule has firings to show:\n{}", out.stdout);
    let firings: Vec<&str> = next[0].split(", ").collect();
    assert_eq!(firings.len(), 3, "{}", next[0]);
    let mut previous = None;
    for firing in firings {
        // `Sun 2026-12-06 09:00 UTC`: the name is the date's weekday, and field 1 means Sunday.
        let (weekday, rest) = firing.split_once(' ').unwrap();
        let date = chrono::NaiveDateTime::parse_from_str(rest, "%Y-%m-%d %H:%M UTC")
            .unwrap_or_else(|e| panic!("{firing}: {e}"));
        assert_eq!(weekday, date.format("%a").to_string(), "{firing}");
        assert_eq!(weekday, "Sun", "{firing}");
        assert_eq!(date.format("%H:%M").to_string(), "09:00");
        assert!(date > chrono::Utc::now().naive_utc());
        if let Some(previous) = previous {
            assert_eq!(date - previous, chrono::Duration::days(7), "{firing}");
        }
        previous = Some(date);
    }
}

/// Publishing (cluster-wide), leader election in `ops`, Job builds in `builds`.
const CLUSTER_CONFIG: &str = "[kubernetes]\nnamespace = \"ops\"\npublish = true\nleader_election = true\n\n[runner]\ntype = \"kubernetes\"\n\n[runner.kubernetes]\nnamespace = \"builds\"\n";

fn rbac_documents(ws: &Workspace, extra: &[&str]) -> Vec<Value> {
    let config = ws.config(CLUSTER_CONFIG);
    let mut args = vec!["rbac", "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = ws.run(&args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", out.stdout));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

#[test]
fn rbac_prints_the_service_account_roles_and_bindings_to_apply() {
    let ws = Workspace::new();
    let docs = rbac_documents(&ws, &[]);
    let identity = |d: &Value| {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        (text(&d["kind"]), text(&d["metadata"]["namespace"]), text(&d["metadata"]["name"]))
    };
    let objects: BTreeSet<(String, String, String)> = docs.iter().map(identity).collect();
    let expected: BTreeSet<(String, String, String)> = [
        ("ServiceAccount", "ops", "builder-monitor"),
        ("ClusterRole", "", "builder-monitor"),
        ("ClusterRoleBinding", "", "builder-monitor"),
        ("Role", "ops", "builder-monitor"),
        ("RoleBinding", "ops", "builder-monitor"),
        ("Role", "builds", "builder-monitor-builds"),
        ("RoleBinding", "builds", "builder-monitor-builds"),
        // Events about a ClusterBuilder (cluster-scoped) are accepted only in `default`.
        ("Role", "default", "builder-monitor-events"),
        ("RoleBinding", "default", "builder-monitor-events"),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_string(), n.to_string(), m.to_string()))
    .collect();
    assert_eq!(objects, expected);
    assert_eq!(docs.len(), expected.len(), "no object twice");
    assert_eq!(docs[0]["kind"], "ServiceAccount", "the account first, for `kubectl apply -f -`");
    for binding in docs.iter().filter(|d| d["kind"] == "RoleBinding" || d["kind"] == "ClusterRoleBinding") {
        assert_eq!(
            binding["subjects"],
            serde_json::json!([{ "kind": "ServiceAccount", "name": "builder-monitor", "namespace": "ops" }])
        );
        let role_kind = if binding["kind"] == "RoleBinding" { "Role" } else { "ClusterRole" };
        assert_eq!(binding["roleRef"]["kind"], role_kind);
        assert_eq!(binding["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        let role = docs.iter().find(|d| {
            d["kind"] == role_kind
                && d["metadata"]["name"] == binding["roleRef"]["name"]
                && d["metadata"]["namespace"] == binding["metadata"]["namespace"]
        });
        assert!(role.is_some_and(|r| !r["rules"].as_array().unwrap().is_empty()), "{binding} binds no emitted role");
    }

    let named = rbac_documents(&ws, &["--service-account", "bm"]);
    assert_eq!(named[0]["metadata"]["name"], "bm");
    assert!(named.iter().any(|d| d["kind"] == "Role" && d["metadata"]["name"] == "bm-builds"));
    let config = ws.config(CLUSTER_CONFIG);
    let bad = ws.run(&["rbac", "--config", config.to_str().unwrap(), "--service-account", "Not_A_Name"]);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("not a Kubernetes object name"), "{}", bad.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_objects_are_accepted_by_the_api() {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
    let ws = Workspace::new();
    let docs = tokio::task::block_in_place(|| rbac_documents(&ws, &[]));
    let double = KubeDouble::start().await;
    for namespace in ["ops", "builds", "default"] {
        double.create_namespace(namespace);
    }
    let client = double.client();
    for doc in &docs {
        let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", doc["apiVersion"].as_str().unwrap()),
        };
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap()));
        let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("{doc}: {e}"));
    }
    let account = double.get("serviceaccounts", Some("ops"), "builder-monitor").expect("the ServiceAccount");
    assert_eq!(account["kind"], "ServiceAccount");
    for (plural, namespace, name) in [
        ("clusterrolebindings", None, "builder-monitor"),
        ("rolebindings", Some("ops"), "builder-monitor"),
        ("rolebindings", Some("builds"), "builder-monitor-builds"),
    ] {
        let binding = double.get(plural, namespace, name).unwrap_or_else(|| panic!("{plural} {name}"));
        let role_plural = if plural == "rolebindings" { "roles" } else { "clusterroles" };
        let role = binding["roleRef"]["name"].as_str().unwrap();
        assert!(double.get(role_plural, namespace, role).is_some(), "{name} refers to a role that was created");
    }
}

/// Metric family names in an OpenMetrics exposition (`# TYPE name kind`).
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// Every `builder_monitor_…` name in a PromQL expression.
fn queried_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("builder_monitor_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The family a sample name belongs to: counters add `_total`, histograms `_bucket`/`_sum`/`_count`.
fn family_of<'a>(name: &'a str, families: &BTreeSet<String>) -> Option<&'a str> {
    if families.contains(name) {
        return Some(name);
    }
    ["_total", "_bucket", "_sum", "_count", "_created"]
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .find(|base| families.contains(*base))
}

// Blocking calls (the daemon's log) must not stall the in-test receiver: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_only_metrics_the_daemon_serves() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/builder-monitor/dashboards/builder-monitor.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let targets = panel["targets"].as_array().unwrap_or_else(|| panic!("{} has no queries", panel["title"]));
        assert!(!targets.is_empty(), "{} has no queries", panel["title"]);
        exprs.extend(targets.iter().map(|t| t["expr"].as_str().unwrap().to_string()));
    }

    // A daemon that has waited out a 429, checked, seen a change and delivered an alert: metric
    // families appear in /metrics with their first series.
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    proxy.inject(Fault::status(429).on("HEAD").header("Retry-After", "1"));
    let receiver = Receiver::start().await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state/ledger.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\n[[builders]]\nname = \"b\"\nimage = \"{}/demo/b:latest\"\nwatch_run_image = false\n\n[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\n",
        proxy.host, receiver.url
    ));
    let (mut daemon, server) = tokio::task::block_in_place(|| {
        let mut daemon = Daemon::start(&config);
        let server = daemon.server_addr();
        daemon.wait_for_event("builder.pinned");
        (daemon, server)
    });
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    tokio::task::block_in_place(|| {
        daemon.wait_for_event("builder.changed");
        daemon.wait_for("the delivery", |v| v["message"] == "alert delivered");
    });
    let exposition = support::http().get(format!("http://{server}/metrics")).send().await.unwrap();
    let exposition = exposition.text().await.unwrap();
    tokio::task::block_in_place(|| daemon.kill());
    let served = families(&exposition);

    let mut queried = BTreeSet::new();
    for expr in &exprs {
        for name in queried_names(expr) {
            let family = family_of(&name, &served).unwrap_or_else(|| {
                panic!("the dashboard queries {name}, which /metrics lacks ({expr}):\n{exposition}")
            });
            queried.insert(family.to_string());
        }
    }
    // What the dashboard is for: checks by result, changes by kind, rate-limit waits, deliveries by
    // outcome, actions by state.
    for (family, by) in [
        ("builder_monitor_checks", "result"),
        ("builder_monitor_changes", "kind"),
        ("builder_monitor_rate_limit_wait_seconds", "registry"),
        ("builder_monitor_alert_deliveries", "outcome"),
        ("builder_monitor_actions", "state"),
    ] {
        assert!(queried.contains(family), "no panel queries {family}");
        assert!(
            exprs.iter().any(|e| e.contains(family) && e.contains(&format!("by ({by})"))),
            "no panel shows {family} by {by}"
        );
    }
}

#[tokio::test]
async fn a_recorded_event_logs_one_short_text_line() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state/ledger.db\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"{}/demo/b:latest\"\nwatch_run_image = false\n",
        registry.host
    ));
    let out = ws.run(&["run", "--once", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains("builder_monitor_core::event")).collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].contains(" INFO builder_monitor_core::event: builder.pinned jammy: pinned to sha256:"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("event_id="), "{}", lines[0]);
    assert!(!lines[0].contains("\"previous\"") && !lines[0].contains("event="), "no document: {}", lines[0]);
    assert!(lines[0].len() < 200, "{}", lines[0]);
}

/// `listen = "127.0.0.1:0"` lets the system choose the port: the log names the one it chose, and
/// the daemon answers there.
#[test]
fn the_daemon_logs_the_address_it_actually_bound() {
    use std::io::{Read, Write};
    let ws = Workspace::new();
    let config = ws.config(&format!("{QUIET}\n[server]\nlisten = \"127.0.0.1:0\"\n"));
    let mut daemon = Daemon::start(&config);
    let line = daemon.wait_for("the server", |v| v["message"] == "serving health, metrics, API and hooks");
    let listen = line["listen"].as_str().expect("a listen field").to_string();
    let addr: std::net::SocketAddr = listen.parse().expect("an address");
    assert_ne!(addr.port(), 0, "the bound port, not the configured 0: {line}");
    let mut stream = std::net::TcpStream::connect(addr).expect("the daemon listens where it said");
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
