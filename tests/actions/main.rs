//! Integration tests of the daemon's actions through the built binary: the exec runner's rebuilds
//! and rebases, roll-out control, registry rebases and Git write-back against real Git.
//!
//! Each file below was a test binary of its own; grouped, they compile `tests/support` and link the
//! crate once. They share one process and run as its threads: a test here changes no process state
//! (environment, working directory, signal handlers, a global subscriber, resource limits) and
//! measures only its children, never this process.

#[path = "../support/mod.rs"]
mod support;

mod cosign;
mod fleet_requests;
mod gitops;
mod openvex;
mod rebase_daemon;
mod referrers_orphans;
mod rollout;
mod runner;
mod signed;
mod signed_requests;
mod signing;
mod signing_planted;
mod signing_races;
