//! builder-monitor: watches floating CNB builder tags, pins them to immutable digests, explains
//! each move and drives the right reaction (alerts, rebases, rebuilds).
// One audited exception: `runner::group::die_with_daemon`.
#![deny(unsafe_code)]

pub mod alert;
pub mod cluster;
pub mod config;
pub mod event_log;
pub mod inspect;
pub mod metrics;
pub mod monitor;
pub mod page;
pub mod registry;
pub mod runner;
pub mod schedule;
pub mod server;
pub mod status;
pub mod store;
