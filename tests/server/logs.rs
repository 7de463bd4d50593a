//! The daemon's log as an operator reads it (issue 28, item 4), through the real binary at
//! `BUILDER_MONITOR_LOG=debug` (so the test can await DEBUG lines) while counting only the lines
//! at INFO and above: a registry outage under 51 watches is one line when it starts and one when it
//! ends, a missing tag one WARN and one INFO, a move one INFO line.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;

use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::proxy::Proxy;
use support::registry::TestRegistry;

const WATCHES: usize = 51;
/// At most this many lines at INFO and above from an outage's start to its end.
const OUTAGE_LINES: usize = 10;

fn start(config: &Path) -> Daemon {
    Daemon::start_with_env(config, &[("BUILDER_MONITOR_LOG", "debug")])
}

fn parsed(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_default()
}

/// Lines at INFO and above (the ones an operator reads), as `LEVEL message {fields}`.
fn loud(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| parsed(l))
        .filter(|v| matches!(v["level"].as_str(), Some("INFO" | "WARN" | "ERROR")))
        .map(|v| format!("{} {} {}", v["level"].as_str().unwrap(), v["message"].as_str().unwrap_or("?"), v))
        .collect()
}

fn message(v: &serde_json::Value) -> &str {
    v["message"].as_str().unwrap_or_default()
}

/// Waits until every one of `names` has logged at least `times` lines with message `wanted` (at
/// any level), and returns how many each did.
fn await_each(daemon: &mut Daemon, wanted: &str, names: &[String], times: usize) -> BTreeMap<String, usize> {
    let mut seen: BTreeMap<String, usize> = names.iter().map(|n| (n.clone(), 0)).collect();
    while seen.values().any(|n| *n < times) {
        let behind: Vec<&String> = seen.iter().filter(|(_, n)| **n < times).map(|(w, _)| w).collect();
        let what = format!("{wanted:?} {times} times from each of {behind:?}");
        let line = daemon.wait_for(&what, |v| message(v) == wanted && v["watch"].is_string());
        if let Some(n) = seen.get_mut(line["watch"].as_str().unwrap()) {
            *n += 1;
        }
    }
    seen
}

/// 51 builders of one registry behind the proxy, checked every second, all pinned.
async fn pinned_fleet() -> (TestRegistry, Proxy, Workspace, Daemon, Vec<String>) {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let proxy = Proxy::start(&registry.host).await;
    let ws = Workspace::new();
    // A hung request gives up after `timeout`; five unanswered open the registry's circuit.
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n[registries.\"{}\"]\nbackoff = \"10ms\"\nmax_attempts = 2\ntimeout = \"300ms\"\nrequests_per_second = 0\n\n",
        proxy.host
    );
    let names: Vec<String> = (0..WATCHES).map(|i| format!("b{i:02}")).collect();
    for name in &names {
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &Image::new("amd64").salt(name), Format::Oci).await;
        text += &format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{}/demo/{name}:latest\"\nwatch_run_image = false\n",
            proxy.host
        );
    }
    let mut daemon = start(&ws.config(&text));
    let pinned = await_each_event(&mut daemon, "builder.pinned", &names);
    assert_eq!(pinned, names.len());
    (registry, proxy, ws, daemon, names)
}

/// Waits for one `event_type` event about each of `names`; how many builders it saw.
fn await_each_event(daemon: &mut Daemon, event_type: &str, names: &[String]) -> usize {
    let mut left: std::collections::BTreeSet<&String> = names.iter().collect();
    while !left.is_empty() {
        let line = daemon.wait_for(&format!("{event_type} of {} more", left.len()), |v| {
            v["target"] == "builder_monitor_core::event" && v["event_type"] == event_type
        });
        left.retain(|n| line["builder"].as_str() != Some(n.as_str()));
    }
    names.len()
}

/// Takes the fleet's registry down with `down`, waits until every watch failed twice, brings it
/// back with `up`, waits for every recovery and the outage's end: at most `OUTAGE_LINES` lines at
/// INFO and above from the outage's start to its end, one WARN saying it started and one INFO
/// saying it ended. Returns the daemon's log from the outage's start.
async fn outage(down: impl FnOnce(&Proxy), up: impl FnOnce(&Proxy)) -> Vec<String> {
    let (_registry, proxy, _ws, mut daemon, names) = pinned_fleet().await;
    let from = daemon.log.len();
    down(&proxy);
    let failed = await_each(&mut daemon, "check failed; pin kept", &names, 2);
    let checks: usize = failed.values().sum();
    up(&proxy);
    await_each(&mut daemon, "check recovered", &names, 1);
    let loud_so_far = loud(&daemon.log[from..]);
    assert!(
        loud_so_far.len() <= OUTAGE_LINES,
        "{} lines at INFO and above for {checks} failed checks of {WATCHES} watches:\n{}",
        loud_so_far.len(),
        loud_so_far.join("\n")
    );
    daemon.wait_for("the outage's end", |v| message(v).starts_with("registry recovered") && v["level"] == "INFO");
    let lines = loud(&daemon.log[from..]);
    println!(
        "{checks} failed checks of {WATCHES} watches, {} lines at INFO and above:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(lines.len() <= OUTAGE_LINES, "{} lines:\n{}", lines.len(), lines.join("\n"));
    let starts: Vec<&String> = lines.iter().filter(|l| l.starts_with("WARN registry unavailable")).collect();
    assert_eq!(starts.len(), 1, "one line says it started:\n{}", lines.join("\n"));
    assert!(starts[0].contains("registry_unavailable"), "{}", starts[0]);
    assert!(!lines.iter().any(|l| l.contains("check failed; pin kept") || l.contains("check recovered")), "{lines:?}");
    let end = daemon.log[from..].iter().map(|l| parsed(l)).find(|v| message(v).starts_with("registry recovered"));
    assert_eq!(end.unwrap()["watches"], WATCHES, "the end counts the watches that failed");
    daemon.log.split_off(from)
}

// The binary runs while the in-process proxy answers it: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_answering_503_under_51_watches_logs_its_outage_not_each_watch() {
    let log = outage(|p| p.down(Some(503)), |p| p.down(None)).await;
    let retries = log.iter().map(|l| parsed(l)).filter(|v| message(v) == "request failed; retrying").count();
    assert!(retries > 0, "each check's retry, at DEBUG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_not_answering_under_51_watches_logs_its_outage_not_each_watch_or_its_circuit() {
    let log = outage(|p| p.hang(true), |p| p.hang(false)).await;
    // The registry's circuit opened and closed, at DEBUG: the outage's lines say it.
    for circuit in ["registry does not answer; circuit open", "registry answers again; circuit closed"] {
        let line = log.iter().map(|l| parsed(l)).find(|v| message(v).starts_with(circuit));
        assert_eq!(line.unwrap_or_default()["level"], "DEBUG", "{circuit}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_tag_logs_one_warn_however_many_checks_fail_and_one_info_when_it_appears() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n[[builders]]\nname = \"gone\"\nimage = \"{}/demo/gone:latest\"\nwatch_run_image = false\n",
        registry.host
    ));
    let mut daemon = start(&config);
    let gone = ["gone".to_string()];
    await_each(&mut daemon, "check failed; pin kept", &gone, 4);
    pusher.push_image("demo/gone", Some("latest"), &Image::new("amd64").salt("back"), Format::Oci).await;
    await_each(&mut daemon, "check recovered", &gone, 1);

    let of = |wanted: &str| -> Vec<String> {
        let level = |v: &serde_json::Value| v["level"].as_str().unwrap_or_default().to_string();
        daemon.log.iter().map(|l| parsed(l)).filter(|v| message(v) == wanted).map(|v| level(&v)).collect()
    };
    let failed = of("check failed; pin kept");
    assert!(failed.len() >= 4, "{failed:?}");
    assert_eq!(failed[0], "WARN", "the first failure warns: {failed:?}");
    assert!(failed[1..].iter().all(|l| l == "DEBUG"), "the others are DEBUG: {failed:?}");
    assert_eq!(of("check recovered"), ["INFO"]);
    let lines = loud(&daemon.log);
    let warnings: Vec<&String> = lines.iter().filter(|l| !l.starts_with("INFO")).collect();
    assert_eq!(warnings.len(), 1, "{}", lines.join("\n"));
    assert!(warnings[0].contains("tag_missing"), "{}", warnings[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_a_builder_with_three_app_images_is_one_info_line() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let run_image = format!("{}/demo/run:latest", registry.host);
    pusher.push_image("demo/run", Some("latest"), &Image::new("amd64").salt("run"), Format::Oci).await;
    let v1 = BuilderSpec::jammy(&run_image);
    pusher.push_image("demo/builder", Some("latest"), &v1.image(), Format::Oci).await;
    let ws = Workspace::new();
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n[[builders]]\nname = \"b\"\nimage = \"{}/demo/builder:latest\"\nwatch_run_image = false\n",
        registry.host
    );
    for n in 1..=3 {
        text += &format!(
            "\n[[images]]\nname = \"app-{n}\"\nbuilder = \"b\"\nimage = \"{}/apps/app-{n}:latest\"\npolicy = \"rebuild\"\n",
            registry.host
        );
    }
    let mut daemon = start(&ws.config(&text));
    daemon.wait_for_event("builder.pinned");
    let from = daemon.log.len();
    pusher
        .push_image("demo/builder", Some("latest"), &v1.bump("paketo-buildpacks/go", "4.15.0").image(), Format::Oci)
        .await;
    daemon.wait_for_event("builder.changed");

    let move_lines = &daemon.log[from..];
    let lines = loud(move_lines);
    assert_eq!(lines.len(), 1, "one line at INFO and above for the move:\n{}", lines.join("\n"));
    let line = &lines[0];
    assert!(
        line.starts_with("INFO builder.changed b: ") && line.contains("paketo-buildpacks/go 4.14.0 → 4.15.0"),
        "{line}"
    );
    assert!(line.contains("; planned: rebuild app-1, rebuild app-2, rebuild app-3"), "{line}");
    let debug = |wanted: &str| {
        move_lines.iter().map(|l| parsed(l)).filter(|v| message(v) == wanted && v["level"] == "DEBUG").count()
    };
    assert_eq!((debug("moved"), debug("planned")), (1, 3), "the details at DEBUG");
}
