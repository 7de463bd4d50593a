//! The `exec` runner's process handling: argv templates expanded without a shell, a process group
//! killed whole on timeout, and the tail of the output kept for the ledger.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::Outcome;
use crate::config::ExecSettings;

/// Output kept per action (the end of stdout and stderr, interleaved as read).
pub const TAIL_BYTES: usize = 4096;

/// Replaces every `{name}` of `values` in each argument.
pub fn expand(template: &[String], values: &BTreeMap<&str, String>) -> Vec<String> {
    template
        .iter()
        .map(|arg| values.iter().fold(arg.clone(), |acc, (name, value)| acc.replace(&format!("{{{name}}}"), value)))
        .collect()
}

/// A bounded tail of everything read.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > TAIL_BYTES {
            let cut = self.0.len() - TAIL_BYTES;
            self.0.drain(..cut);
        }
    }
}

async fn drain(mut pipe: impl AsyncRead + Unpin, tail: std::sync::Arc<std::sync::Mutex<Tail>>) {
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail.lock().unwrap_or_else(|e| e.into_inner()).push(&buf[..n]),
        }
    }
}

/// Runs `argv` in its own process group; on timeout the whole group is killed.
pub async fn run(settings: &ExecSettings, argv: &[String], env: &BTreeMap<String, String>) -> Outcome {
    let Some((program, args)) = argv.split_first() else {
        return Outcome { success: false, detail: "empty command".into(), output_tail: String::new() };
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(&settings.working_dir)
        .envs(&settings.env)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            return Outcome {
                success: false,
                detail: format!("cannot start `{program}`: {err}"),
                output_tail: String::new(),
            };
        }
    };
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Tail::default()));
    let readers = [
        child.stdout.take().map(|p| tokio::spawn(drain(p, tail.clone()))),
        child.stderr.take().map(|p| tokio::spawn(drain(p, tail.clone()))),
    ];
    let pid = child.id();
    let status = match tokio::time::timeout(settings.timeout, child.wait()).await {
        Ok(status) => status.map_err(|e| e.to_string()),
        Err(_) => {
            if let Some(pid) = pid {
                kill_group(pid).await;
            }
            let _ = child.kill().await;
            let _ = child.wait().await;
            Err(format!("timed out after {}; process group killed", humantime::format_duration(settings.timeout)))
        }
    };
    // A process that outlived the group could hold a pipe open: do not wait for it forever.
    for reader in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    }
    let output_tail = String::from_utf8_lossy(&tail.lock().unwrap_or_else(|e| e.into_inner()).0).into_owned();
    match status {
        Ok(s) if s.success() => Outcome { success: true, detail: "exit status 0".into(), output_tail },
        Ok(s) => {
            let detail = match s.code() {
                Some(code) => format!("exit status {code}"),
                None => {
                    #[cfg(unix)]
                    {
                        use std::os::unix::process::ExitStatusExt;
                        format!("killed by signal {}", s.signal().unwrap_or_default())
                    }
                    #[cfg(not(unix))]
                    {
                        "killed".to_string()
                    }
                }
            };
            Outcome { success: false, detail, output_tail }
        }
        Err(detail) => Outcome { success: false, detail, output_tail },
    }
}

/// SIGKILL to the whole process group (the command and everything it started), through `kill(1)`
/// so the crate stays free of unsafe code.
async fn kill_group(pgid: u32) {
    let result = tokio::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(err) = result {
        tracing::warn!(pgid, error = %err, "cannot kill the process group");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(timeout: Duration) -> ExecSettings {
        ExecSettings {
            rebuild: vec![],
            rebase: vec![],
            timeout,
            working_dir: std::env::temp_dir(),
            env: BTreeMap::new(),
        }
    }

    #[test]
    fn templates_expand_every_placeholder() {
        let values: BTreeMap<&str, String> =
            [("image", "r/app:1".to_string()), ("builder", "r/b@sha256:x".to_string())].into();
        let argv =
            expand(&["pack".into(), "{image}".into(), "--builder={builder}".into(), "{unknown}".into()], &values);
        assert_eq!(argv, ["pack", "r/app:1", "--builder=r/b@sha256:x", "{unknown}"]);
    }

    #[tokio::test]
    async fn exit_status_and_output_tail() {
        let s = settings(Duration::from_secs(10));
        let ok = run(&s, &["sh".into(), "-c".into(), "echo out; echo err >&2".into()], &BTreeMap::new()).await;
        assert!(ok.success);
        assert!(ok.output_tail.contains("out") && ok.output_tail.contains("err"));
        let failed = run(&s, &["sh".into(), "-c".into(), "exit 3".into()], &BTreeMap::new()).await;
        assert_eq!((failed.success, failed.detail.as_str()), (false, "exit status 3"));
        let missing = run(&s, &["/nonexistent/pack".into()], &BTreeMap::new()).await;
        assert!(missing.detail.starts_with("cannot start `/nonexistent/pack`"), "{}", missing.detail);
        let env = [("GREETING".to_string(), "hello".to_string())].into();
        let with_env = run(&s, &["sh".into(), "-c".into(), "printf %s \"$GREETING\"".into()], &env).await;
        assert_eq!(with_env.output_tail, "hello");
        let long = run(
            &s,
            &["sh".into(), "-c".into(), "head -c 100000 /dev/zero | tr '\\\\0' x; echo END".into()],
            &BTreeMap::new(),
        )
        .await;
        assert_eq!(long.output_tail.len(), TAIL_BYTES);
        assert!(long.output_tail.ends_with("END\n"));
    }
}
