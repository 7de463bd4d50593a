//! Integration tests of what a person meets outside the daemon's loops: the CLI, the offline tour,
//! the Helm chart, the status page in a real Chromium, the configuration reference and the module
//! map.
//!
//! Each file below was a test binary of its own; grouped, they compile `tests/support` and link the
//! crate once. They share one process and run as its threads: a test here changes no process state
//! (environment, working directory, signal handlers, a global subscriber, resource limits) and
//! measures only its children, never this process.

#[path = "../support/mod.rs"]
mod support;

mod binary;
mod chart;
mod cli;
mod dpkg_versions;
mod markdown;
mod module_layers;
mod operator;
mod page;
mod reference;
mod signing;
mod tour;
mod vulns;
