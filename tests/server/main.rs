//! Integration tests of the daemon's outward side: its HTTP server and API, alert delivery to real
//! receivers, outages, its log, secrets kept out of every output, SIGHUP reloads and `deploy` by
//! hand.
//!
//! Each file below was a test binary of its own; grouped, they compile `tests/support` and link the
//! crate once. They share one process and run as its threads: a test here changes no process state
//! (environment, working directory, signal handlers, a global subscriber, resource limits) and
//! measures only its children, never this process.

#[path = "../support/mod.rs"]
mod support;

mod alerts;
mod deploy_command;
mod log_stream;
mod logs;
mod memory;
mod outages;
mod reload;
mod secrets;
mod server;
mod server_hardening;
