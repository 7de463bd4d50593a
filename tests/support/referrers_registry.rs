//! A registry with the OCI 1.1 referrers API (`GET /v2/<name>/referrers/<digest>`): the Go program
//! in `tests/referrers-registry` (go-containerregistry's `pkg/registry`, referrers on), built by
//! `scripts/go-tools` into `REFERRERS_REGISTRY`, on a free loopback port, in memory. It stops when
//! its standard input closes, so a test binary that dies leaves nothing behind.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::PATIENCE;

pub struct ReferrersRegistry {
    child: Child,
    /// Held open: the registry stops when it closes.
    _stdin: ChildStdin,
    /// `127.0.0.1:PORT`
    pub host: String,
    log: Arc<Mutex<Vec<String>>>,
}

/// The program's path, as `scripts/test` (through `scripts/go-tools`) exports it.
pub fn binary() -> String {
    std::env::var("REFERRERS_REGISTRY").unwrap_or_else(|_| {
        panic!(
            "REFERRERS_REGISTRY is not set: run the tests with scripts/test, which builds tests/referrers-registry (scripts/go-tools prints its path)"
        )
    })
}

impl ReferrersRegistry {
    pub fn start() -> Self {
        let mut child = Command::new(binary())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the referrers registry");
        let stdin = child.stdin.take().expect("its stdin");
        let stderr = child.stderr.take().expect("its stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(addr) = line.strip_prefix("listening on ") {
                        let _ = tx.send(addr.trim().to_string());
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        // It prints the line after it listens: connections are accepted from then on.
        let host = match rx.recv_timeout(PATIENCE) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("the referrers registry did not start: {:#?}", log.lock().unwrap());
            }
        };
        ReferrersRegistry { child, _stdin: stdin, host, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.host)
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for ReferrersRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Either registry the signing tests run on.
pub enum Served {
    /// Debian's CNCF Distribution 2.8: no referrers API (the referrers tag schema is used).
    Distribution(super::registry::TestRegistry),
    /// go-containerregistry's registry with the referrers API.
    Referrers(ReferrersRegistry),
}

/// Which registry to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Distribution,
    Referrers,
}

impl Served {
    pub fn start(kind: Kind) -> Self {
        match kind {
            // Relative upload locations: uploads through a proxy in front of it stay on the proxy.
            Kind::Distribution => {
                Served::Distribution(super::registry::TestRegistry::start_relative(super::registry::Auth::Anonymous))
            }
            Kind::Referrers => Served::Referrers(ReferrersRegistry::start()),
        }
    }

    pub fn host(&self) -> &str {
        match self {
            Served::Distribution(r) => &r.host,
            Served::Referrers(r) => &r.host,
        }
    }
}
