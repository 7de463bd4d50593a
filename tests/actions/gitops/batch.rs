//! `[[gitops]] batch`: the changes that land within the window of the first one become one
//! commit naming them all, a change after it a commit of its own, and a crash between the commit
//! and its push still pushes that one commit once. Time is the in-process daemon's manual clock;
//! the crash is the binary's, killed by a wrapped `git` at the push. Through the binary alone, on
//! the system's clock (it has no other), a batch of two moves that fix notices of an OSV mirror is
//! shown waiting by `status`, then committed once its shortest window (1m) has passed: one commit
//! listing both changes and both notices, in its body and its `Builder-Monitor-Fixes` trailer.

use std::sync::Arc;
use std::time::Duration;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::monitor::Monitor;
use builder_monitor::runner::Runner;
use builder_monitor::schedule::Clock;
use builder_monitor_core::gitops::changes_in;
use tokio_util::sync::CancellationToken;

use super::fixes::{parsed_trailers, push_listed_run};
use super::{World, git, support, wrapped_git};
use serde_json::Value;
use support::daemon::Daemon;

const HOUR: Duration = Duration::from_secs(3600);

/// The daemon's parts in this process, on `clock`, with `batch = "1h"` added to the target.
struct InProcess {
    monitor: Arc<Monitor>,
    runner: Arc<Runner>,
}

fn assemble(w: &World, clock: Clock) -> InProcess {
    let path = w.config();
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("name = \"fleet\"\n", "name = \"fleet\"\nbatch = \"1h\"\n");
    assert!(text.contains("batch = \"1h\""));
    std::fs::write(&path, &text).unwrap();
    let config = Arc::new(Config::parse(&path, &text).unwrap_or_else(|e| panic!("{e}")));
    let ledger = Ledger::open(&w.ws.path("state.db")).unwrap();
    let monitor = Parts::new(config.clone(), ledger.clone(), clock.clone(), None).unwrap().monitor;
    let backend =
        builder_monitor::runner::Backends::for_config(&config, None.into(), CancellationToken::new()).unwrap();
    let runner = Arc::new(Runner::new(config, ledger, clock, backend));
    InProcess { monitor, runner }
}

impl InProcess {
    /// A run image move, checked and its rebases run: its gitops action waits.
    async fn move_run_image(&self, w: &mut World) {
        w.move_run_image().await;
        assert!(self.monitor.run_once().await);
        self.runner.run_due_once().await;
    }
}

/// Two run image moves within the window: their rebases run at once, and one commit names both
/// changes, once the window of the first has passed; a third after it is a second commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_within_the_window_are_one_commit_and_a_later_one_another() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    let clock = Clock::manual(chrono::Utc::now());
    let d = assemble(&w, clock.clone());
    d.move_run_image(&mut w).await;
    clock.advance(Duration::from_secs(20 * 60));
    d.move_run_image(&mut w).await;
    assert!(w.commits().is_empty(), "nothing is committed within the window");
    let (web, api) = (w.tag("web").await, w.tag("api").await);

    clock.advance(Duration::from_secs(39 * 60));
    assert_eq!(d.runner.run_due_once().await, 0, "59 minutes after the first change: still waiting");
    clock.advance(Duration::from_secs(60));
    assert_eq!(d.runner.run_due_once().await, 1);
    let commits = w.commits();
    assert_eq!(commits.len(), 1, "{commits:#?}");
    let message = &commits[0].1;
    let actions = w.gitops_actions().await;
    let changes: Vec<String> = actions.iter().map(|a| a.change.clone()).collect();
    assert_eq!(changes.len(), 2, "{actions:#?}");
    assert_eq!(changes_in(message), changes, "{message}");
    assert!(message.starts_with("2 changes: "), "{message}");
    assert!(message.contains(&web) && message.contains(&api), "the newest digests: {message}");
    let states: Vec<ActionState> = actions.iter().map(|a| a.state).collect();
    assert_eq!(states, [ActionState::Superseded, ActionState::Succeeded]);

    // After the window: a change of its own, in a second commit.
    d.move_run_image(&mut w).await;
    assert_eq!(w.commits().len(), 1);
    clock.advance(HOUR);
    assert_eq!(d.runner.run_due_once().await, 1);
    let commits = w.commits();
    assert_eq!(commits.len(), 2, "{commits:#?}");
    let third = w.gitops_actions().await.last().unwrap().change.clone();
    assert_eq!(changes_in(&commits[0].1), [third]);
    assert!(!commits[0].1.contains("changes: "), "{}", commits[0].1);
}

/// A batch's commit recorded, the daemon killed at its push: the next run pushes that batch, one
/// commit naming both changes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_a_batchs_commit_and_its_push_pushes_it_once() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    let clock = Clock::manual(chrono::Utc::now());
    {
        let d = assemble(&w, clock.clone());
        d.move_run_image(&mut w).await;
        clock.advance(Duration::from_secs(10 * 60));
        d.move_run_image(&mut w).await;
        assert_eq!(d.runner.run_due_once().await, 0, "within the window");
    }
    assert!(w.commits().is_empty());
    // The window passes for the binary, which runs on the system's clock (the in-process one
    // cannot be killed by a child without killing the test): its deadline is moved to now.
    let db = rusqlite::Connection::open(w.ws.path("state.db")).unwrap();
    let moved = db
        .execute(
            "UPDATE actions SET next_attempt = '2000-01-01T00:00:00.000Z' WHERE kind = 'gitops' AND state = 'pending'",
            [],
        )
        .unwrap();
    assert_eq!(moved, 1, "one action waits for both changes");
    drop(db);
    let path = wrapped_git(w.ws.dir.path(), "kill -9 $PPID", "");
    let out = w.once(&[("PATH", &path)]);
    assert_ne!(out.code, Some(0), "killed: {}", out.stderr);
    assert!(w.commits().is_empty(), "killed before the push");
    let actions = w.gitops_actions().await;
    let running = actions.last().unwrap();
    assert_eq!(running.state, ActionState::Running, "{actions:#?}");
    let recorded = running.progress.as_ref().and_then(|p| p.gitops()).and_then(|p| p.commit.clone());
    assert!(recorded.is_some(), "the commit was recorded before the push: {actions:#?}");

    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let commits = w.commits();
    assert_eq!(commits.len(), 1, "{commits:#?}");
    let actions = w.gitops_actions().await;
    let changes: Vec<String> = actions.iter().map(|a| a.change.clone()).collect();
    assert_eq!(changes.len(), 2, "{actions:#?}");
    assert_eq!(changes_in(&commits[0].1), changes, "{}", commits[0].1);
    assert_eq!(actions.last().unwrap().state, ActionState::Succeeded, "{actions:#?}");
    // Nothing left to push: a run more adds no commit.
    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.commits().len(), 1);
}

/// Two run image moves within `batch = "1m"`, each fixing a notice of the mirror: `status` shows
/// the batch waiting (both changes, their fixes, when it commits); the running daemon commits it
/// when the window has passed, as one commit listing both changes and both ids; nothing after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_through_the_binary_lists_every_change_and_fix_in_one_commit() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    support::osv::write_mirror(
        &w.ws.path("mirror"),
        &[("CVE-2026-8101", "medium", "3.0.2-0ubuntu1.16"), ("CVE-2026-8102", "high", "3.0.2-0ubuntu1.17")],
    );
    let mut text = std::fs::read_to_string(w.config()).unwrap();
    text += &format!("\n[vulnerabilities]\nosv = \"{}\"\n", w.ws.path("mirror").display());
    std::fs::write(w.config(), &text).unwrap();
    // A listed run image first (from the unlisted one nothing can be matched), committed alone.
    push_listed_run(&mut w, "3.0.2-0ubuntu1.15").await;
    assert_eq!(w.once(&[]).code, Some(0));
    assert_eq!(w.commits().len(), 1);
    let text = text.replace("name = \"fleet\"\n", "name = \"fleet\"\nbatch = \"1m\"\n");
    std::fs::write(w.config(), &text).unwrap();
    for openssl in ["3.0.2-0ubuntu1.16", "3.0.2-0ubuntu1.17"] {
        push_listed_run(&mut w, openssl).await;
        let out = w.once(&[]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    assert_eq!(w.commits().len(), 1, "the two moves wait for the window");
    // The first move's action superseded by the second's, which waits (`created` has whole
    // seconds: the states tell them apart, not their order).
    let actions = w.gitops_actions().await;
    let of = |state| actions.iter().filter(move |a| a.state == state);
    let (first, second) =
        (of(ActionState::Superseded).collect::<Vec<_>>(), of(ActionState::Pending).collect::<Vec<_>>());
    assert_eq!((first.len(), second.len()), (1, 1), "{actions:#?}");
    let batched = [first[0].change.clone(), second[0].change.clone()];
    let next_attempt = second[0].next_attempt;

    // `status --json` and its text: the batch, its changes with their fixes, and when it commits.
    let status = w.ws.run(&["status", "--json", "--config", w.config().to_str().unwrap()]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let batch = &status["gitops"][0]["batch"];
    let shown: Vec<(&str, &str)> = batch["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("{status:#}"))
        .iter()
        .map(|c| (c["change_id"].as_str().unwrap(), c["fixes"][0]["id"].as_str().unwrap()))
        .collect();
    assert_eq!(shown, [(batched[0].as_str(), "CVE-2026-8101"), (batched[1].as_str(), "CVE-2026-8102")], "{batch:#}");
    let commits_at = batch["commits_at"].as_str().unwrap();
    assert_eq!(commits_at, builder_monitor_core::schedule::timestamp_millis(next_attempt));
    let text = w.ws.run(&["status", "--config", w.config().to_str().unwrap()]).stdout;
    assert!(text.contains(&format!("    batch of 2 changes commits at {commits_at}:\n")), "{text}");
    assert!(text.contains(&format!("      {}: run image of jammy: ", batched[0])), "{text}");
    assert!(text.contains(&format!("      {}: run image of jammy: ", batched[1])), "{text}");
    assert!(text.contains("; fixes CVE-2026-8102 (high)\n"), "each change's summary says what it fixes: {text}");

    // The daemon, on the system's clock, commits once the window has passed: awaited, not slept.
    let mut daemon = Daemon::start(&w.config());
    daemon
        .wait_longer("the batch's commit", Duration::from_secs(150), |v| {
            v["target"] == "builder_monitor_core::event" && v["event_type"] == "gitops.committed"
        })
        .unwrap_or_else(|status| panic!("the daemon exited ({status}): {}", daemon.log.join("\n")));
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let commits = w.commits();
    assert_eq!(commits.len(), 2, "{commits:#?}");
    let message = git(&w.remote.bare, &["log", "-1", "--format=%B", &commits[0].0]);
    assert_eq!(changes_in(&message), batched, "{message}");
    assert!(message.starts_with("2 changes: "), "{message}");
    assert!(
        message.contains("- CVE-2026-8102 (high): ") && message.contains("- CVE-2026-8101 (medium): "),
        "{message}"
    );
    let trailers = parsed_trailers(&message);
    assert!(trailers.lines().any(|l| l == "Builder-Monitor-Fixes: CVE-2026-8102, CVE-2026-8101"), "{trailers}");

    // Exactly once: nothing waits any more, and a run after the window adds no commit.
    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.commits().len(), 2);
    let actions = w.gitops_actions().await;
    let state = |change: &str| actions.iter().find(|a| a.change == change).map(|a| a.state);
    assert_eq!(state(&batched[0]), Some(ActionState::Superseded), "{actions:#?}");
    assert_eq!(state(&batched[1]), Some(ActionState::Succeeded), "{actions:#?}");
    assert!(actions.iter().all(|a| a.state != ActionState::Pending), "{actions:#?}");
    let status = w.ws.run(&["status", "--json", "--config", w.config().to_str().unwrap()]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert!(status["gitops"][0]["batch"].is_null(), "{status:#}");
}
