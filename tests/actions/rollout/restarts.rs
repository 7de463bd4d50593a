//! Roll-out state across a SIGKILL and a restart: each waiting state (awaiting approval, held,
//! frozen) kept, with the ledger in SQLite and in ConfigMaps, and a canary killed mid-run run again
//! before its wave; no command runs twice.

use super::*;

/// SIGKILL in each waiting state (a wave waiting on a canary that awaits approval, held, frozen),
/// then a restart: the same states, and no command runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_in_each_waiting_state_keeps_it_and_runs_nothing_twice() {
    sigkill_in_each_waiting_state_with(str::to_string).await;
}

/// The same with the ledger in ConfigMaps on the Kubernetes API double, where the command line
/// writes the shared ledger itself instead of asking the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_in_each_waiting_state_with_the_ledger_on_kubernetes() {
    let double = support::kube::KubeDouble::start().await;
    double.create_namespace("bm");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = double.kubeconfig(dir.path());
    sigkill_in_each_waiting_state_with(|text| {
        text.replace("state = \"state.db\"", "state = \"kubernetes\"")
            + &format!("\n[kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"bm\"\n", kubeconfig.display())
    })
    .await;
    assert!(!double.list("configmaps").is_empty(), "the ledger lived in the cluster");
}

/// SIGKILL in each waiting state, then a restart; `ledger_in(config)` moves the ledger elsewhere.
async fn sigkill_in_each_waiting_state_with(ledger_in: impl Fn(&str) -> String) {
    let w = World::new().await;
    let receiver = Receiver::start().await;
    let fleet = [
        ("petclinic", "policy = \"rebuild\"\nwave = 0\napprove = true"),
        ("web", "policy = \"rebuild\"\nwave = 1"),
        ("api", "policy = \"rebuild\"\nwave = 1"),
    ];
    let text = w
        .config(&fleet, "type = \"exec\"\nmax_concurrent = 4\nmax_attempts = 1", &server_and_alerts(&receiver))
        .replace("env = { RECORD_FILE", "env = { FAIL_IMAGE = \"petclinic\", RECORD_FILE");
    w.write(&ledger_in(&text));
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    w.move_builder("18.2.0").await;

    // Restarted after a SIGKILL, the daemon checks a few times; its state must not have moved.
    let restart = |daemon: Daemon| {
        daemon.kill();
        let mut daemon = w.daemon();
        let addr = daemon.server_addr();
        for _ in 0..3 {
            daemon.wait_for("a check", |v| v["message"] == "check done");
        }
        (daemon, addr)
    };

    // 1. The canary awaits approval; its wave waits on it.
    let mut daemon = w.daemon();
    daemon.wait_for_event("action.awaiting_approval");
    let expected = states(&[("petclinic", "awaiting_approval"), ("web", "waiting"), ("api", "waiting")]);
    assert_eq!(pending(&w.status()), expected);
    let (mut daemon, addr) = restart(daemon);
    let status = w.status();
    assert_eq!(pending(&status), expected, "{status:#}");
    assert_eq!(open(&status, "web")["gate"], "wave");
    assert!(calls(&w.record()).is_empty());
    let change = open(&status, "web")["change"].as_str().unwrap().to_string();

    // 2. Approved, the canary fails: its wave is held.
    let out = w.cli_with(&w.cli_config(&addr), &["approve", &change]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    daemon.wait_for("the canary to fail", |v| v["message"] == "action failed for good");
    receiver.wait_for_body("action.held").await;
    let expected = states(&[("web", "held"), ("api", "held")]);
    assert_eq!(pending(&w.status()), expected);
    let (daemon, addr) = restart(daemon);
    assert_eq!(pending(&w.status()), expected);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1)]));

    // 3. Frozen, then released: the wave waits on the freeze.
    let cli = w.cli_config(&addr);
    let out = w.cli_with(&cli, &["freeze", "--reason", "incident"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Sent by the daemon, whoever wrote the freeze.
    receiver.wait_for_body("rollout.frozen").await;
    let out = w.cli_with(&cli, &["release", &change]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Said as status says it: released, but still waiting on the freeze.
    assert!(out.stdout.contains("rebuild of web (now waiting: "), "{}", out.stdout);
    assert!(!out.stdout.contains("now pending"), "{}", out.stdout);
    let expected = states(&[("web", "waiting"), ("api", "waiting")]);
    assert_eq!(pending(&w.status()), expected);
    let (mut daemon, addr) = restart(daemon);
    let status = w.status();
    assert_eq!(pending(&status), expected, "{status:#}");
    assert_eq!(open(&status, "api")["gate"], "frozen");
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1)]));

    // Unfrozen: the wave runs, once.
    let out = w.cli_with(&w.cli_config(&addr), &["unfreeze"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for _ in 0..2 {
        daemon.wait_for("a rebuild of the wave", |v| v["message"] == "action succeeded");
    }
    let (code, _) = daemon.terminate();
    assert!(code.success());
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("petclinic", 1), ("web", 1), ("api", 1)]));
    let ends = calls(&w.record()).iter().filter(|c| c.phase == "end").count();
    assert_eq!(ends, 3);
    assert_eq!(pending(&w.status()), states(&[]));
}

/// SIGKILL while the canary runs: after the restart the canary's command runs again (a command
/// killed mid-run does, see tests/actions/runner.rs) and its wave still waits for it, then runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_the_canary_runs_its_wave_still_waits() {
    let w = World::new().await;
    let receiver = Receiver::start().await;
    let block = w.ws.path("block");
    let text = w
        .config(&FLEET, "type = \"exec\"\nmax_concurrent = 4", &server_and_alerts(&receiver))
        .replace("env = { RECORD_FILE", &format!("env = {{ BLOCK_FILE = \"{}\", RECORD_FILE", block.display()));
    w.write(&text);
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    std::fs::write(&block, "").unwrap();
    w.move_builder("18.2.0").await;

    let mut daemon = w.daemon();
    daemon.wait_for("the canary's command to be recorded", |v| v["message"] == "command started");
    let status = w.status();
    assert_eq!(pending(&status), states(&[("petclinic", "running"), ("web", "waiting"), ("api", "waiting")]));
    assert_eq!(open(&status, "web")["waiting_for"], "wave 1 waits for wave 0: petclinic running");
    daemon.kill();

    let mut daemon = w.daemon();
    daemon.wait_for("the canary to run again", |v| v["message"] == "command started");
    for _ in 0..3 {
        daemon.wait_for("a check", |v| v["message"] == "check done");
    }
    assert_eq!(pending(&w.status()), states(&[("petclinic", "running"), ("web", "waiting"), ("api", "waiting")]));
    assert_eq!(starts(&w.record()), count(&[("petclinic", 2)]), "the wave waits");

    std::fs::remove_file(&block).unwrap();
    for _ in 0..3 {
        daemon.wait_for("the canary, then its wave", |v| v["message"] == "action succeeded");
    }
    let (code, _) = daemon.terminate();
    assert!(code.success());
    assert_eq!(starts(&w.record()), count(&[("petclinic", 2), ("web", 1), ("api", 1)]));
    let all = calls(&w.record());
    let canary_end = all.iter().find(|c| c.phase == "end" && c.image() == "petclinic").unwrap().at;
    assert!(
        all.iter().filter(|c| c.phase == "start" && c.image() != "petclinic").all(|c| c.at >= canary_end),
        "{all:?}"
    );
    assert_eq!(all.iter().filter(|c| c.phase == "end").count(), 3, "each finished once: {all:?}");
}
