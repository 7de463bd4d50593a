//! Integration tests against a real registry (the CNCF Distribution registry, started per test):
//! watching and pinning, registry rebases, explaining moves, OS packages, hostile images and
//! inputs, credential helpers and failing checks.
//!
//! Each file below was a test binary of its own; grouped, they compile `tests/support` and link the
//! crate once. They share one process and run as its threads: a test here changes no process state
//! (environment, working directory, signal handlers, a global subscriber, resource limits) and
//! measures only its children, never this process.

#[path = "../support/mod.rs"]
mod support;

mod bounded;
mod check_failures;
mod classify;
mod credential_helpers;
mod fixes;
mod hardening;
mod image;
mod listing;
mod online_check;
mod pace;
mod packages;
mod planted_signatures;
mod rebase;
mod signing;
mod watch;
