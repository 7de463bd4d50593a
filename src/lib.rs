//! builder-monitor: watches floating CNB builder tags, pins them to immutable digests, explains
//! each move and drives the right reaction (alerts, rebases, rebuilds).
// Two audited exceptions: `runner::group::die_with_daemon` and the `memory` module.
#![deny(unsafe_code)]

/// What every HTTP request of the daemon says it is (registries, alert receivers, OSV mirrors).
pub const USER_AGENT: &str = concat!("builder-monitor/", env!("CARGO_PKG_VERSION"));

/// Installs ring as rustls' process-wide provider (reqwest and kube both build TLS configs from
/// it). The binary calls it first thing; tests and the benchmark call it before any client.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub mod alert;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod deploy;
pub mod event_log;
pub mod inspect;
pub mod ledger;
pub mod log_stream;
pub mod memory;
pub mod metrics;
pub mod monitor;
pub mod page;
pub mod reaction;
pub mod rebase;
pub mod registry;
pub mod rights;
pub mod rollback;
pub mod rollout;
pub mod runner;
pub mod schedule;
pub mod server;
pub mod signing;
pub mod status;
pub mod vulns;
pub mod worker;
