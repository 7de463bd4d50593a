//! What a person sees when checks fail, through the real binary: the retries and the next check in
//! the log and in `status`, and a plain-HTTP registry addressed as HTTPS naming its fix.

use crate::support;

use support::daemon::{Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::proxy::Proxy;
use support::registry::TestRegistry;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

// The binary runs while the in-process proxy answers it: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_logs_its_attempts_and_next_check_and_status_shows_it() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let proxy = Proxy::start(&registry.host).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[registries.\"{host}\"]\nbackoff = \"10ms\"\nmax_attempts = 3\n\n[[builders]]\nname = \"b\"\nimage = \"{host}/demo/b:latest\"\ninterval = \"7m\"\nwatch_run_image = false\n",
        host = proxy.host
    ));
    let config = config.to_str().unwrap();
    assert_eq!(ws.run(&["run", "--once", "--config", config]).code, Some(0));

    proxy.down(Some(503));
    let args = ["run", "--once", "--log-format", "json", "--config", config];
    let out = run_with_env(&args, &[("BUILDER_MONITOR_LOG", "debug")], ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let lines: Vec<serde_json::Value> = out.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let retries: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["message"] == "request failed; retrying").collect();
    assert_eq!(retries.len(), 2, "two retries after the first attempt, at DEBUG: {}", out.stderr);
    assert!(retries.iter().all(|l| l["level"] == "DEBUG" && l["max_attempts"] == 3), "{retries:?}");
    // A 503 concerns the whole registry: one WARN says its outage started (with this watch's
    // failure, which made it known); the watch's own line is DEBUG.
    let warns: Vec<&serde_json::Value> = lines.iter().filter(|l| l["level"] == "WARN").collect();
    assert_eq!(warns.len(), 1, "{}", out.stderr);
    let warn = warns[0];
    assert!(warn["message"].as_str().unwrap().starts_with("registry unavailable"), "{warn}");
    assert_eq!((&warn["watch"], &warn["reason"]), (&"b".into(), &"registry_unavailable".into()), "{warn}");
    assert!(warn["error"].as_str().unwrap().contains("gave up after 3 attempts"), "{warn}");
    let own = lines.iter().find(|l| l["message"] == "check failed; pin kept").expect("the failure is logged");
    assert_eq!(own["level"], "DEBUG", "{own}");
    assert_eq!(own["next_check"], warn["next_check"], "{own}");

    let out = ws.run(&["status", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let b = &json(&out.stdout)["builders"][0];
    let last = chrono::DateTime::parse_from_rfc3339(b["last_check"]["time"].as_str().unwrap()).unwrap();
    let next = chrono::DateTime::parse_from_rfc3339(b["next_check"].as_str().expect("next_check")).unwrap();
    assert_eq!(next - last, chrono::Duration::minutes(7), "{b}");
    assert_eq!(warn["next_check"], b["next_check"], "the log and status agree: {warn}");
    let out = ws.run(&["status", "--config", config]);
    assert!(out.stdout.contains(&format!("next check: {}", b["next_check"].as_str().unwrap())), "{}", out.stdout);
}

/// Under the daemon, a failed check's line names the retry the scheduler then makes (30 s later,
/// within its jitter), not the schedule's next check an hour away; the second failure's line
/// names the next retry from the ledger's count (60 s and up).
#[test]
fn a_failing_watch_logs_the_retry_the_daemon_then_makes() {
    let registry = TestRegistry::start();
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"{host}/demo/missing:latest\"\ninterval = \"1h\"\njitter = \"0s\"\nwatch_run_image = false\n",
        host = registry.host
    ));
    let mut daemon = support::daemon::Daemon::start(&config);
    let failed = |v: &serde_json::Value| v["message"] == "check failed; pin kept" && v["watch"] == "b";
    let time = |v: &serde_json::Value, key: &str| {
        let text = v[key].as_str().unwrap_or_else(|| panic!("no {key}: {v}"));
        chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("{key} ({e}): {v}"))
    };
    let first = daemon.wait_for("the first failure", failed);
    assert_eq!((&first["level"], &first["reason"]), (&"WARN".into(), &"tag_missing".into()), "{first}");
    let next = time(&first, "next_check");
    let retry = (next - time(&first, "timestamp")).num_milliseconds();
    assert!(
        (29_000..=38_500).contains(&retry),
        "the first retry, 30 s and up to a quarter more (on a whole second): {first}"
    );
    // The retry is the next check: the watch is not woken, and its schedule is an hour away.
    let patience = std::time::Duration::from_secs(90);
    let second = daemon.wait_longer("the retry", patience, failed).expect("the daemon runs");
    let checked = time(&second, "timestamp");
    assert!(checked >= next, "retried at {checked}, before the logged {next}: {second}");
    assert!(checked < next + chrono::Duration::seconds(30), "this retry, not a later one: {second}");
    assert_eq!(second["consecutive_failures"], 2, "{second}");
    let again = (time(&second, "next_check") - checked).num_milliseconds();
    assert!((59_000..=76_000).contains(&again), "the second retry doubles: {second}");
    daemon.kill();
}

/// A registry name that does not resolve fails the request at once, naming the fix, instead of
/// four attempts with backoff between them. The name has a label longer than DNS allows, which
/// glibc refuses without asking a name server: nothing leaves this machine.
#[test]
fn a_name_that_does_not_resolve_is_not_retried_within_a_check() {
    let ws = Workspace::new();
    let image = format!("{}.invalid/demo/b:latest", "a".repeat(64));
    let args = ["resolve", "--insecure", &image];
    let out = run_with_env(&args, &[("BUILDER_MONITOR_LOG", "debug")], ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("does not resolve; check the host name"), "{}", out.stderr);
    assert!(!out.stderr.contains("request failed; retrying"), "{}", out.stderr);
    assert!(!out.stderr.contains("gave up after"), "{}", out.stderr);
}

#[tokio::test]
async fn a_plain_http_registry_addressed_as_https_names_the_fix_and_resolve_and_diff_take_insecure() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let pushed = pusher.push_image("demo/b", Some("latest"), &Image::new("amd64").salt("1"), Format::Oci).await;
    let ws = Workspace::new();
    // Loopback registries default to plain HTTP; this one is configured as HTTPS, which is what
    // every other host defaults to.
    let config = ws.config(&format!(
        "[registries.\"{host}\"]\ninsecure = false\nbackoff = \"10ms\"\n\n[[builders]]\nname = \"b\"\nimage = \"{host}/demo/b:latest\"\n",
        host = registry.host
    ));
    let config = config.to_str().unwrap();
    let image = format!("{}/demo/b:latest", registry.host);

    let out = ws.run(&["resolve", &image, "--config", config]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("InvalidContentType"), "the cause is still shown: {}", out.stderr);
    let fix = format!("set `insecure = true` under [registries.\"{}\"]", registry.host);
    assert!(out.stderr.contains(&fix), "{}", out.stderr);
    assert!(out.stderr.contains("--insecure"), "{}", out.stderr);
    assert!(!out.stderr.contains("retrying"), "a protocol mismatch is not retried: {}", out.stderr);

    let out = ws.run(&["resolve", &image, "--insecure", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(json(&out.stdout)["digest"], pushed.digest.as_str());
    let out = ws.run(&["diff", &image, &image, "--insecure", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(json(&out.stdout)["kind"].is_string(), "{}", out.stdout);
}

/// `check` with no cluster to be found: HOME an empty directory, no $KUBECONFIG, not in a pod.
fn check_without_a_cluster(ws: &Workspace, config: &std::path::Path) -> support::daemon::Output {
    let home = ws.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(support::daemon::BINARY)
        .args(["check", "--config", config.to_str().unwrap()])
        .current_dir(ws.dir.path())
        .env("HOME", &home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("BUILDER_MONITOR_CONFIG")
        .output()
        .expect("run check");
    support::daemon::Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A config whose deploys or builds run on a Kubernetes cluster is refused by `check` (exit 2)
/// when no cluster can be configured, naming what needs one and `[kubernetes]`; with a kubeconfig
/// (whose cluster is not asked: it need not answer) the same config passes.
#[test]
fn check_refuses_actions_on_a_cluster_that_cannot_be_configured() {
    let ws = Workspace::new();
    let base = "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"registry.example.com/cnb/builder:latest\"\n\n\
                [[images]]\nname = \"petclinic\"\nbuilder = \"b\"\nimage = \"registry.example.com/apps/petclinic:latest\"\n";
    let deploy = "deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"petclinic\" }]\n";
    let cases = [
        (format!("{base}{deploy}"), "image \"petclinic\"'s deploy needs a Kubernetes cluster"),
        (
            format!("{base}\n[runner]\ntype = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"builds\"\n"),
            "[runner] type = \"kubernetes\" needs a Kubernetes cluster",
        ),
        (format!("{base}\n[runner]\ntype = \"kpack\"\n"), "[runner] type = \"kpack\" needs a Kubernetes cluster"),
    ];
    for (text, needs) in &cases {
        let config = ws.config(text);
        let out = check_without_a_cluster(&ws, &config);
        assert_eq!(out.code, Some(2), "{text}\n{}", out.stderr);
        assert!(out.stderr.contains(needs), "{}", out.stderr);
        assert!(out.stderr.contains("set [kubernetes] kubeconfig = "), "names the fix: {}", out.stderr);
        // The client's own error (every place it looked, each cause) summarized, on short lines.
        assert!(out.stderr.contains("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod"), "{}", out.stderr);
        assert!(out.stderr.lines().all(|l| l.chars().count() <= 160), "{}", out.stderr);
    }
    // The same configs with a kubeconfig: a server nobody listens on is fine, it is not asked.
    let kubeconfig = ws.path("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: not-a-real-token\n",
    )
    .unwrap();
    for (text, _) in &cases {
        let config = ws.config(&format!("[kubernetes]\nkubeconfig = \"kubeconfig\"\n\n{text}"));
        let out = check_without_a_cluster(&ws, &config);
        assert_eq!(out.code, Some(0), "{text}\n{}", out.stderr);
        assert!(!out.stderr.contains("not-a-real-token"), "{}", out.stderr);
    }
    // Watches alone need no cluster.
    let out = check_without_a_cluster(&ws, &ws.config(base));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// Several watches on one registry that does not answer: `status` says the registry is
/// unreachable once, with one of the errors, and each watch points at that line instead of
/// repeating the error.
#[tokio::test]
async fn status_says_once_that_a_registry_is_unreachable_for_all_its_watches() {
    let closed = support::receiver::ClosedPort::new();
    let host = format!("127.0.0.1:{}", closed.port());
    let ws = Workspace::new();
    let mut config = format!("[monitor]\nstate = \"state.db\"\n\n[registries.\"{host}\"]\nmax_attempts = 1\n\n");
    for name in ["a", "b", "c"] {
        config += &format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{host}/demo/{name}:latest\"\nwatch_run_image = false\n\n"
        );
    }
    let config = ws.config(&config);
    let config = config.to_str().unwrap();
    assert_eq!(ws.run(&["run", "--once", "--config", config]).code, Some(1));
    let out = ws.run(&["status", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = &out.stdout;
    let header = format!("registry {host} unreachable: the last checks of 3 watches failed to reach it:\n");
    assert_eq!(text.matches(&header).count(), 1, "{text}");
    assert_eq!(text.matches("Connection refused").count(), 1, "the error once: {text}");
    let pointers = format!("error (1 in a row): registry {host} unreachable (above)\n");
    assert_eq!(text.matches(&pointers).count(), 3, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 160), "{text}");
}
