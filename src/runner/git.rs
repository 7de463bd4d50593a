//! The `git` program for gitops targets: a working clone per target that fetches one branch,
//! checks a commit out clean, commits the edited files and pushes without force. `git` rather than
//! a library: gitoxide does not push, and libgit2 would add a C build with its own TLS and SSH
//! stacks; the program is in every image that builds apps (the Dockerfile and the chart's image
//! carry it). Each call runs with a cleared environment (no user or system Git config, no prompt):
//! only what it needs, the credentials as an HTTP header in `GIT_CONFIG_*` variables, never in a URL
//! or an argument another process could read.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;

use builder_monitor_core::gitops::{EditError, MAX_TEXT};

use crate::config::{GitAuth, GitopsTarget};

/// The longest one Git command may take (a fetch or push of a small repository).
const TIMEOUT: Duration = Duration::from_secs(120);
/// The most of a command's stderr kept for its error.
const STDERR_KEPT: usize = 2000;

/// Why a Git command failed. Messages carry `git`'s own words (which never hold the token: it is
/// not in any argument or URL), cut to their end.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git ({0}): install git, or put it on PATH")]
    Spawn(std::io::Error),
    #[error("git {what} did not finish in {}s", TIMEOUT.as_secs())]
    Timeout { what: &'static str },
    #[error("git {what} failed: {stderr}")]
    Failed { what: &'static str, stderr: String },
    /// The remote asked for credentials and did not take the ones sent (or none were sent).
    #[error("git {what}: {url} refused the credentials ({hint})")]
    Refused { what: &'static str, url: String, hint: String },
    #[error("{path}: {error}")]
    File { path: String, error: std::io::Error },
    #[error("{0} is not UTF-8 text")]
    NotText(String),
    #[error(
        "{0} is a symbolic link or not a regular file in the repository: builder-monitor edits only regular files; point the target at the file itself"
    )]
    NotRegular(String),
    /// The edit's own limit (`EditError::TooLarge`), found from the file's size before reading it.
    #[error("{path}: {source}")]
    TooLarge { path: String, source: EditError },
}

/// How a push went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    Pushed,
    /// Someone pushed first (not a fast-forward): fetch again and re-apply.
    Rejected(String),
}

/// One target's working clone.
pub struct Repo {
    dir: PathBuf,
    url: String,
    auth: GitAuth,
    author: (String, String),
}

impl Repo {
    pub fn new(dir: PathBuf, target: &GitopsTarget) -> Self {
        Repo {
            dir,
            url: target.repo.clone(),
            auth: target.auth.clone(),
            author: (target.author.name.clone(), target.author.email.clone()),
        }
    }

    async fn git(&self, what: &'static str, args: &[&str]) -> Result<std::process::Output, GitError> {
        let mut command = tokio::process::Command::new("git");
        command
            .args(args)
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LANG", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &self.auth {
            GitAuth::Token { username, token, .. } => {
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{}", token.expose()));
                // Scoped to this remote: a redirect elsewhere does not get it.
                command
                    .env("GIT_CONFIG_COUNT", "1")
                    .env("GIT_CONFIG_KEY_0", format!("http.{}.extraHeader", self.url))
                    .env("GIT_CONFIG_VALUE_0", format!("Authorization: Basic {basic}"));
            }
            GitAuth::SshKey(key) => {
                let known = self.dir.join(".known_hosts");
                command.env(
                    "GIT_SSH_COMMAND",
                    format!(
                        "ssh -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile='{}'",
                        key.display(),
                        known.display()
                    ),
                );
            }
            GitAuth::None => {}
        }
        let output = match tokio::time::timeout(TIMEOUT, command.output()).await {
            Ok(result) => result.map_err(GitError::Spawn)?,
            Err(_) => return Err(GitError::Timeout { what }),
        };
        Ok(output)
    }

    async fn ok(&self, what: &'static str, args: &[&str]) -> Result<String, GitError> {
        let output = self.git(what, args).await?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        Err(self.failed(what, &output.stderr))
    }

    /// A failed command's error: a refusal of the credentials said as such.
    fn failed(&self, what: &'static str, stderr: &[u8]) -> GitError {
        let stderr = tail(stderr);
        // Git asks for a user name (and cannot: no prompt) when the server answers 401.
        let refused = [
            "could not read Username",
            "Authentication failed",
            "terminal prompts disabled",
            "Permission denied (publickey",
        ]
        .iter()
        .any(|m| stderr.contains(m));
        if !refused {
            return GitError::Failed { what, stderr };
        }
        let hint = match &self.auth {
            GitAuth::Token { env, username, .. } => format!("check the token in ${env} and the username {username:?}"),
            GitAuth::SshKey(key) => format!("check that the key {} may push there", key.display()),
            GitAuth::None => "it needs credentials: set credentials_env or ssh_key_file".into(),
        };
        GitError::Refused { what, url: self.url.clone(), hint }
    }

    /// Creates the working clone's directory and repository once.
    pub async fn init(&self) -> Result<(), GitError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|error| GitError::File { path: self.dir.display().to_string(), error })?;
        if !self.dir.join(".git").exists() {
            self.ok("init", &["init", "--quiet"]).await?;
        }
        Ok(())
    }

    /// Fetches `branch` from the remote; its commit, or `None` when the remote has no such branch.
    pub async fn fetch(&self, branch: &str) -> Result<Option<String>, GitError> {
        let refspec = format!("+refs/heads/{branch}:refs/remotes/origin/{branch}");
        let output = self.git("fetch", &["fetch", "--quiet", "--no-tags", "--", &self.url, &refspec]).await?;
        if !output.status.success() {
            if tail(&output.stderr).contains("couldn't find remote ref") {
                return Ok(None);
            }
            return Err(self.failed("fetch", &output.stderr));
        }
        let commit = self
            .ok("rev-parse", &["rev-parse", "--verify", &format!("refs/remotes/origin/{branch}^{{commit}}")])
            .await?;
        Ok(Some(commit.trim().to_string()))
    }

    /// The work tree at `commit`, exactly: nothing left of an earlier attempt.
    pub async fn checkout(&self, commit: &str) -> Result<(), GitError> {
        self.ok("checkout", &["checkout", "--quiet", "--force", "--detach", commit]).await?;
        self.ok("clean", &["clean", "--quiet", "-fdx", "--exclude=.known_hosts"]).await?;
        Ok(())
    }

    /// The message of the commit checked out.
    pub async fn head_message(&self) -> Result<String, GitError> {
        self.ok("log", &["log", "-1", "--format=%B", "HEAD"]).await
    }

    /// A file of the checked-out branch, if it is there. Only a regular file inside the clone is
    /// read: the remote's content is not trusted, and a symbolic link (at the end of the path or in
    /// it) could point anywhere the daemon may read and then write, a FIFO would block the read for
    /// ever. At most `MAX_TEXT` bytes are read, whatever the file's size.
    pub fn read(&self, path: &str) -> Result<Option<String>, GitError> {
        use std::io::Read as _;
        let file_error = |error| GitError::File { path: path.to_string(), error };
        let full = self.dir.join(path);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(file_error(error)),
        };
        let clone = std::fs::canonicalize(&self.dir).map_err(file_error)?;
        let parent = full.parent().map(std::fs::canonicalize).transpose().map_err(file_error)?;
        if !meta.is_file() || !parent.is_some_and(|p| p.starts_with(&clone)) {
            return Err(GitError::NotRegular(path.to_string()));
        }
        let limit = MAX_TEXT as u64;
        let too_large = |bytes: u64| GitError::TooLarge {
            path: path.to_string(),
            source: EditError::TooLarge { bytes: usize::try_from(bytes).unwrap_or(usize::MAX) },
        };
        if meta.len() > limit {
            return Err(too_large(meta.len()));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        std::fs::File::open(&full).and_then(|f| f.take(limit + 1).read_to_end(&mut bytes)).map_err(file_error)?;
        if bytes.len() as u64 > limit {
            return Err(too_large(bytes.len() as u64));
        }
        String::from_utf8(bytes).map(Some).map_err(|_| GitError::NotText(path.to_string()))
    }

    pub fn write(&self, path: &str, text: &str) -> Result<(), GitError> {
        std::fs::write(self.dir.join(path), text).map_err(|error| GitError::File { path: path.to_string(), error })
    }

    /// Commits `paths` with `message` as the target's author; the new commit's id.
    pub async fn commit(&self, message: &str, paths: &[&str]) -> Result<String, GitError> {
        let mut add = vec!["add", "--"];
        add.extend(paths);
        self.ok("add", &add).await?;
        let name = format!("user.name={}", self.author.0);
        let email = format!("user.email={}", self.author.1);
        // The message from a file in .git: no argument of unbounded length, nothing on stdin.
        let file = self.dir.join(".git").join("BUILDER_MONITOR_MSG");
        std::fs::write(&file, message).map_err(|error| GitError::File { path: file.display().to_string(), error })?;
        let file_arg = format!("--file={}", file.display());
        self.ok(
            "commit",
            &["-c", &name, "-c", &email, "commit", "--quiet", "--no-verify", "--cleanup=verbatim", &file_arg],
        )
        .await?;
        Ok(self.ok("rev-parse", &["rev-parse", "HEAD"]).await?.trim().to_string())
    }

    /// Pushes the commit checked out to `branch`, never forced.
    pub async fn push(&self, branch: &str) -> Result<Push, GitError> {
        let refspec = format!("HEAD:refs/heads/{branch}");
        let output = self.git("push", &["push", "--porcelain", "--", &self.url, &refspec]).await?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if output.status.success() {
            return Ok(Push::Pushed);
        }
        // `!<tab>ref<tab>[rejected] (fetch first)`: someone was first; `[remote rejected]` is a
        // refusal (a protected branch, a hook), which trying again does not change.
        if let Some(line) = stdout.lines().find(|l| l.starts_with('!') && l.contains("[rejected]")) {
            return Ok(Push::Rejected(line.rsplit('\t').next().unwrap_or(line).to_string()));
        }
        match (self.failed("push", &output.stderr), stdout.lines().find(|l| l.starts_with('!'))) {
            (GitError::Failed { what, stderr }, Some(line)) => Err(GitError::Failed {
                what,
                stderr: format!("{}: {stderr}", line.rsplit('\t').next().unwrap_or(line)),
            }),
            (err, _) => Err(err),
        }
    }
}

/// The end of a command's stderr, one line.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim().replace('\n', "; ");
    match text.char_indices().rev().nth(STDERR_KEPT) {
        Some((at, _)) => format!("…{}", &text[at..]),
        None => text,
    }
}

#[cfg(test)]
mod tests;
