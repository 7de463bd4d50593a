//! The `git` program for gitops targets: a working clone per target that fetches one branch,
//! checks a commit out clean, commits the edited files and pushes without force. `git` rather than
//! a library: gitoxide does not push, and libgit2 would add a C build with its own TLS and SSH
//! stacks; the program is in every image that builds apps (the Dockerfile and the chart's image
//! carry it). Each call runs with a cleared environment (no user or system Git config, no prompt):
//! only what it needs, the credentials as an HTTP header in `GIT_CONFIG_*` variables, never in a URL
//! or an argument another process could read. Redirects are never followed (the header would go to
//! wherever the remote points): a remote that redirects is an error that names where it points. A
//! command runs in its own process group, ended whole when it takes too long.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;

use builder_monitor_core::gitops::{self as edit, EditError, MAX_TEXT};

use super::group;
use crate::config::{GitAuth, GitopsTarget};

/// The longest one Git command may take (a fetch or push of a small repository).
const TIMEOUT: Duration = Duration::from_secs(120);
/// The most of a command's stderr kept for its error.
const STDERR_KEPT: usize = 2000;
/// The most of a redirect's target shown in its error.
const LOCATION_KEPT: usize = 300;
/// The most commits read back from the fetched head to find a change of ours.
pub const HISTORY_SEARCHED: usize = 1000;

/// Why a Git command failed. Messages carry `git`'s own words (which never hold the token: it is
/// not in any argument or URL), cut to their end.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run git ({0}): install git, or put it on PATH")]
    Spawn(std::io::Error),
    #[error(
        "git {what} did not finish in {}: it and every process it started were ended",
        humantime::format_duration(*after)
    )]
    Timeout { what: &'static str, after: Duration },
    #[error("git {what} failed: {stderr}")]
    Failed { what: &'static str, stderr: String },
    /// The remote asked for credentials and did not take the ones sent (or none were sent).
    #[error("git {what}: {url} refused the credentials ({hint})")]
    Refused { what: &'static str, url: String, hint: String },
    /// The remote answered with a redirect, which is not followed: the credentials would go with it.
    #[error(
        "git {what}: {url} redirects to {location}; builder-monitor follows no redirect (its credentials would go along): configure the final URL as repo"
    )]
    Redirected { what: &'static str, url: String, location: String },
    /// The remote refused the push itself (a pre-receive hook, a protected branch): final, trying
    /// again does not change it.
    #[error(
        "push to {branch} of {url} refused by the remote: {why}; let builder-monitor's author push there, or set push_branch to a branch it may push to"
    )]
    Declined { branch: String, url: String, why: String },
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

impl GitError {
    /// Whether trying again cannot help until someone changes the remote or the configuration.
    pub fn is_final(&self) -> bool {
        matches!(self, GitError::Redirected { .. } | GitError::Declined { .. })
    }
}

/// How a push went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    Pushed,
    /// Someone pushed first (not a fast-forward, or their push took the branch while ours was
    /// landing): fetch again and re-apply.
    Rejected(String),
}

/// One target's working clone.
pub struct Repo {
    dir: PathBuf,
    url: String,
    auth: GitAuth,
    author: (String, String),
    timeout: Duration,
}

impl Repo {
    pub fn new(dir: PathBuf, target: &GitopsTarget) -> Self {
        Repo {
            dir,
            url: target.repo.clone(),
            auth: target.auth.clone(),
            author: (target.author.name.clone(), target.author.email.clone()),
            timeout: TIMEOUT,
        }
    }

    /// The same clone with another limit per command (`check --online`'s bound, tests of a remote
    /// that never answers).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn git(&self, what: &'static str, args: &[&str]) -> Result<std::process::Output, GitError> {
        self.run(what, self.command(args)).await
    }

    /// `git args` in the clone, with only the environment it needs.
    fn command(&self, args: &[&str]) -> tokio::process::Command {
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
            .kill_on_drop(true)
            // git sends an extraHeader on every request of a command, also to the host a redirect
            // names (and keeps using that host): so none is followed, with credentials or without.
            .env("GIT_CONFIG_KEY_0", "http.followRedirects")
            .env("GIT_CONFIG_VALUE_0", "false")
            .env("GIT_CONFIG_COUNT", "1");
        #[cfg(unix)]
        command.process_group(0);
        group::die_with_daemon(&mut command);
        match &self.auth {
            GitAuth::Token { .. } => {
                command
                    .env("GIT_CONFIG_COUNT", "2")
                    .env("GIT_CONFIG_KEY_1", format!("http.{}.extraHeader", self.url))
                    .env("GIT_CONFIG_VALUE_1", format!("Authorization: Basic {}", self.basic().unwrap_or_default()));
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
        command
    }

    /// The basic-auth credentials of a token, as they travel.
    fn basic(&self) -> Option<String> {
        match &self.auth {
            GitAuth::Token { username, token, .. } => {
                Some(base64::engine::general_purpose::STANDARD.encode(format!("{username}:{}", token.expose())))
            }
            _ => None,
        }
    }

    /// Runs `command` to its end or the timeout; on the timeout its whole process group is ended
    /// (git's `git-remote-http` or `ssh` holds the hung connection, not git itself) before the
    /// error returns.
    async fn run(
        &self,
        what: &'static str,
        mut command: tokio::process::Command,
    ) -> Result<std::process::Output, GitError> {
        let child = command.spawn().map_err(GitError::Spawn)?;
        // `id` is `None` only once the child was reaped, which nothing has done yet.
        let leader = child.id().unwrap_or_default();
        let members = group::of_leader(leader);
        // Should this future be dropped mid-wait (shutdown), the group goes with it.
        let guard = group::KillOnDrop(leader);
        let finished = tokio::time::timeout(self.timeout, child.wait_with_output()).await;
        // git waits for its own helpers: once it exited, the number is not ours to signal.
        std::mem::forget(guard);
        match finished {
            Ok(result) => result.map_err(GitError::Spawn),
            Err(_) => {
                if let Err(err) = group::stop(members, Duration::ZERO).await {
                    tracing::warn!(error = %err, "git {what} timed out and its processes could not all be ended");
                }
                Err(GitError::Timeout { what, after: self.timeout })
            }
        }
    }

    async fn ok(&self, what: &'static str, args: &[&str]) -> Result<String, GitError> {
        let output = self.git(what, args).await?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        Err(self.failed(what, &output.stderr).await)
    }

    /// A failed command's error: a redirect or a refusal of the credentials said as such.
    async fn failed(&self, what: &'static str, stderr: &[u8]) -> GitError {
        let stderr = tail(stderr);
        // With http.followRedirects=false, curl hands git the 30x and git reports its code.
        if ["301", "302", "303", "307", "308"].iter().any(|c| stderr.contains(&format!("returned error: {c}"))) {
            let location = self.redirect_location().await.unwrap_or_else(|| "an address it did not name".into());
            return GitError::Redirected { what, url: self.url.clone(), location };
        }
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

    /// Where the remote redirects to: one `ls-remote` again, with curl's headers traced (git
    /// redacts the Authorization header in the trace; the trace is read here and dropped).
    async fn redirect_location(&self) -> Option<String> {
        let mut command = self.command(&["ls-remote", "--heads", "--", &self.url]);
        command.env("GIT_TRACE_CURL", "2").env("GIT_TRACE_CURL_NO_DATA", "1").env("GIT_TRACE_REDACT", "1");
        let output = self.run("ls-remote", command).await.ok()?;
        let trace = String::from_utf8_lossy(&output.stderr);
        let location = trace.lines().find_map(|line| {
            let header = line.split_once("<= Recv header: ")?.1;
            let (name, value) = header.split_once(':')?;
            name.eq_ignore_ascii_case("location").then(|| value.trim().to_string())
        })?;
        // A hostile remote may echo what it was sent.
        let mut location = location;
        if let GitAuth::Token { token, .. } = &self.auth {
            location = location.replace(token.expose(), "[redacted]");
        }
        if let Some(basic) = self.basic() {
            location = location.replace(&basic, "[redacted]");
        }
        let shown = builder_monitor_core::text::escape(&location).into_owned();
        Some(builder_monitor_core::text::clip(&shown, LOCATION_KEPT).into_owned())
    }

    /// Which of `branches` the remote has: one `ls-remote`, with the same settings as every other
    /// command (no redirect followed, the credentials as a header). Needs no clone: the directory
    /// only has to exist.
    pub async fn ls_remote(&self, branches: &[&str]) -> Result<Vec<String>, GitError> {
        let refs: Vec<String> = branches.iter().map(|b| format!("refs/heads/{b}")).collect();
        let mut args = vec!["ls-remote", "--heads", "--", self.url.as_str()];
        args.extend(refs.iter().map(String::as_str));
        let listed = self.ok("ls-remote", &args).await?;
        let found = listed.lines().filter_map(|line| line.split_once('\t')?.1.strip_prefix("refs/heads/"));
        Ok(found.map(str::to_string).collect())
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
            return Err(self.failed("fetch", &output.stderr).await);
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

    /// The newest commit whose trailers name `change`: a push of ours that landed, whatever came
    /// after it. With `since` (the base an earlier push of ours was made on), the commits after it
    /// up to the one checked out, at most [`HISTORY_SEARCHED`] of them (that many back from the
    /// head when `since` is not known here); without, the head alone — another target's commit
    /// of the same change in the same repository, further down, is not ours.
    pub async fn find_change(&self, change: &str, since: Option<&str>) -> Result<Option<String>, GitError> {
        let max = format!("--max-count={}", if since.is_some() { HISTORY_SEARCHED } else { 1 });
        let mut args = vec!["log", "--format=%H%x00%B%x01", max.as_str(), "HEAD"];
        let exclude;
        if let Some(since) = since {
            let known =
                self.git("rev-parse", &["rev-parse", "--quiet", "--verify", &format!("{since}^{{commit}}")]).await?;
            if known.status.success() {
                exclude = format!("^{since}");
                args.push(&exclude);
            }
        }
        let log = self.ok("log", &args).await?;
        Ok(log.split('\u{1}').find_map(|entry| {
            let (id, message) = entry.trim_start_matches('\n').split_once('\0')?;
            edit::changes_in(message).iter().any(|c| c == change).then(|| id.to_string())
        }))
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
        // `!<tab>ref<tab>[rejected] (fetch first)`: someone was first. `[remote rejected]` with a
        // ref lock that was not at the commit our push expected: someone's push landed while ours
        // did, the same race. Any other `[remote rejected]` is a refusal (a hook, a protected
        // branch), which trying again does not change.
        if let Some(line) = stdout.lines().find(|l| l.starts_with('!')) {
            let why = line.rsplit('\t').next().unwrap_or(line).to_string();
            // The porcelain line may say only "failed to update ref"; receive-pack's own words for
            // the ref lock come on stderr.
            let race = is_race(&why) || is_race(&String::from_utf8_lossy(&output.stderr));
            if why.contains("[rejected]") || (why.contains("[remote rejected]") && race) {
                return Ok(Push::Rejected(why));
            }
            if why.contains("[remote rejected]") {
                return Err(GitError::Declined { branch: branch.to_string(), url: self.url.clone(), why });
            }
        }
        match (self.failed("push", &output.stderr).await, stdout.lines().find(|l| l.starts_with('!'))) {
            (GitError::Failed { what, stderr }, Some(line)) => Err(GitError::Failed {
                what,
                stderr: format!("{}: {stderr}", line.rsplit('\t').next().unwrap_or(line)),
            }),
            (err, _) => Err(err),
        }
    }
}

/// receive-pack's words for a ref that moved between its advertisement and its update.
fn is_race(why: &str) -> bool {
    ["cannot lock ref", "failed to update ref", "but expected", "incorrect old value"].iter().any(|m| why.contains(m))
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
