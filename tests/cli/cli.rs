//! The `builder-monitor` binary end to end: resolve, run --once, status, restarts after SIGKILL,
//! graceful SIGTERM, config errors and exit codes.

use crate::support;

use builder_monitor::ledger::Ledger;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// The digest the registry itself reports for a reference.
async fn registry_digest(host: &str, repo: &str, tag: &str) -> String {
    let response = support::http()
        .head(format!("http://{host}/v2/{repo}/manifests/{tag}"))
        .header("Accept", ACCEPT)
        .send()
        .await
        .unwrap();
    response.headers()["docker-content-digest"].to_str().unwrap().to_string()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test]
async fn resolve_prints_what_the_registry_reports() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let oci = pusher.push_image("demo/oci", Some("v1"), &Image::new("amd64"), Format::Oci).await;
    let docker = pusher.push_image("demo/docker", Some("v1"), &Image::new("arm64"), Format::Docker).await;
    let images = [Image::new("amd64"), Image::new("arm64").salt("x")];
    let (index, children) = pusher.push_index("demo/multi", "v1", &images, Format::Oci).await;
    let ws = Workspace::new();

    for (repo, pushed, media_type) in [
        ("demo/oci", &oci, "application/vnd.oci.image.manifest.v1+json"),
        ("demo/docker", &docker, "application/vnd.docker.distribution.manifest.v2+json"),
        ("demo/multi", &index, "application/vnd.oci.image.index.v1+json"),
    ] {
        let image = format!("{}/{repo}:v1", registry.host);
        let out = ws.run(&["resolve", &image, "--json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v = json(&out.stdout);
        assert_eq!(v["digest"], registry_digest(&registry.host, repo, "v1").await);
        assert_eq!(v["digest"], pushed.digest);
        assert_eq!(v["reference"], format!("{}/{repo}@{}", registry.host, pushed.digest));
        assert_eq!(v["media_type"], media_type);
        assert_eq!(v["image"], image);
    }
    let out = ws.run(&["resolve", &format!("{}/demo/multi:v1", registry.host), "--json"]);
    let v = json(&out.stdout);
    let platforms = v["platforms"].as_array().unwrap();
    assert_eq!(platforms.len(), 2);
    assert_eq!(platforms[0]["architecture"], "amd64");
    assert_eq!(platforms[0]["digest"], children[0].digest);
    assert_eq!(platforms[1]["architecture"], "arm64");
    assert_eq!(platforms[1]["digest"], children[1].digest);
    assert!(platforms[1]["variant"].is_null());

    let text = ws.run(&["resolve", &format!("{}/demo/docker:v1", registry.host)]);
    assert!(
        text.stdout.contains(&format!("reference:  {}/demo/docker@{}", registry.host, docker.digest)),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("linux/arm64:"), "{}", text.stdout);

    let missing = ws.run(&["resolve", &format!("{}/demo/nothing:v1", registry.host)]);
    assert_eq!(missing.code, Some(1));
    assert!(missing.stderr.contains("manifest unknown"), "{}", missing.stderr);
    let invalid = ws.run(&["resolve", "Not A Reference"]);
    assert_eq!(invalid.code, Some(2));
    assert!(invalid.stderr.contains("invalid image reference"), "{}", invalid.stderr);
}

fn daemon_config(host: &str, interval: &str) -> String {
    format!(
        "[monitor]\ninterval = \"{interval}\"\njitter = \"0s\"\nstate = \"state/ledger.db\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n"
    )
}

async fn event_types(ledger_path: &std::path::Path) -> Vec<String> {
    let ledger = Ledger::open(ledger_path).unwrap();
    ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event.event_type.to_string()).collect()
}

#[tokio::test]
async fn run_once_pins_then_records_one_change_and_status_shows_it() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let images = [Image::new("amd64"), Image::new("arm64")];
    let (v1, _) = pusher.push_index("demo/builder", "latest", &images, Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&daemon_config(&registry.host, "1h"));
    let config = config.to_str().unwrap();
    let ledger = ws.path("state/ledger.db");

    for _ in 0..2 {
        let out = ws.run(&["run", "--once", "--config", config]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    assert_eq!(event_types(&ledger).await, ["builder.pinned"], "pinned once, not on every run");

    let images = [Image::new("amd64").salt("2"), Image::new("arm64").salt("2")];
    let (v2, _) = pusher.push_index("demo/builder", "latest", &images, Format::Oci).await;
    for _ in 0..2 {
        let out = ws.run(&["run", "--once", "--config", config]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    assert_eq!(event_types(&ledger).await, ["builder.pinned", "builder.changed"]);

    // The config is found through the environment as well.
    let out = run_with_env(&["status", "--json"], &[("BUILDER_MONITOR_CONFIG", config)], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json(&out.stdout);
    let b = &v["builders"][0];
    assert_eq!(b["name"], "jammy");
    assert_eq!(b["image"], format!("{}/demo/builder:latest", registry.host));
    assert_eq!(b["pinned"]["digest"], v2.digest);
    assert_eq!(b["pinned"]["reference"], format!("{}/demo/builder@{}", registry.host, v2.digest));
    assert_eq!(b["platforms"].as_object().unwrap().len(), 2);
    assert_eq!(b["last_check"]["result"], "ok");
    let changes = b["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["previous"], v1.digest);
    assert_eq!(changes[0]["current"], v2.digest);
    assert_eq!(changes[0]["rollback"], false);
    assert!(v["pending"].as_array().unwrap().is_empty());
    assert!(v["dead_letters"].as_array().unwrap().is_empty());

    let text = ws.run(&["status", "--config", config]);
    assert!(
        text.stdout.contains(&format!("pinned:     {}/demo/builder@{}…", registry.host, &v2.digest[..19])),
        "{}",
        text.stdout
    );

    // A failed check makes --once exit 1.
    pusher.delete("demo/builder", &v2.digest).await;
    let out = ws.run(&["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("tag_missing"), "{}", out.stderr);
}

#[tokio::test]
async fn killed_daemon_restarts_without_repeating_events() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&daemon_config(&registry.host, "200ms"));
    let ledger = ws.path("state/ledger.db");

    let mut daemon = Daemon::start(&config);
    daemon.wait_for_event("builder.pinned");
    pusher.push_image("demo/builder", Some("latest"), &Image::new("amd64").salt("2"), Format::Oci).await;
    let changed = daemon.wait_for_event("builder.changed");
    daemon.kill();

    let mut daemon = Daemon::start(&config);
    // Several checks after the restart, all of them seeing the recorded pin.
    for _ in 0..3 {
        daemon.wait_for("a check", |v| v["message"] == "check done");
    }
    let (status, log) = daemon.terminate();
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    assert!(log.iter().any(|l| l.contains("builder-monitor stopped")), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("\"event_type\"")), "no event after restart: {log:#?}");
    assert_eq!(event_types(&ledger).await, ["builder.pinned", "builder.changed"]);
    let stored = Ledger::open(&ledger).unwrap().changes(None, 10).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].id, changed["id"].as_str().unwrap());
}

#[test]
fn config_errors_are_positioned_and_exit_2() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\ninterval = \"10\"\n\n[[builders]]\nname = \"a\"\nimage = \"ubuntu@sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n\n[[builders]]\nname = \"a\"\nimage = \"x:1\"\nschedule = \"*/5 * * * *\"\n",
    );
    let out = ws.run(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    let file = config.display().to_string();
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines[0].starts_with(&format!("error: {file}:2:12: invalid interval \"10\"")), "{}", out.stderr);
    assert!(lines[1].starts_with(&format!("{file}:6:9: image \"ubuntu@sha256:")), "{}", out.stderr);
    assert!(lines[2].starts_with(&format!("{file}:9:8: duplicate builder name \"a\"")), "{}", out.stderr);
    assert!(lines[3].starts_with(&format!("{file}:11:12: cron expression")), "{}", out.stderr);
    assert_eq!(lines.len(), 4, "{}", out.stderr);

    for args in [
        &["run", "--once", "--config", config.to_str().unwrap()][..],
        &["status", "--config", config.to_str().unwrap()],
    ] {
        assert_eq!(ws.run(args).code, Some(2));
    }
    // An invalid cron expression (not the five-field kind): one line, the parser's words included.
    let cron = ws.path("cron.toml");
    std::fs::write(&cron, "[[builders]]\nname = \"a\"\nimage = \"x:1\"\nschedule = \"0 0 25 * * Mun\"\n").unwrap();
    let out = ws.run(&["check", "--config", cron.to_str().unwrap()]);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("invalid cron expression \"0 0 25 * * Mun\""), "{}", out.stderr);

    let missing = ws.run(&["check", "--config", "/nonexistent/config.toml"]);
    assert_eq!(missing.code, Some(2));
    assert!(missing.stderr.contains("cannot read config file"), "{}", missing.stderr);
    assert_eq!(ws.run(&["frobnicate"]).code, Some(2), "usage errors exit 2");
    // No --config and no BUILDER_MONITOR_CONFIG: the error names both ways to give it.
    let unset = ws.run(&["check"]);
    assert_eq!(unset.code, Some(2));
    assert!(unset.stderr.contains("--config"), "{}", unset.stderr);
    assert!(unset.stderr.contains("BUILDER_MONITOR_CONFIG"), "{}", unset.stderr);
    let help = ws.run(&["--help"]);
    assert_eq!(help.code, Some(0), "{}", help.stderr);
    assert!(!help.stderr.contains("BUILDER_MONITOR_CONFIG"), "help is no error: {}", help.stderr);
}

/// The lines between `# BEGIN {name} example` and `# END {name} example` in config.example.toml,
/// uncommented.
fn example_block(name: &str) -> String {
    let example =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml")).unwrap();
    let (begin, end) = (format!("# BEGIN {name} example"), format!("# END {name} example"));
    let block: String = example
        .lines()
        .skip_while(|l| *l != begin)
        .skip(1)
        .take_while(|l| *l != end)
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#'))))
        .collect();
    assert!(!block.is_empty(), "no {begin} block in config.example.toml");
    block
}

/// A kubeconfig (`dir/name`) naming a cluster nobody serves: `check` only configures the client,
/// so it stands for the cluster a config's deploys and builds run on.
fn stand_in_kubeconfig(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: stand-in\n";
    std::fs::write(&path, text).unwrap();
    path
}

/// `check` of the example block `name` after `before` (a builder named `paketo-jammy-base`
/// unless `before` is given), with `env` and a cluster ($KUBECONFIG); asserts it passes and
/// returns its stdout.
fn check_example(name: &str, before: Option<&str>, env: &[(&str, &str)]) -> String {
    let block = example_block(name);
    let before = before
        .unwrap_or("[[builders]]\nname = \"paketo-jammy-base\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n\n");
    let ws = Workspace::new();
    let config = ws.config(&format!("{before}{block}"));
    let kubeconfig = stand_in_kubeconfig(ws.dir.path(), "cluster-kubeconfig");
    let mut with_cluster = env.to_vec();
    with_cluster.push(("KUBECONFIG", kubeconfig.to_str().unwrap()));
    let out = run_with_env(&["check", "--config", config.to_str().unwrap()], &with_cluster, ws.dir.path());
    assert_eq!(out.code, Some(0), "{}\n{block}", out.stderr);
    for (_, secret) in env {
        assert!(!out.stdout.contains(secret) && !out.stderr.contains(secret), "{secret} shown");
    }
    out.stdout
}

#[test]
fn example_images_are_valid_once_uncommented() {
    let out = check_example("images", None, &[]);
    let line = "petclinic: registry.example.com/apps/petclinic:latest (builder paketo-jammy-base, policy auto, deploys to Deployment shop/petclinic, undo workload)";
    assert!(out.contains(line), "{out}");
}

#[test]
fn example_rollout_is_valid_once_uncommented() {
    let out = check_example("rollout", None, &[]);
    for line in [
        "canary: registry.example.com/apps/canary:latest (builder paketo-jammy-base, policy auto, wave 0)",
        "rollout: windows Mon-Fri 09:00-17:00 Europe/Berlin, at most 5 actions of a change at once, approval for rebuild, deploys: soak 10m\n",
    ] {
        assert!(out.contains(line), "{line} missing from:\n{out}");
    }
}

#[test]
fn example_pools_are_valid_once_uncommented() {
    let before = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n\n[runner]\ntype = \"kubernetes\"\n\n";
    let out = check_example("pools", Some(before), &[]);
    for pool in ["linux", "windows"] {
        assert!(out.contains(pool), "pool {pool} missing from:\n{out}");
    }
}

#[test]
fn example_gitops_is_valid_once_uncommented() {
    let mut before = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n\n".to_string();
    for app in ["petclinic", "orders"] {
        before += &format!(
            "[[images]]\nname = \"{app}\"\nbuilder = \"jammy\"\nimage = \"registry.example.com/apps/{app}:latest\"\n\n"
        );
    }
    let out = check_example("gitops", Some(&before), &[("FLEET_GIT_TOKEN", "example-token")]);
    assert!(out.contains("fleet"), "the gitops target missing from:\n{out}");
}

#[test]
fn example_alerts_are_valid_once_uncommented() {
    let env =
        [("WEBHOOK_SECRET", "webhook-secret-0123"), ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T/B/X")];
    let out = check_example("alerts", Some(""), &env);
    assert!(out.contains("alerts (2):"), "{out}");
}

#[test]
fn example_config_is_valid() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let ws = Workspace::new();
    let out = ws.run(&["check", "--config", example.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for builder in [
        "docker.io/paketobuildpacks/builder-jammy-base:latest",
        "docker.io/paketobuildpacks/builder-jammy-full:latest",
        "docker.io/heroku/builder:24",
        "docker.io/heroku/builder:22",
    ] {
        assert!(out.stdout.contains(builder), "{builder} missing from:\n{}", out.stdout);
    }
}

/// `check | head -0`: the reader is gone before the first byte. The command ends as it would
/// have, without a panic or an error; a stdout that cannot be written (`/dev/full`) is an error
/// that exits 1.
#[test]
fn a_closed_stdout_ends_quietly_and_a_full_one_fails() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let check = |stdout: std::process::Stdio| {
        std::process::Command::new(support::daemon::BINARY)
            .args(["check", "--config", example.to_str().unwrap()])
            .env_remove("BUILDER_MONITOR_CONFIG")
            .stdout(stdout)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run builder-monitor")
    };
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let closed = check(writer.into());
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{stderr}");

    let full = check(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap().into());
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error: cannot write to standard output") && !stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn secrets_never_reach_logs_or_output() {
    use base64::Engine;
    let registry = TestRegistry::start_with(support::registry::Auth::Htpasswd);
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    pusher.push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let ws = Workspace::new();
    let text = format!(
        "{}\n[registries.\"{}\"]\nusername = \"testuser\"\npassword_env = \"BM_TEST_PASSWORD\"\n",
        daemon_config(&registry.host, "1h"),
        registry.host
    );
    let config = ws.config(&text);
    let config = config.to_str().unwrap();
    let basic = base64::engine::general_purpose::STANDARD.encode("testuser:testpass");
    for (password, code) in [("testpass", 0), ("wrong-secret", 1)] {
        let env = [("BM_TEST_PASSWORD", password), ("BUILDER_MONITOR_LOG", "trace")];
        let run = run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());
        assert_eq!(run.code, Some(code), "{}", run.stderr);
        let check = run_with_env(&["check", "--config", config], &env, ws.dir.path());
        let status = run_with_env(&["status", "--json", "--config", config], &env, ws.dir.path());
        for out in [&run, &check, &status] {
            for text in [&out.stdout, &out.stderr] {
                assert!(!text.contains(password), "password leaked:\n{text}");
                assert!(!text.contains(&basic), "basic credentials leaked:\n{text}");
            }
        }
        assert!(check.stdout.contains("user testuser (password from $BM_TEST_PASSWORD)"), "{}", check.stdout);
    }
}

/// A request from an environment without a user name (a container, a cron job) says whose it is
/// by uid, not `unknown`.
#[test]
fn a_decision_without_a_user_name_is_recorded_by_uid() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:1/demo/b:latest\"\n",
    );
    let env = [("USER", ""), ("LOGNAME", "")];
    let frozen = run_with_env(&["freeze", "--config", config.to_str().unwrap()], &env, ws.dir.path());
    assert_eq!(frozen.code, Some(0), "{}", frozen.stderr);
    assert!(frozen.stdout.contains(" by uid "), "{}", frozen.stdout);
    assert!(!frozen.stdout.contains("unknown"), "{}", frozen.stdout);
}

/// Without a daemon, the roll-out commands write the ledger themselves: the freeze is kept and
/// shown by `status`, lifted by `unfreeze`; an unknown change is a usage error that names it.
#[test]
fn roll_out_commands_write_the_ledger_when_no_daemon_holds_it() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:1/demo/b:latest\"\n",
    );
    let config = config.to_str().unwrap();
    let frozen = ws.run(&["freeze", "--config", config, "--reason", "release week"]);
    assert_eq!(frozen.code, Some(0), "{}", frozen.stderr);
    assert!(frozen.stdout.starts_with("frozen since "), "{}", frozen.stdout);
    assert!(frozen.stdout.contains("(cli): release week;"), "{}", frozen.stdout);
    let again = ws.run(&["freeze", "--config", config, "--json"]);
    assert_eq!(json(&again.stdout)["changed"], false, "{}", again.stdout);
    let status = ws.run(&["status", "--config", config, "--json"]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let status = json(&status.stdout);
    assert_eq!(status["rollout"]["frozen"]["reason"], "release week", "{status}");
    assert!(status["rollout"]["frozen"]["by"].as_str().unwrap().ends_with("(cli)"), "{status}");
    let text = ws.run(&["status", "--config", config]);
    assert!(text.stdout.contains("FROZEN since "), "{}", text.stdout);
    // What a freeze stops, in one wording: the command, `status` and `freeze --help` say it alike.
    let stops = builder_monitor_core::rollout::FREEZE_STOPS;
    assert_eq!(stops, "no rebase, rebuild, deploy or Git write-back starts");
    assert!(frozen.stdout.contains(&format!(";\n  {stops} until `builder-monitor unfreeze`")), "{}", frozen.stdout);
    assert!(text.stdout.contains(&format!(":\n  {stops} until `builder-monitor unfreeze`")), "{}", text.stdout);
    let help = ws.run(&["freeze", "--help"]);
    assert!(help.stdout.contains(stops), "{}", help.stdout);
    let rollout_doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rollout.md")).unwrap();
    assert!(rollout_doc.contains(stops), "docs/rollout.md says it another way");

    let unknown = ws.run(&["approve", "--config", config, "no-such-change"]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(unknown.stderr.contains("no change no-such-change has actions in the ledger"), "{}", unknown.stderr);

    let lifted = ws.run(&["unfreeze", "--config", config]);
    assert_eq!(lifted.code, Some(0), "{}", lifted.stderr);
    assert_eq!(lifted.stdout, "unfrozen: waiting actions start again\n");
    let status = json(&ws.run(&["status", "--config", config, "--json"]).stdout);
    assert!(status["rollout"]["frozen"].is_null(), "{status}");
    let none = ws.run(&["unfreeze", "--config", config]);
    assert_eq!(none.stdout, "not frozen; nothing changed\n");
}

/// Every ```toml block of the manual (README.md and docs/*.md) that is a whole config passes
/// `builder-monitor check`, so the manual cannot drift from the code. The rule: a block is a whole
/// config when it has a `[[builders]]` table header line (`run` refuses a config without one); a
/// block without one is a fragment (a `[runner]` or `[kubernetes]` table shown on its own) and is
/// only parsed as TOML. Each whole config is written to its own temp dir and checked by the real
/// binary with every variable its `*_env` keys name set (a URL for `url_env`) and every relative
/// file its `*_file`, `docker_config` and `kubeconfig` keys name created with a stand-in.
/// (`config.example.toml` has its own test, `example_config_is_valid`.)
#[test]
fn every_whole_config_in_the_manual_passes_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let (mut checked, mut fragments) = (Vec::new(), Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let mut lines = text.lines().enumerate();
        while let Some((start, line)) = lines.next() {
            if line.trim_end() != "```toml" {
                continue;
            }
            let block: String =
                lines.by_ref().take_while(|(_, l)| !l.starts_with("```")).map(|(_, l)| format!("{l}\n")).collect();
            let place = format!("{name}:{}", start + 1);
            let table: toml::Table =
                toml::from_str(&block).unwrap_or_else(|e| panic!("{place} is not TOML: {e}\n{block}"));
            if !block.lines().any(|l| l.trim() == "[[builders]]") {
                fragments.push(place);
                continue;
            }
            let ws = Workspace::new();
            let (mut vars, mut stand_ins) = (Vec::new(), Vec::new());
            collect_env_and_files(&toml::Value::Table(table), &mut vars, &mut stand_ins);
            for (key, path) in &stand_ins {
                if key == "kubeconfig" {
                    stand_in_kubeconfig(ws.dir.path(), path);
                    continue;
                }
                let path = ws.path(path);
                let content = match key.as_str() {
                    "docker_config" => "{\"auths\": {}}\n".to_string(),
                    "url_file" => "https://receiver.example/hook\n".to_string(),
                    "ca_file" => std::fs::read_to_string(support::fixture("token-cert.pem")).unwrap(),
                    _ => "stand-in\n".to_string(),
                };
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, content).unwrap();
            }
            let mut env: Vec<(&str, &str)> = vars
                .iter()
                .map(|(key, var)| {
                    (var.as_str(), if key == "url_env" { "https://receiver.example/hook" } else { "stand-in" })
                })
                .collect();
            // The cluster the manual's deploys and builds run on, where no kubeconfig is named.
            let cluster = stand_in_kubeconfig(ws.dir.path(), "cluster-kubeconfig");
            env.push(("KUBECONFIG", cluster.to_str().unwrap()));
            let config = ws.config(&block);
            let out = run_with_env(&["check", "--config", config.to_str().unwrap()], &env, ws.dir.path());
            assert_eq!(out.code, Some(0), "`check` refuses {place}:\n{}\n{block}", out.stderr);
            checked.push(place);
        }
    }
    eprintln!(
        "checked {} whole configs: {checked:?}; skipped {} fragments: {fragments:?}",
        checked.len(),
        fragments.len()
    );
    assert!(checked.len() >= 2, "the manual's whole configs went missing: {checked:?}");
}

/// The `*_env` keys (with the variable each names) and the relative paths of the `*_file`,
/// `docker_config` and `kubeconfig` keys, anywhere in a config.
fn collect_env_and_files(value: &toml::Value, vars: &mut Vec<(String, String)>, files: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                match value.as_str() {
                    Some(var) if key.ends_with("_env") => vars.push((key.clone(), var.to_string())),
                    Some(path)
                        if (key.ends_with("_file") || key == "docker_config" || key == "kubeconfig")
                            && std::path::Path::new(path).is_relative() =>
                    {
                        files.push((key.clone(), path.to_string()))
                    }
                    _ => collect_env_and_files(value, vars, files),
                }
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|item| collect_env_and_files(item, vars, files)),
        _ => {}
    }
}

/// A ledger next to the config in a checkout (the README's `state = "builder-monitor.db"`) leaves
/// nothing for `git status` to show: the database, its WAL files and its lock.
#[test]
fn the_ledgers_files_are_ignored_by_git() {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["builder-monitor.db", "builder-monitor.db-wal", "builder-monitor.db-shm", "builder-monitor.db.lock"] {
        let ignored = std::process::Command::new("git")
            .args(["check-ignore", "--quiet", "--no-index", file])
            .current_dir(root)
            .status()
            .expect("run git");
        assert!(ignored.success(), "{file} is not ignored by .gitignore");
    }
}

/// A `[server] listen` port another process holds is refused by `check`, naming the fix; while
/// this config's own daemon holds the ledger (and so the port), it is only a note.
#[test]
fn check_refuses_a_listen_port_another_process_holds() {
    let ws = Workspace::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[server]\nlisten = \"{addr}\"\n\n\
         [[builders]]\nname = \"b\"\nimage = \"127.0.0.1:1/demo/b:latest\"\n"
    ));
    let out = ws.run(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("[server] listen = \"{addr}\": another process holds that port")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("pick another port (0 picks a free one)"), "{}", out.stderr);
    drop(taken);
    let free = ws.run(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(free.code, Some(0), "{}", free.stderr);
}

/// The command list's lines fit a terminal: each command's one-liner is short, its details are
/// in its own `--help`.
#[test]
fn the_command_list_has_no_line_over_160_characters() {
    let ws = Workspace::new();
    let top = ws.run(&["--help"]);
    let long: Vec<&str> = top.stdout.lines().filter(|l| l.chars().count() > 160).collect();
    assert!(long.is_empty(), "{long:#?}");
    let freeze = ws.run(&["freeze", "--help"]);
    assert!(freeze.stdout.contains("checks, pins and alerts go on"), "{}", freeze.stdout);
    // Each command's `-h` too: an option's one-liner is short, its details in `--help`.
    for command in top.stdout.split("Commands:").nth(1).unwrap_or_default().lines().skip(1) {
        let Some(command) = command.split_whitespace().next().filter(|c| *c != "help") else { break };
        let short = ws.run(&[command, "-h"]);
        let long: Vec<&str> = short.stdout.lines().filter(|l| l.chars().count() > 200).collect();
        assert!(long.is_empty(), "{command} -h: {long:#?}");
    }
}

/// Every option of every command says what it is in `--help`: `--config` and `--json` too.
#[test]
fn every_option_has_help_text() {
    let ws = Workspace::new();
    let top = ws.run(&["--help"]);
    let commands: Vec<String> = top
        .stdout
        .split("Commands:")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() > 10, "{}", top.stdout);
    let mut bare = Vec::new();
    for command in &commands {
        let help = ws.run(&[command, "--help"]);
        let lines: Vec<&str> = help.stdout.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            // A long help goes on the lines below its flag, indented further.
            let indent = |l: &str| l.len() - l.trim_start().len();
            let below = lines.get(i + 1).is_some_and(|next| {
                !next.trim().is_empty() && indent(next) > indent(line) && !next.trim_start().starts_with('-')
            });
            // `--json`, `-x, --flag`, `--config <CONFIG>`: nothing after the flag is no help text.
            let flag_only = match words.as_slice() {
                [flag] => flag.starts_with("--"),
                [first, second] => {
                    (first.starts_with("--") && second.starts_with('<'))
                        || (first.starts_with('-') && first.ends_with(',') && second.starts_with("--"))
                }
                _ => false,
            };
            if flag_only && !below && !line.starts_with("Usage") {
                bare.push(format!("{command}: {}", line.trim()));
            }
        }
    }
    assert!(bare.is_empty(), "options without help text: {bare:#?}");
}

/// A daemon started without an API token refuses a write sent to it, saying how to give it one:
/// the command line's own config may name a token the daemon never had.
#[test]
fn a_daemon_without_a_token_says_to_restart_it_with_one() {
    let ws = Workspace::new();
    let base = "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n\
                [[builders]]\nname = \"b\"\nimage = \"127.0.0.1:1/demo/b:latest\"\nwatch_run_image = false\n";
    let config = ws.config(&format!("{base}\n[server]\nlisten = \"127.0.0.1:0\"\n"));
    let mut daemon = Daemon::start(&config);
    let addr = daemon.server_addr();
    let cli = ws.path("cli.toml");
    std::fs::write(&cli, format!("{base}\n[server]\nlisten = \"{addr}\"\napi_token_env = \"BM_CLI_TOKEN\"\n")).unwrap();
    let env = [("BM_CLI_TOKEN", "cli-token-0123456789abcdef")];
    let out = run_with_env(&["freeze", "--config", cli.to_str().unwrap()], &env, ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("answered HTTP 403: this daemon started without an API token"), "{}", out.stderr);
    assert!(out.stderr.contains("set [server] api_token_env in its config"), "{}", out.stderr);
    assert!(out.stderr.contains("then restart it"), "{}", out.stderr);
    let (status, _) = daemon.terminate();
    assert!(status.success(), "{status}");
}
