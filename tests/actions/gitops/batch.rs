//! `[[gitops]] batch`: the changes that land within the window of the first one become one
//! commit naming them all, a change after it a commit of its own, and a crash between the commit
//! and its push still pushes that one commit once. Time is the in-process daemon's manual clock;
//! the crash is the binary's, killed by a wrapped `git` at the push.

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

use super::{World, wrapped_git};

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
