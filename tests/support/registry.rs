//! A CNCF Distribution registry (`docker-registry` from Debian) on a free loopback port.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{PATIENCE, fixture};

const BINARY: &str = "/usr/bin/docker-registry";

pub enum Auth {
    Anonymous,
    /// bcrypt htpasswd with `testuser` / `testpass`.
    Htpasswd,
    /// Bearer tokens from a token server at this realm URL.
    Token {
        realm: String,
    },
}

pub struct TestRegistry {
    child: Child,
    /// `127.0.0.1:PORT`
    pub host: String,
    log: Arc<Mutex<Vec<String>>>,
    /// Distribution's storage root (`<rootdirectory>/docker/registry/v2`), for `seed`.
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestRegistry {
    /// The registry's process id (benchmarks read its CPU time from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn start() -> Self {
        Self::start_with(Auth::Anonymous)
    }

    pub fn start_with(auth: Auth) -> Self {
        Self::start_full(auth, None, false, None)
    }

    /// A registry with manifest deletes off (Distribution's default: `storage.delete.enabled`
    /// false), which answers a manifest `DELETE` with 405 `UNSUPPORTED`.
    pub fn start_without_deletes() -> Self {
        Self::start_configured(Auth::Anonymous, None, false, None, false)
    }

    /// A registry serving HTTPS with `cert` and `key` (PEM files; see `keys::tls`).
    pub fn start_tls(cert: &Path, key: &Path) -> Self {
        Self::start_full(Auth::Anonymous, None, false, Some((cert, key)))
    }

    /// A registry whose upload `Location`s are relative (`/v2/…/uploads/<uuid>?_state=…`), so
    /// uploads through a proxy in front of it stay on the proxy.
    pub fn start_relative(auth: Auth) -> Self {
        Self::start_full(auth, None, true, None)
    }

    /// A registry that notifies `url` of every push, with `Authorization: Bearer <token>`.
    pub fn start_notifying(url: &str, token: &str) -> Self {
        Self::start_full(Auth::Anonymous, Some((url.to_string(), token.to_string())), false, None)
    }

    fn start_full(auth: Auth, notify: Option<(String, String)>, relative: bool, tls: Option<(&Path, &Path)>) -> Self {
        Self::start_configured(auth, notify, relative, tls, true)
    }

    fn start_configured(
        auth: Auth,
        notify: Option<(String, String)>,
        relative: bool,
        tls: Option<(&Path, &Path)>,
        deletes: bool,
    ) -> Self {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} is missing: install the CNCF Distribution registry with `apt-get install -y docker-registry` (.ci/run does)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let auth_section = match &auth {
            Auth::Anonymous => String::new(),
            Auth::Htpasswd => {
                format!("auth:\n  htpasswd:\n    realm: test-realm\n    path: {}\n", fixture("htpasswd").display())
            }
            Auth::Token { realm } => format!(
                "auth:\n  token:\n    realm: {realm}\n    service: test-registry\n    issuer: test-token-issuer\n    rootcertbundle: {}\n",
                fixture("token-cert.pem").display()
            ),
        };
        let notify_section = match &notify {
            None => String::new(),
            Some((url, token)) => format!(
                "notifications:\n  endpoints:\n    - name: builder-monitor\n      url: {url}\n      headers:\n        Authorization: [Bearer {token}]\n      timeout: 2s\n      threshold: 5\n      backoff: 1s\n      ignoredmediatypes:\n        - application/octet-stream\n      ignore:\n        actions:\n          - pull\n"
            ),
        };
        let tls_section = match tls {
            None => String::new(),
            Some((cert, key)) => format!("  tls:\n    certificate: {}\n    key: {}\n", cert.display(), key.display()),
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: {deletes}\nhttp:\n  addr: 127.0.0.1:0\n  secret: builder-monitor-tests\n  relativeurls: {relative}\n{tls_section}{auth_section}{notify_section}",
            dir.path().join("data").display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write registry config");
        let mut child = Command::new(BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start docker-registry");
        let stderr = child.stderr.take().expect("registry stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        let addr: String =
                            rest.chars().take_while(|c| !c.is_whitespace() && !matches!(c, '"' | ',')).collect();
                        let _ = tx.send(addr);
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let host = match rx.recv_timeout(PATIENCE) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("registry did not start: {:#?}", log.lock().unwrap());
            }
        };
        let storage = dir.path().join("data/docker/registry/v2");
        let registry = TestRegistry { child, host, log, storage, _dir: dir };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(&self.host).is_err() {
            assert!(std::time::Instant::now() < deadline, "registry at {} never accepted connections", self.host);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.host)
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The registry's log once `enough` holds of it: Distribution writes a request's line after
    /// its answer, so a client can have its answer before the line is there. Fails after PATIENCE.
    pub fn log_once(&self, what: &str, enough: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let log = self.log();
            if enough(&log) {
                return log;
            }
            assert!(std::time::Instant::now() < deadline, "the registry never logged {what}: {log:#?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes an image into the registry's storage as a push of `blobs` and then `manifest` under
    /// `tag` leaves it, without the HTTP round trips: seeding a 10,000-app fleet takes seconds, not
    /// the half hour its pushes would. Distribution's filesystem layout (`registry/storage/paths.go`):
    /// a blob's bytes once under `blobs/`, and per repository a `link` file holding the digest for
    /// each blob (`_layers`), each manifest (`_manifests/revisions`) and the tag (`current` and its
    /// `index`). The registry keeps no cache of links (none is configured), so a seeded image is
    /// served at once; nothing is notified, as nothing was pushed.
    pub fn seed(&self, repo: &str, tag: &str, blobs: &[Vec<u8>], manifest: &[u8]) {
        let write_blob = |bytes: &[u8]| -> String {
            let digest = super::images::sha256(bytes);
            let hex = &digest["sha256:".len()..];
            let dir = self.storage.join("blobs/sha256").join(&hex[..2]).join(hex);
            if !dir.join("data").exists() {
                std::fs::create_dir_all(&dir).expect("create a blob directory");
                std::fs::write(dir.join("data"), bytes).expect("write a blob");
            }
            digest
        };
        let link = |path: PathBuf, digest: &str| {
            std::fs::create_dir_all(&path).expect("create a link directory");
            std::fs::write(path.join("link"), digest).expect("write a link");
        };
        let repository = self.storage.join("repositories").join(repo);
        for blob in blobs {
            let digest = write_blob(blob);
            link(repository.join("_layers/sha256").join(&digest["sha256:".len()..]), &digest);
        }
        let digest = write_blob(manifest);
        let hex = &digest["sha256:".len()..];
        link(repository.join("_manifests/revisions/sha256").join(hex), &digest);
        let tag_dir = repository.join("_manifests/tags").join(tag);
        link(tag_dir.join("current"), &digest);
        link(tag_dir.join("index/sha256").join(hex), &digest);
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
