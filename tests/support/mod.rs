//! Real servers for integration tests: the CNCF Distribution registry, a bearer-token server, a
//! counting and fault-injecting proxy, an image pusher (and layered CNB app images), a runner for
//! the daemon binary, and headless Chromium.
#![allow(dead_code)]

pub mod api_recorder;
pub mod app;
pub mod browser;
pub mod cnb;
pub mod control_plane;
pub mod cosign;
pub mod daemon;
pub mod git;
pub mod images;
pub mod keys;
pub mod kube;
pub mod ledgers;
pub mod osv;
pub mod proxy;
pub mod receiver;
pub mod referrers_registry;
pub mod registry;
pub mod relay;
pub mod sigstore;
pub mod token;
pub mod tour;

use std::time::Duration;

/// How long a test waits for something that should happen quickly before failing loudly.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A reqwest client for test plumbing (plain HTTP on loopback).
pub fn http() -> reqwest::Client {
    builder_monitor::install_crypto_provider();
    reqwest::Client::builder().build().expect("test HTTP client")
}
