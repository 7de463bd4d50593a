//! Docker credential helpers (`docker-credential-NAME get`, the protocol ECR, GCR and ACR ship
//! helpers for): run when a registry needs credentials, in a clean environment, bounded in time
//! and output, their answer kept for a while and dropped as soon as the registry refuses it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::config::Secret;

/// How long an answer is used before the helper is asked again. Cloud registry tokens live an
/// hour (GCR) to twelve (ECR) and the protocol does not say how long: asking every 15 minutes
/// keeps well inside the shortest, at the cost of one short process per registry per quarter.
pub const ANSWER_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// The longest a helper may take (a cloud helper may call its provider's API).
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read: a JSON object with a username and a token.
const MAX_ANSWER_BYTES: u64 = 64 << 10;
/// Largest part of the helper's stderr kept for the error message.
const MAX_STDERR_BYTES: u64 = 4 << 10;

/// The daemon's environment variables a helper gets: what finding its own configuration takes
/// (home, locale, temporary files) and its cloud provider's variables; nothing else, so no secret
/// the config reads from the environment reaches it.
const KEPT: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "XDG_CONFIG_HOME",
    "XDG_RUNTIME_DIR",
    "DOCKER_CONFIG",
];
const KEPT_PREFIXES: &[&str] = &["AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_"];

/// Why a helper gave no credentials. Never carries its answer (it holds a secret).
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelperError {
    #[error("cannot run {program}: {detail}")]
    Spawn { program: String, detail: String },
    #[error("{program} did not answer within {}s", HELPER_TIMEOUT.as_secs())]
    Timeout { program: String },
    #[error(
        "{program} has no credentials for {server} (it exited with {status}{stderr}); log in with it first, e.g. your cloud CLI's docker login"
    )]
    Failed { program: String, server: String, status: String, stderr: String },
    #[error("{program} answered for {server} with something other than a JSON object with Username and Secret")]
    Answer { program: String, server: String },
    #[error(
        "{program} answered for {server} with an identity token, which builder-monitor does not exchange; use username + password_env instead"
    )]
    IdentityToken { program: String, server: String },
}

/// Credentials from one helper for one registry, with the last answer.
pub struct CredentialHelper {
    program: PathBuf,
    server: String,
    /// The last answer and when it came. Held across a run, so concurrent requests share one.
    answer: tokio::sync::Mutex<Option<(String, Secret, Instant)>>,
}

impl CredentialHelper {
    pub fn new(program: PathBuf, server: String) -> Self {
        CredentialHelper { program, server, answer: tokio::sync::Mutex::new(None) }
    }

    /// The program's name for messages (`docker-credential-ecr-login`).
    pub fn name(&self) -> String {
        self.program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Username and secret: the last answer while it is younger than [`ANSWER_LIFETIME`], else a
    /// new one.
    pub async fn credentials(&self) -> Result<(String, Secret), HelperError> {
        let mut answer = self.answer.lock().await;
        if let Some((username, secret, at)) = answer.as_ref()
            && at.elapsed() < ANSWER_LIFETIME
        {
            return Ok((username.clone(), secret.clone()));
        }
        let (username, secret) = run(&self.program, &self.server).await?;
        *answer = Some((username.clone(), secret.clone(), Instant::now()));
        Ok((username, secret))
    }

    /// Drops the last answer (the registry refused it): the next request asks the helper again.
    pub async fn forget(&self) {
        *self.answer.lock().await = None;
    }
}

/// Runs `program get` with `server` on its stdin and reads its answer.
async fn run(program: &Path, server: &str) -> Result<(String, Secret), HelperError> {
    let name = program.display().to_string();
    let mut command = tokio::process::Command::new(program);
    command.arg("get").env_clear();
    for (key, value) in std::env::vars_os() {
        let kept = key.to_str().is_some_and(|k| KEPT.contains(&k) || KEPT_PREFIXES.iter().any(|p| k.starts_with(p)));
        if kept {
            command.env(key, value);
        }
    }
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| HelperError::Spawn { program: name.clone(), detail: e.to_string() })?;
    let exchange = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A helper that exits without reading its stdin is judged by its exit status below.
            let _ = stdin.write_all(server.as_bytes()).await;
        }
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let out = child.stdout.take().map(|s| s.take(MAX_ANSWER_BYTES + 1));
        let err = child.stderr.take().map(|s| s.take(MAX_STDERR_BYTES));
        let read_out = async {
            if let Some(mut s) = out {
                let _ = s.read_to_end(&mut stdout).await;
            }
        };
        let read_err = async {
            if let Some(mut s) = err {
                let _ = s.read_to_end(&mut stderr).await;
            }
        };
        tokio::join!(read_out, read_err);
        let status = child.wait().await;
        (status, stdout, stderr)
    };
    let (status, stdout, stderr) = tokio::time::timeout(HELPER_TIMEOUT, exchange)
        .await
        .map_err(|_| HelperError::Timeout { program: name.clone() })?;
    let status = status.map_err(|e| HelperError::Spawn { program: name.clone(), detail: e.to_string() })?;
    if !status.success() {
        // Helpers print why on stdout ("credentials not found in native keychain") or stderr; one
        // line of each, never an answer (a failing helper gives none).
        let said = first_line(&stderr).or_else(|| first_line(&stdout)).map(|l| format!(": {l}")).unwrap_or_default();
        return Err(HelperError::Failed {
            program: name,
            server: server.to_string(),
            status: status.to_string(),
            stderr: said,
        });
    }
    parse_answer(&stdout).map_err(|not| match not {
        NotAnswer::IdentityToken => HelperError::IdentityToken { program: name.clone(), server: server.to_string() },
        NotAnswer::Malformed => HelperError::Answer { program: name.clone(), server: server.to_string() },
    })
}

/// Why a helper's output is no username and password.
#[derive(Debug, PartialEq, Eq)]
enum NotAnswer {
    IdentityToken,
    Malformed,
}

/// The answer's username and secret (serde's own messages are not used: they quote the value).
fn parse_answer(bytes: &[u8]) -> Result<(String, Secret), NotAnswer> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    if bytes.len() as u64 > MAX_ANSWER_BYTES {
        return Err(NotAnswer::Malformed);
    }
    let answer: Answer = serde_json::from_slice(bytes).map_err(|_| NotAnswer::Malformed)?;
    if answer.username == "<token>" {
        return Err(NotAnswer::IdentityToken);
    }
    if answer.secret.is_empty() {
        return Err(NotAnswer::Malformed);
    }
    Ok((answer.username, Secret::new(answer.secret)))
}

/// The first non-empty line of a helper's output, at most 200 characters.
fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(builder_monitor_core::text::clip(line, 200).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_without_quoting_them() {
        let (user, secret) = parse_answer(br#"{"ServerURL":"x","Username":"AWS","Secret":"s3cr3t"}"#).unwrap();
        assert_eq!((user.as_str(), secret.expose()), ("AWS", "s3cr3t"));
        let token = parse_answer(br#"{"Username":"<token>","Secret":"refresh"}"#);
        assert_eq!(token.unwrap_err(), NotAnswer::IdentityToken);
        for bad in [&br#"{"Username":"u","Secret":""}"#[..], br#"{"Username":"u","Secret":5}"#, b"not found"] {
            assert_eq!(parse_answer(bad).unwrap_err(), NotAnswer::Malformed);
        }
    }
}
