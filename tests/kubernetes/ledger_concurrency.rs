//! Concurrent use of one SQLite ledger by real processes: simultaneous opens, read-only readers,
//! one writer per ledger, read commands without the daemon's secrets, and all of it at once.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use builder_monitor::ledger::Ledger;
use support::daemon::{Daemon, Output, Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

/// A daemon config: one builder at `host`, the ledger at `state/ledger.db`.
fn config_text(host: &str) -> String {
    format!(
        "[monitor]\ninterval = \"1h\"\njitter = \"0s\"\nstate = \"state/ledger.db\"\n\n[[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n"
    )
}

/// Port 1 on loopback refuses connections at once: a registry that is never there.
const NO_REGISTRY: &str = "127.0.0.1:1";

fn run(ws: &Workspace, args: &[&str]) -> Output {
    run_with_env(args, &[], ws.dir.path())
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap()
}

fn set_user_version(path: &Path, version: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "user_version", version).unwrap();
}

fn no_ledger_message(ledger: &Path) -> String {
    format!("error: no ledger at {} yet: the daemon creates it on its first start", ledger.display())
}

fn is_refusal(line: &str, ledger: &Path) -> bool {
    let prefix = format!("error: the ledger {} is in use by another builder-monitor daemon (pid ", ledger.display());
    line.starts_with(&prefix)
        && line.contains(" on host ")
        && line.contains(" since 20")
        && line.ends_with("); only one `run` or `run --once` may write a ledger at a time")
}

// 1 ----------------------------------------------------------------------------------------------

#[test]
fn simultaneous_opens_of_a_fresh_ledger_all_succeed() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let start = Arc::new(Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    Ledger::open(&path).map(drop).map_err(|e| e.to_string())
                })
            })
            .collect();
        let results: Vec<Result<(), String>> = openers.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert!(user_version(&path) >= 2);
    }
}

// 2 ----------------------------------------------------------------------------------------------

#[test]
fn read_commands_open_the_ledger_read_only_and_never_create_or_migrate_it() {
    let ws = Workspace::new();
    let config = ws.config(&config_text(NO_REGISTRY));
    let config = config.to_str().unwrap();
    let state = ws.path("state");
    let ledger = state.join("ledger.db");

    for args in
        [&["status", "--json", "--config", config][..], &["status", "--config", config], &["plan", "--config", config]]
    {
        let out = run(&ws, args);
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.trim(), no_ledger_message(&ledger), "{args:?}");
        assert!(!state.exists(), "{args:?} created {}", state.display());
    }

    // A ledger its daemon closed cleanly: read as it is, nothing created beside it.
    drop(Ledger::open(&ledger).unwrap());
    let before = listing(&state);
    assert_eq!(before, ["ledger.db"]);
    for args in [&["status", "--json", "--config", config][..], &["plan", "--config", config]] {
        let out = run(&ws, args);
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
        assert_eq!(listing(&state), before, "{args:?} created files");
    }

    // A ledger a writer has open: read through its WAL.
    let writer = Ledger::open(&ledger).unwrap();
    let out = run(&ws, &["status", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    drop(writer);

    // An older schema is not migrated by a reader.
    set_user_version(&ledger, 1);
    let out = run(&ws, &["status", "--config", config]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("has schema version 1, older than this builder-monitor's"), "{}", out.stderr);
    assert!(out.stderr.contains("start the daemon (`run`), which migrates it"), "{}", out.stderr);
    assert_eq!(user_version(&ledger), 1, "status migrated the ledger");

    // A newer one is named, not touched.
    set_user_version(&ledger, 99);
    let out = run(&ws, &["plan", "--config", config]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("has schema version 99, newer than this builder-monitor understands ("),
        "{}",
        out.stderr
    );
    assert_eq!(user_version(&ledger), 99);
}

// 3 ----------------------------------------------------------------------------------------------

#[test]
fn a_second_writer_is_refused_naming_the_holder() {
    let ws = Workspace::new();
    let config = ws.config(&config_text(NO_REGISTRY));
    let ledger = ws.path("state/ledger.db");
    let mut daemon = Daemon::start(&config);
    daemon.wait_for("start-up", |v| v["message"] == "builder-monitor starting");
    let config = config.to_str().unwrap();

    let holder = format!("(pid {} on host ", daemon.pid());
    for args in [&["run", "--once", "--config", config][..], &["run", "--config", config]] {
        let out = run(&ws, args);
        assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        assert!(is_refusal(out.stderr.trim(), &ledger), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(&holder), "{args:?} names the daemon: {}", out.stderr);
    }
    let text = std::fs::read_to_string(ws.path("state/ledger.db.lock")).unwrap();
    let lock: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(lock["pid"], daemon.pid());
    assert!(daemon.running(), "the refusals left the daemon alone");

    let (status, _) = daemon.terminate();
    assert!(status.success(), "{status:?}");
    // Released with the daemon: the next writer runs (its check fails: there is no registry).
    let out = run(&ws, &["run", "--once", "--config", config]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(!out.stderr.contains("in use by another"), "{}", out.stderr);
    assert!(out.stderr.contains("registry unavailable"), "{}", out.stderr);
}

// 7 ----------------------------------------------------------------------------------------------

#[tokio::test]
async fn read_commands_need_none_of_the_daemons_secrets() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let ws = Workspace::new();
    let text = format!(
        "{}\n[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_LC_TEST_TOKEN\"\n\n[registries.\"{}\"]\nusername = \"u\"\npassword_env = \"BM_LC_TEST_PASSWORD\"\n\n[[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl_env = \"BM_LC_TEST_URL\"\nsecret_env = \"BM_LC_TEST_SECRET\"\n",
        config_text(&registry.host),
        registry.host
    );
    let config = ws.config(&text);
    let config = config.to_str().unwrap();
    drop(Ledger::open(&ws.path("state/ledger.db")).unwrap());

    for args in [
        &["status", "--json", "--config", config][..],
        &["status", "--config", config],
        &["plan", "--config", config],
        &["rbac", "--config", config],
    ] {
        let out = run(&ws, args);
        assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    }
    // resolve and diff talk to registries: theirs are resolved, nothing else.
    let image = format!("{}/demo/builder:latest", registry.host);
    let password = [("BM_LC_TEST_PASSWORD", "p")];
    let out = run_with_env(&["resolve", &image, "--json", "--config", config], &password, ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = run(&ws, &["resolve", &image, "--config", config]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("environment variable BM_LC_TEST_PASSWORD is not set"), "{}", out.stderr);
    // The commands that use the secrets still demand them, and `check` validates for the daemon.
    for args in [
        &["check", "--config", config][..],
        &["run", "--once", "--config", config],
        &["alert", "test", "--name", "hook", "--config", config],
    ] {
        let out = run(&ws, args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        for variable in ["BM_LC_TEST_TOKEN", "BM_LC_TEST_PASSWORD", "BM_LC_TEST_URL", "BM_LC_TEST_SECRET"] {
            assert!(
                out.stderr.contains(&format!("environment variable {variable} is not set")),
                "{args:?}: {}",
                out.stderr
            );
        }
    }
}

// all at once ------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Role {
    Daemon,
    Once,
    Status,
    Plan,
}

enum Finished {
    Daemon(Daemon),
    OneShot(Output),
}

/// What a refused or failed process printed: its `error:` lines and its log lines at WARN or above.
fn complaints(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.starts_with("error:") || l.contains("WARN") || l.contains("ERROR") || l.contains("\"level\":\"ERROR\"")
        })
        .collect()
}

/// 8 processes started at the same moment against one fresh ledger, 20 times: each succeeds or
/// fails with exactly the documented refusal or "no ledger yet", the ledger stays intact, one
/// writer records the pin once, and a daemon that won the lock runs on unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_at_once_on_a_fresh_ledger() {
    let registry = TestRegistry::start();
    let pushed =
        Pusher::new(&registry.host).push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let roles =
        [Role::Daemon, Role::Daemon, Role::Once, Role::Once, Role::Status, Role::Status, Role::Plan, Role::Plan];
    let (mut daemons_that_ran, mut reads, mut too_early) = (0, 0, 0);
    for round in 0..20 {
        let ws = Workspace::new();
        let config: PathBuf = ws.config(&config_text(&registry.host));
        let ledger = ws.path("state/ledger.db");
        let start = Arc::new(Barrier::new(roles.len()));
        let processes: Vec<_> = roles
            .iter()
            .map(|&role| {
                let (config, start, cwd) = (config.clone(), start.clone(), ws.dir.path().to_path_buf());
                std::thread::spawn(move || {
                    let config = config.to_str().unwrap();
                    start.wait();
                    match role {
                        Role::Daemon => Finished::Daemon(Daemon::start(Path::new(config))),
                        Role::Once => {
                            Finished::OneShot(run_with_env(&["run", "--once", "--config", config], &[], &cwd))
                        }
                        Role::Status => {
                            Finished::OneShot(run_with_env(&["status", "--json", "--config", config], &[], &cwd))
                        }
                        Role::Plan => Finished::OneShot(run_with_env(&["plan", "--config", config], &[], &cwd)),
                    }
                })
            })
            .collect();
        let finished: Vec<(Role, Finished)> =
            roles.iter().copied().zip(processes.into_iter().map(|t| t.join().unwrap())).collect();

        let mut running = Vec::new();
        for (role, finished) in finished {
            match finished {
                Finished::OneShot(out) => {
                    let complaints = complaints(&out.stderr);
                    match out.code {
                        Some(0) => {
                            assert!(complaints.is_empty(), "round {round} {role:?}: {}", out.stderr);
                            reads += matches!(role, Role::Status | Role::Plan) as u32;
                        }
                        Some(1) => {
                            let documented = complaints.first().is_some_and(|line| match role {
                                Role::Once => is_refusal(line, &ledger),
                                _ => *line == no_ledger_message(&ledger),
                            });
                            assert!(complaints.len() == 1 && documented, "round {round} {role:?}: {}", out.stderr);
                            too_early += matches!(role, Role::Status | Role::Plan) as u32;
                        }
                        other => panic!("round {round} {role:?} exited {other:?}: {}", out.stderr),
                    }
                }
                Finished::Daemon(mut daemon) => {
                    match daemon.wait_for_or_exit("its first check", |v| v["message"] == "check done") {
                        Ok(check) => {
                            let outcome = check["outcome"].as_str().unwrap_or_default();
                            assert!(outcome.starts_with("Pinned") || outcome == "Unchanged", "round {round}: {check}");
                            running.push(daemon);
                        }
                        Err(status) => {
                            let log = daemon.log.join("\n");
                            assert_eq!(status.code(), Some(1), "round {round}: {log}");
                            let complaints = complaints(&log);
                            let refused = complaints.first().is_some_and(|line| is_refusal(line, &ledger));
                            assert!(complaints.len() == 1 && refused, "round {round}: {log}");
                        }
                    }
                }
            }
        }
        assert!(running.len() <= 1, "round {round}: two daemons run on one ledger");
        if let Some(mut daemon) = running.pop() {
            daemons_that_ran += 1;
            assert!(daemon.running(), "round {round}: the daemon died");
            let out = run(&ws, &["status", "--json", "--config", config.to_str().unwrap()]);
            assert_eq!(out.code, Some(0), "round {round}: {}", out.stderr);
            let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
            assert_eq!(status["builders"][0]["pinned"]["digest"], pushed.digest, "round {round}");
            let (exit, log) = daemon.terminate();
            assert!(exit.success(), "round {round}: {exit:?}\n{}", log.join("\n"));
        }

        let conn = rusqlite::Connection::open(&ledger).unwrap();
        let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        assert_eq!(integrity, "ok", "round {round}");
        drop(conn);
        let events = Ledger::open(&ledger).unwrap().events_after(0, 100).await.unwrap();
        let pinned = events.iter().filter(|e| e.event.event_type.to_string() == "builder.pinned").count();
        assert_eq!(pinned, 1, "round {round}: one writer pinned the builder once");
    }
    // Not conditions of the test (which process wins is a race), but worth seeing.
    eprintln!("a daemon won the lock in {daemons_that_ran} of 20 rounds; {reads} reads, {too_early} before the ledger");
}
