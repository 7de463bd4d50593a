//! Runs the real `builder-monitor` binary: one-shot commands with a watchdog, and a long-running
//! daemon whose JSON log lines a test can wait for.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::PATIENCE;

pub const BINARY: &str = env!("CARGO_BIN_EXE_builder-monitor");

/// A temp directory holding a config file and the state it names.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Workspace {
    pub fn new() -> Self {
        Workspace { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `config.toml` and returns its path.
    pub fn config(&self, text: &str) -> PathBuf {
        let path = self.path("config.toml");
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Runs the binary to completion (killed and failed after `PATIENCE`).
    pub fn run(&self, args: &[&str]) -> Output {
        run_with_env(args, &[], self.dir.path())
    }
}

pub fn run_with_env(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Output {
    let mut command = Command::new(BINARY);
    command.args(args).current_dir(cwd).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.env("BUILDER_MONITOR_LOG", "info").env_remove("BUILDER_MONITOR_CONFIG");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().expect("start builder-monitor");
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = stderr.join().unwrap_or_default();
            panic!("builder-monitor {args:?} did not finish within {PATIENCE:?}; its log:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output { code: status.code(), stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// A running daemon (`run --log-format json`).
pub struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    pub log: Vec<String>,
}

impl Daemon {
    pub fn start(config: &Path) -> Self {
        Self::start_with_env(config, &[])
    }

    pub fn start_with_env(config: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_binary(Path::new(BINARY), config, env)
    }

    /// [`Daemon::start_with_env`] with another build of the daemon (a release build, to measure).
    pub fn start_binary(binary: &Path, config: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(binary)
            .args(["run", "--log-format", "json", "--config"])
            .arg(config)
            .env("BUILDER_MONITOR_LOG", "info,builder_monitor::monitor=debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start daemon");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon { child, lines: rx, log: Vec::new() }
    }

    /// Waits for the HTTP server to start and returns the address it bound: tests configure
    /// `listen = "127.0.0.1:0"`, so no two tests race for a port picked in advance.
    pub fn server_addr(&mut self) -> String {
        let line = self.wait_for("the server", |v| v["message"] == "serving health, metrics, API and hooks");
        line["listen"].as_str().expect("the server line names its address").to_string()
    }

    /// Waits for a log line whose JSON satisfies `wanted`, returning it.
    pub fn wait_for(&mut self, what: &str, wanted: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        self.wait_for_or_exit(what, wanted).unwrap_or_else(|status| {
            panic!("daemon exited ({status}) before it logged {what}; log so far:\n{}", self.log.join("\n"))
        })
    }

    /// Waits for a log line whose JSON satisfies `wanted`, or for the daemon to exit before one
    /// comes (its exit status; the log, error lines included, is in `log`).
    pub fn wait_for_or_exit(
        &mut self,
        what: &str,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, std::process::ExitStatus> {
        self.wait_longer(what, PATIENCE, wanted)
    }

    /// `wait_for_or_exit` with a patience of `patience`: for what the daemon does later by
    /// design (a failed check's retry comes after 30 s).
    pub fn wait_longer(
        &mut self,
        what: &str,
        patience: Duration,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value, std::process::ExitStatus> {
        let deadline = Instant::now() + patience;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&line)
                        && wanted(&value)
                    {
                        return Ok(value);
                    }
                }
                // Its stderr closed: it exited.
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(self.child.wait().expect("wait")),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("daemon neither logged {what} nor exited; log so far:\n{}", self.log.join("\n"))
                }
            }
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// The next JSON log line, if one comes within `timeout`.
    pub fn next_line(&mut self, timeout: Duration) -> Option<serde_json::Value> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.log.push(line.clone());
        serde_json::from_str(&line).ok()
    }

    /// Waits for the structured log line of an event of `event_type`.
    pub fn wait_for_event(&mut self, event_type: &str) -> serde_json::Value {
        let line = self
            .wait_for(event_type, |v| v["target"] == "builder_monitor_core::event" && v["event_type"] == event_type);
        serde_json::from_str(line["event"].as_str().unwrap()).unwrap()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut log = std::mem::take(&mut self.log);
                log.extend(self.lines.try_iter());
                return (status, log);
            }
            assert!(Instant::now() < deadline, "daemon ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A daemon (`run --log-format json`) whose stderr the test stopped reading once the server
/// started: drop `stderr` to close the pipe (writes then fail with `EPIPE`), or keep it unread to
/// let the pipe fill (64 KiB).
pub struct Unread {
    pub child: Child,
    /// The server's address.
    pub addr: String,
    pub stderr: Option<BufReader<ChildStderr>>,
}

impl Unread {
    /// Starts the daemon and reads its log until its server has started and it has logged a line
    /// whose message is `ready` (which may be the server's own line).
    pub fn start(config: &Path, env: &[(&str, &str)], ready: &'static str) -> Self {
        let mut child = Command::new(BINARY)
            .args(["run", "--log-format", "json", "--config"])
            .arg(config)
            .env("BUILDER_MONITOR_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start daemon");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        // Read on a thread, so a daemon that never gets there fails the test instead of hanging it.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut log, mut addr, mut line) = (Vec::new(), None, String::new());
            let mut seen_ready = false;
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                let value = serde_json::from_str::<serde_json::Value>(&line).unwrap_or_default();
                if value["message"] == "serving health, metrics, API and hooks" {
                    addr = Some(value["listen"].as_str().unwrap_or_default().to_string());
                }
                seen_ready |= value["message"] == ready;
                log.push(std::mem::take(&mut line));
                if let (Some(addr), true) = (&addr, seen_ready) {
                    let _ = tx.send(Ok((addr.clone(), stderr)));
                    return;
                }
            }
            let _ = tx.send(Err(log.concat()));
        });
        match rx.recv_timeout(PATIENCE) {
            Ok(Ok((addr, stderr))) => Unread { child, addr, stderr: Some(stderr) },
            Ok(Err(log)) => panic!("the daemon's stderr ended before it served and logged {ready:?}:\n{log}"),
            Err(_) => {
                let _ = child.kill();
                panic!("the daemon did not serve and log {ready:?} within {PATIENCE:?}");
            }
        }
    }

    /// Sends SIGTERM and awaits the exit, failing the test if the daemon is still running after
    /// `PATIENCE` (a hang detector: its own stop deadline is 15 s).
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the daemon ignored SIGTERM for {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
