//! The offline tour: a local registry with a CNB builder, its run image and two apps, the daemon
//! watching them, and the moves it reacts to. Run it with `scripts/tour`, which builds the daemon
//! and this example and passes the daemon's path. The tour itself lives beside the tests that
//! check it (`tests/support/tour.rs`, `tests/cli/tour.rs`); this file only gives it a command line.

// The tour and the test parts it is made of, as the tests have them (their `super::` is this root).
#![allow(dead_code)]

use std::time::Duration;

pub const PATIENCE: Duration = Duration::from_secs(30);

pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub fn http() -> reqwest::Client {
    builder_monitor::install_crypto_provider();
    reqwest::Client::builder().build().expect("HTTP client")
}

#[path = "../tests/support/app.rs"]
mod app;
#[path = "../tests/support/cnb.rs"]
mod cnb;
#[path = "../tests/support/images.rs"]
mod images;
#[path = "../tests/support/receiver.rs"]
mod receiver;
#[path = "../tests/support/registry.rs"]
mod registry;
#[path = "../tests/support/tour.rs"]
mod tour;

const USAGE: &str = "usage: tour --bin PATH/TO/builder-monitor [--dir DIR] [--exit]";

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut bin, mut dir, mut stay) = (None, None, true);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bin" => bin = args.next().map(std::path::PathBuf::from),
            "--dir" => dir = args.next().map(std::path::PathBuf::from),
            "--exit" => stay = false,
            _ => {
                eprintln!("{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let Some(bin) = bin else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    // A directory of its own (no --dir) goes when the tour ends, Ctrl-C included: it holds the
    // ledger and the daemon's log of a tour nobody asked to keep (a failed tour's stays, to read).
    let own = dir.is_none();
    let result = match tour::workdir(dir) {
        Ok(dir) => {
            let result = tour::run(&bin, &dir, stay).await;
            if own
                && result.is_ok()
                && let Err(e) = std::fs::remove_dir_all(&dir)
            {
                eprintln!("the tour's directory {} stays: {e}", dir.display());
            }
            result
        }
        Err(err) => Err(err),
    };
    if let Err(err) = result {
        eprintln!("the tour stopped: {err} (its files stay in the tour's directory)");
        std::process::exit(1);
    }
}
