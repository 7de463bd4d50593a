//! Debian's headless Chromium for the status page tests: the DOM it builds (`--dump-dom`), a
//! screenshot, or the value of an expression evaluated in the loaded page over the DevTools
//! protocol (`--remote-debugging-pipe`), for what only layout knows (widths, rendered text).

use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one Chromium run may take.
const BROWSER_PATIENCE: Duration = Duration::from_secs(60);

/// Headless, in a fresh profile, with nothing running in the background.
const FLAGS: [&str; 11] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
];

/// Chromium, or `None` (with a message) when it is missing outside CI; in CI it must be there.
pub fn chromium() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("CHROMIUM").unwrap_or_else(|| "/usr/bin/chromium".into()));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing and CI is set: install Debian's chromium (scripts/test does)",
        path.display()
    );
    // Straight to stderr: the harness would swallow eprintln! of a passing test.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the status page browser test needs {} (apt-get install chromium; scripts/test installs it)",
        path.display()
    );
    None
}

/// Reads all of `from` on a thread of its own.
fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        text
    })
}

/// Waits for `child` until `deadline`, killing it then.
fn wait(child: &mut Child, deadline: Instant, what: &str) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium {what} did not finish within {BROWSER_PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs headless Chromium on `url` with `args`, in a fresh profile, returning its stdout.
pub fn browse(chromium: &Path, url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(chromium)
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = wait(&mut child, Instant::now() + BROWSER_PATIENCE, &format!("{args:?}"));
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium {args:?} failed ({status}):\n{err}");
    out
}

/// The DevTools protocol over the pipe Chromium reads on fd 3 and writes on fd 4: messages are
/// JSON, each ended by a NUL byte.
struct DevTools {
    child: Child,
    to: std::process::ChildStdin,
    from: mpsc::Receiver<serde_json::Value>,
    next_id: u64,
    deadline: Instant,
}

impl DevTools {
    /// Sends `method` (to the page of `session`, if given); answers its id.
    fn send(&mut self, session: Option<&str>, method: &str, params: serde_json::Value) -> u64 {
        self.next_id += 1;
        let mut message = serde_json::json!({ "id": self.next_id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).and_then(|()| self.to.flush()).expect("write to chromium");
        self.next_id
    }

    /// Sends `method` and waits for its result.
    fn call(&mut self, session: Option<&str>, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.send(session, method, params);
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let reply = self.from.recv_timeout(left).unwrap_or_else(|e| panic!("no answer to {method}: {e}"));
            if reply["id"] == id {
                assert!(reply.get("error").is_none(), "{method} failed: {reply}");
                return reply["result"].clone();
            }
        }
    }
}

/// Opens `url` in headless Chromium with a `width`×`height` window and answers `expression`
/// (JavaScript, its value returned as JSON) evaluated in the page once it has loaded. The
/// protocol evaluates it whatever the page's Content-Security-Policy says; the page itself still
/// runs nothing.
pub fn evaluate(chromium: &Path, url: &str, (width, height): (u32, u32), expression: &str) -> serde_json::Value {
    let profile = tempfile::tempdir().expect("profile dir");
    // The shell hands our pipes to Chromium as its fds 3 (commands) and 4 (answers).
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
        .arg(chromium)
        .args(FLAGS)
        .arg("--remote-debugging-pipe")
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let (tx, from) = mpsc::channel();
    let mut answers = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        let mut message = Vec::new();
        while answers.read_until(0, &mut message).is_ok_and(|n| n > 0) {
            message.pop_if(|b| *b == 0);
            if let Ok(value) = serde_json::from_slice(&message)
                && tx.send(value).is_err()
            {
                return;
            }
            message.clear();
        }
    });
    let err = drain(child.stderr.take().unwrap());
    let to = child.stdin.take().unwrap();
    let deadline = Instant::now() + BROWSER_PATIENCE;
    let mut tools = DevTools { child, to, from, next_id: 0, deadline };

    let target = loop {
        let targets = tools.call(None, "Target.getTargets", serde_json::json!({}));
        let page = targets["targetInfos"].as_array().unwrap().iter().find(|t| t["type"] == "page" && t["url"] == url);
        if let Some(page) = page {
            break page["targetId"].clone();
        }
        assert!(Instant::now() < deadline, "no page for {url}: {targets}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let attached =
        tools.call(None, "Target.attachToTarget", serde_json::json!({ "targetId": target, "flatten": true }));
    let session = attached["sessionId"].as_str().unwrap().to_string();
    let mut run = |expression: &str| {
        let params = serde_json::json!({ "expression": expression, "returnByValue": true });
        let result = tools.call(Some(&session), "Runtime.evaluate", params);
        assert!(result.get("exceptionDetails").is_none(), "{expression} threw: {result}");
        result["result"]["value"].clone()
    };
    // The tab shows about:blank, complete, before it loads `url`.
    let loaded = format!("location.href === {} && document.readyState === 'complete'", serde_json::json!(url));
    while run(&loaded) != true {
        assert!(Instant::now() < deadline, "{url} did not load");
        std::thread::sleep(Duration::from_millis(50));
    }
    let value = run(expression);

    // Chromium may close the pipe before it answers.
    tools.send(None, "Browser.close", serde_json::json!({}));
    drop(tools.to);
    let status = wait(&mut tools.child, deadline, "(DevTools)");
    let err = err.join().unwrap();
    assert!(status.success(), "chromium failed ({status}):\n{err}");
    value
}
