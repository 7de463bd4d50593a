//! Real Git for the gitops tests: bare repositories on disk (`file://`), a clone to push from as
//! another person would, and the same repositories served over HTTP by `git http-backend` (the
//! CGI program Debian's `git` ships) behind a small server with basic auth.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Response, StatusCode};
use base64::Engine as _;

/// Runs `git` in `dir` with a clean identity; panics with its stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Pat Person")
        .env("GIT_AUTHOR_EMAIL", "pat@example.com")
        .env("GIT_COMMITTER_NAME", "Pat Person")
        .env("GIT_COMMITTER_EMAIL", "pat@example.com")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare repository with one commit on `main` holding `files`, and a clone of it to work in.
pub struct Remote {
    pub bare: PathBuf,
    pub work: PathBuf,
    _dir: tempfile::TempDir,
}

impl Remote {
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("repo.git");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&bare).unwrap();
        git(&bare, &["init", "--quiet", "--bare", "--initial-branch=main"]);
        // http-backend serves only what says it may be; pushes need http.receivepack.
        git(&bare, &["config", "http.receivepack", "true"]);
        git(dir.path(), &["clone", "--quiet", bare.to_str().unwrap(), "work"]);
        git(&work, &["checkout", "--quiet", "-b", "main"]);
        for (path, text) in files {
            let file = work.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        git(&work, &["add", "--all"]);
        git(&work, &["commit", "--quiet", "-m", "the manifests"]);
        git(&work, &["push", "--quiet", "origin", "main"]);
        Remote { bare, work, _dir: dir }
    }

    pub fn url(&self) -> String {
        format!("file://{}", self.bare.display())
    }

    /// A commit by a person, pushed to `branch`: `files` written over the clone's latest.
    pub fn push_change(&self, branch: &str, message: &str, files: &[(&str, &str)]) -> String {
        git(&self.work, &["fetch", "--quiet", "origin"]);
        git(&self.work, &["checkout", "--quiet", "-B", branch, &format!("origin/{branch}")]);
        for (path, text) in files {
            std::fs::write(self.work.join(path), text).unwrap();
        }
        git(&self.work, &["commit", "--quiet", "--all", "-m", message]);
        git(&self.work, &["push", "--quiet", "origin", branch]);
        self.head(branch)
    }

    /// The commit `branch` points at in the bare repository.
    pub fn head(&self, branch: &str) -> String {
        git(&self.bare, &["rev-parse", &format!("refs/heads/{branch}")]).trim().to_string()
    }

    /// A file as `branch` has it.
    pub fn file(&self, branch: &str, path: &str) -> String {
        git(&self.bare, &["show", &format!("{branch}:{path}")])
    }

    /// `branch`'s commits, newest first: (id, whole message).
    pub fn log(&self, branch: &str) -> Vec<(String, String)> {
        let out = git(&self.bare, &["log", "--format=%H%x00%B%x01", branch]);
        out.split('\u{1}')
            .filter_map(|entry| {
                let entry = entry.trim_start_matches('\n');
                let (id, message) = entry.split_once('\0')?;
                Some((id.to_string(), message.trim_end().to_string()))
            })
            .collect()
    }

    /// The files a commit changed.
    pub fn changed_files(&self, commit: &str) -> Vec<String> {
        git(&self.bare, &["show", "--name-only", "--format=", commit]).lines().map(String::from).collect()
    }
}

/// `git http-backend` behind basic auth (user `bot`, the password given), on loopback.
pub struct HttpGit {
    pub base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpGit {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Served {
    root: PathBuf,
    password: String,
}

impl HttpGit {
    /// Serves the repositories under `root` (a bare repository `root/NAME` at `{base}/NAME`).
    pub async fn start(root: &Path, password: &str) -> Self {
        let served = Arc::new(Served { root: root.to_path_buf(), password: password.to_string() });
        let app = axum::Router::new().fallback(serve).with_state(served);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HttpGit { base, task }
    }
}

async fn serve(State(served): State<Arc<Served>>, request: Request) -> Response<Body> {
    let expected =
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("bot:{}", served.password)));
    let (parts, body) = request.into_parts();
    let authorized = parts.headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(expected.as_str());
    if !authorized {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header("www-authenticate", "Basic realm=\"git\"")
            .body(Body::from("authentication required"))
            .unwrap();
    }
    let method = parts.method.to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let (content_type, encoding) = (header("content-type"), header("content-encoding"));
    let body = to_bytes(body, 64 << 20).await.unwrap();
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &served.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", encoding)
        .env("REMOTE_USER", "bot")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("git http-backend");
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(&body).await;
    });
    let out = child.wait_with_output().await.unwrap();
    let _ = writer.await;
    // CGI: headers, a blank line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.stdout.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, gap)) = split else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from(String::from_utf8_lossy(&out.stderr).into_owned()))
            .unwrap();
    };
    let head = String::from_utf8_lossy(&out.stdout[..at]).into_owned();
    let mut response = Response::builder().status(StatusCode::OK);
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(500);
            response = response.status(code);
        } else {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(out.stdout[at + gap..].to_vec())).unwrap()
}
