//! The `exec` runner: a local command per action, its argv template filled without a shell, a
//! clean environment, a process group killed whole (and stopped before it runs again after a
//! restart), and the scrubbed tail of the output for the ledger.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use super::attempt::{Attempt, Next};
use super::carrier::{ActionRef, Backend, Carrier, Clusters, Context};
use super::{Outcome, PreviewError, RunnerError, Secrets, group};
use crate::config::{Config, ExecSettings, Facts, RebasePath};
use crate::ledger::{ClaimedAction, ProcessGroup};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::template;

/// The `exec` runner (its answers: `crate::config`'s `[runner.exec]` table).
pub struct Commands;

impl Backend for Commands {
    fn facts(&self) -> &'static Facts {
        crate::config::RunnerKind::Exec.facts()
    }

    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError> {
        Ok(command_preview(config, action, target))
    }

    fn start(&self, config: &Config, _: &Clusters, _: CancellationToken) -> Result<Arc<dyn Carrier>, RunnerError> {
        let settings = config.runner.exec.clone().ok_or(RunnerError::MissingSettings("runner.exec"))?;
        Ok(Arc::new(Started { settings }))
    }
}

/// The `exec` runner, started: its settings.
struct Started {
    settings: ExecSettings,
}

impl Carrier for Started {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt> {
        if action.kind == ActionKind::Deploy {
            // A deploy command moves workloads, not the tag: nothing to announce or read after.
            return Box::pin(async move {
                let (outcome, retryable) = self.carry_out(ctx, action, target).await;
                let next = if retryable { Next::Retry } else { Next::Final };
                let mut attempt = Attempt::new(outcome, next, Default::default());
                attempt.moved = false;
                attempt
            });
        }
        Box::pin(ctx.pushed(action, target, verified, self.carry_out(ctx, action, target)))
    }
}

impl Started {
    /// The command's outcome, and whether trying again could help (not for a command that cannot
    /// be started).
    async fn carry_out(&self, ctx: &Context, action: &ClaimedAction, target: &ActionTarget) -> (Outcome, bool) {
        let argv = command(&self.settings, &super::reference(action), target);
        let record = |process| async move {
            // Without the record a restart cannot stop this command before running it again.
            match ctx.ledger.record_process(&action.key, process).await {
                Ok(()) => tracing::info!(action = %action.key, process_group = process.id, "command started"),
                Err(err) => {
                    tracing::error!(action = %action.key, error = %err, "cannot record the command's process group")
                }
            }
        };
        match run(&self.settings, &argv, &target.env, &ctx.secrets, record).await {
            Ok(outcome) => (outcome, true),
            Err(err) => (Outcome { success: false, detail: err.to_string(), output_tail: String::new() }, false),
        }
    }
}

/// The `exec` runner's command for an action: its argv template with every placeholder filled.
pub fn command(settings: &ExecSettings, action: &ActionRef<'_>, target: &ActionTarget) -> Vec<String> {
    let template = match action.kind {
        ActionKind::Rebuild => &settings.rebuild,
        ActionKind::Rebase => &settings.rebase,
        ActionKind::Deploy => &settings.deploy,
        // Never routed here (a gitops action runs in the daemon): no command.
        ActionKind::Gitops => return Vec::new(),
    };
    let source = target.source.as_ref();
    let values: BTreeMap<&str, String> = [
        ("image", target.image.clone()),
        ("builder", target.builder.clone()),
        ("run_image", target.run_image.clone().unwrap_or_default()),
        ("source", source.map(|s| s.git.clone()).unwrap_or_default()),
        ("revision", source.map(|s| s.revision.clone()).unwrap_or_default()),
        ("sub_path", source.and_then(|s| s.sub_path.clone()).unwrap_or_default()),
        ("change_id", action.change_id.to_string()),
        ("action", action.kind.as_str().to_string()),
        ("name", action.image.to_string()),
        ("digest", target.plan.deploy().map(|d| d.digest.clone()).unwrap_or_default()),
        ("reference", target.plan.deploy().map(|d| d.reference.clone()).unwrap_or_default()),
    ]
    .into();
    expand(template, &values)
}

/// `build-spec` for a runner that creates no object: the target, and the command a
/// `[runner.exec]` table fills for it (none without one).
pub fn command_preview(config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Value {
    let argv = config.runner.exec.as_ref().map(|e| command(e, action, target));
    let path = (action.kind == ActionKind::Rebase).then_some(RebasePath::Runner.as_str());
    serde_json::json!({ "runner": config.runner.kind.as_str(), "path": path, "target": target, "command": argv })
}

/// Output kept per action (the end of stdout and stderr, interleaved as read).
pub const TAIL_BYTES: usize = 4096;

/// Each argument with its `{name}` placeholders filled from `values` and `{{`/`}}` made single
/// braces (`core::template`).
pub fn expand(template: &[String], values: &BTreeMap<&str, String>) -> Vec<String> {
    template.iter().map(|arg| template::expand(arg, |name| values.get(name).map(String::as_str))).collect()
}

/// A bounded tail of everything read: `TAIL_BYTES` and a margin, so a secret cut by the end of
/// the kept text is still whole when it is scrubbed.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > TAIL_BYTES + SCRUB_MARGIN {
            let cut = self.0.len() - TAIL_BYTES - SCRUB_MARGIN;
            self.0.drain(..cut);
        }
    }

    /// The last `TAIL_BYTES` of the output, scrubbed of every secret.
    fn text(&self, secrets: &Secrets) -> String {
        let scrubbed = secrets.scrub(&String::from_utf8_lossy(&self.0));
        let mut start = scrubbed.len().saturating_sub(TAIL_BYTES);
        while !scrubbed.is_char_boundary(start) {
            start += 1;
        }
        scrubbed[start..].to_string()
    }
}

/// Secrets longer than this could leave their beginning in a tail (none of ours is that long).
const SCRUB_MARGIN: usize = 4096;

async fn drain(mut pipe: impl AsyncRead + Unpin, tail: std::sync::Arc<std::sync::Mutex<Tail>>) {
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => tail.lock().unwrap_or_else(|e| e.into_inner()).push(&buf[..n]),
        }
    }
}

/// A command that could not be started at all (trying again will not help).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("empty command")]
    Empty,
    #[error("cannot start `{program}` in {}: {source}", dir.display())]
    Spawn { program: String, dir: std::path::PathBuf, source: std::io::Error },
}

/// The variables a command gets from the daemon's own environment, besides the configured ones.
const INHERITED: &[&str] = &["PATH", "HOME", "LANG"];

/// Runs `argv` in its own process group with a clean environment: `PATH`, `HOME` and `LANG`, the
/// variables named in `pass_env`, then `settings.env` and the image's `env`. `started` is told the
/// group as soon as it exists (before the command ends). The group is killed whole on timeout,
/// when the command ends, and when this future is dropped; on Linux the command also dies with
/// the daemon.
pub async fn run<F>(
    settings: &ExecSettings,
    argv: &[String],
    env: &BTreeMap<String, String>,
    secrets: &Secrets,
    started: impl FnOnce(ProcessGroup) -> F,
) -> Result<Outcome, StartError>
where
    F: Future<Output = ()>,
{
    let Some((program, args)) = argv.split_first() else {
        return Err(StartError::Empty);
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(&settings.working_dir).env_clear();
    for name in INHERITED.iter().copied().chain(settings.pass_env.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .envs(&settings.env)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    group::die_with_daemon(&mut command);
    let mut child = command.spawn().map_err(|source| StartError::Spawn {
        program: program.clone(),
        dir: settings.working_dir.clone(),
        source,
    })?;
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Tail::default()));
    let readers = [
        child.stdout.take().map(|p| tokio::spawn(drain(p, tail.clone()))),
        child.stderr.take().map(|p| tokio::spawn(drain(p, tail.clone()))),
    ];
    // `id` is `None` only once the child was reaped, which nothing has done yet.
    let leader = child.id().unwrap_or_default();
    let guard = group::KillOnDrop(leader);
    started(group::of_leader(leader)).await;
    let status = match tokio::time::timeout(settings.timeout, child.wait()).await {
        Ok(status) => status.map_err(|e| e.to_string()),
        Err(_) => {
            group::kill(leader);
            let _ = child.kill().await;
            let _ = child.wait().await;
            Err(format!("timed out after {}; process group killed", humantime::format_duration(settings.timeout)))
        }
    };
    // Whatever the command left running goes with it, and with it the pipes it held open.
    drop(guard);
    // A process that left the group could still hold a pipe open: do not wait for it forever.
    for reader in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    }
    let output_tail = tail.lock().unwrap_or_else(|e| e.into_inner()).text(secrets);
    Ok(match status {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exec carrier on a context of its own (a temporary ledger, a registry client nobody
    /// answers, no signing key), not a runner: a deploy command runs, its output scrubbed of the
    /// config's secrets by the context, and it moves no tag.
    #[tokio::test]
    async fn a_deploy_command_runs_on_a_context_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "hunter2-deploy-secret").unwrap();
        let text = "[registries.\"r.example.com\"]\nusername = \"u\"\npassword_file = \"pw\"\n\
                    [[builders]]\nname = \"jammy\"\nimage = \"r.example.com/cnb/builder:latest\"\n\
                    [runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n\
                    deploy = [\"sh\", \"-c\", \"echo deploying {name} with hunter2-deploy-secret\"]\n";
        let config = Arc::new(Config::parse(&dir.path().join("c.toml"), text).unwrap());
        let ledger = crate::ledger::Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let registry = crate::registry::Registry::new([], crate::metrics::Metrics::new());
        let ctx = Context::new(config.clone(), ledger, crate::schedule::Clock::System, &registry, None);
        let carrier = Commands.start(&config, &Clusters::default(), CancellationToken::new()).unwrap();
        let target: ActionTarget = serde_json::from_value(serde_json::json!({
            "image": "r.example.com/apps/app:latest",
            "builder_name": "jammy",
            "builder": "r.example.com/cnb/builder@sha256:b",
            "why": "test",
        }))
        .unwrap();
        let action = ClaimedAction {
            key: "bm-1".into(),
            change_id: "c1".into(),
            image: "app".into(),
            kind: ActionKind::Deploy,
            attempt: 1,
            target: Ok(target.clone()),
            process: None,
            progress: None,
            created: chrono::Utc::now(),
            expedited: Default::default(),
        };
        let attempt = carrier.attempt(&ctx, &action, &target, None).await;
        assert!(attempt.outcome.success, "{attempt:?}");
        assert!(!attempt.moved, "a deploy command moves no tag");
        // The carrier's own scrub (the runner scrubs again after every attempt).
        assert_eq!(attempt.outcome.output_tail.trim(), "deploying app with ***", "{attempt:?}");
    }

    fn settings(timeout: Duration) -> ExecSettings {
        ExecSettings {
            rebuild: vec![],
            rebase: vec![],
            deploy: vec![],
            timeout,
            working_dir: std::env::temp_dir(),
            env: BTreeMap::new(),
            pass_env: vec![],
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

    async fn sh(s: &ExecSettings, script: &str, env: &BTreeMap<String, String>, secrets: &Secrets) -> Outcome {
        run(s, &["sh".into(), "-c".into(), script.into()], env, secrets, |_| async {}).await.unwrap()
    }

    #[tokio::test]
    async fn exit_status_and_output_tail() {
        let s = settings(Duration::from_secs(10));
        let none = Secrets::default();
        let ok = sh(&s, "echo out; echo err >&2", &BTreeMap::new(), &none).await;
        assert!(ok.success);
        assert!(ok.output_tail.contains("out") && ok.output_tail.contains("err"));
        let failed = sh(&s, "exit 3", &BTreeMap::new(), &none).await;
        assert_eq!((failed.success, failed.detail.as_str()), (false, "exit status 3"));
        let missing = run(&s, &["/nonexistent/pack".into()], &BTreeMap::new(), &none, |_| async {}).await;
        let missing = missing.unwrap_err().to_string();
        assert!(missing.starts_with("cannot start `/nonexistent/pack` in "), "{missing}");
        assert!(matches!(run(&s, &[], &BTreeMap::new(), &none, |_| async {}).await, Err(StartError::Empty)));
        let env = [("GREETING".to_string(), "hello".to_string())].into();
        let with_env = sh(&s, "printf %s \"$GREETING\"", &env, &none).await;
        assert_eq!(with_env.output_tail, "hello");
        let long = sh(&s, "head -c 100000 /dev/zero | tr '\\0' x; echo END", &BTreeMap::new(), &none).await;
        assert_eq!(long.output_tail.len(), TAIL_BYTES);
        assert!(long.output_tail.ends_with("END\n"));
    }

    #[tokio::test]
    async fn commands_get_a_clean_environment() {
        // cargo runs tests with CARGO_* set: the daemon's environment, which a command must not see.
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let mut s = settings(Duration::from_secs(10));
        s.env = [("FROM_CONFIG".to_string(), "1".to_string())].into();
        let image = [("FROM_IMAGE".to_string(), "2".to_string())].into();
        let seen = sh(&s, "env | cut -d= -f1 | sort | tr '\\n' ' '", &image, &Secrets::default()).await;
        let mut expected: Vec<&str> = ["FROM_CONFIG", "FROM_IMAGE", "PWD"]
            .into_iter()
            .chain(INHERITED.iter().copied().filter(|n| std::env::var_os(n).is_some()))
            .collect();
        expected.sort();
        let names: Vec<&str> =
            seen.output_tail.split_whitespace().filter(|n| *n != "SHLVL" && *n != "OLDPWD").collect();
        assert_eq!(names, expected, "{}", seen.output_tail);
        s.pass_env = vec!["CARGO_PKG_NAME".into(), "BM_SURELY_UNSET".into()];
        let passed = sh(&s, "printf %s \"$CARGO_PKG_NAME\"", &BTreeMap::new(), &Secrets::default()).await;
        assert_eq!(passed.output_tail, env!("CARGO_PKG_NAME"));
    }

    #[tokio::test]
    async fn secrets_are_scrubbed_from_the_tail_even_where_it_is_cut() {
        let s = settings(Duration::from_secs(10));
        let secret = "hunter2-the-registry-password";
        let secrets = Secrets::new([secret.to_string()]);
        let env = [("PW".to_string(), secret.to_string())].into();
        let plain = sh(&s, "echo \"pw=$PW.\"", &env, &secrets).await;
        assert_eq!(plain.output_tail, "pw=***.\n");
        // The secret straddles the start of the kept tail: its end must not survive either.
        let script = format!(
            "head -c 1000 /dev/zero | tr '\\0' y; printf %s \"$PW\"; head -c {} /dev/zero | tr '\\0' x",
            TAIL_BYTES - 5
        );
        let cut = sh(&s, &script, &env, &secrets).await;
        assert_eq!(cut.output_tail.len(), TAIL_BYTES);
        assert!(cut.output_tail.starts_with("yy***x"), "{}", &cut.output_tail[..40]);
    }

    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit(')').next().unwrap_or_default().trim_start().starts_with('Z'))
    }

    #[tokio::test]
    async fn what_a_command_leaves_running_is_killed_when_it_ends_or_is_dropped() {
        let s = settings(Duration::from_secs(10));
        let none = Secrets::default();
        let ended = sh(&s, "sleep 300 >/dev/null 2>&1 & echo $!", &BTreeMap::new(), &none).await;
        let left: u32 = ended.output_tail.trim().parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(left) {
            assert!(std::time::Instant::now() < deadline, "the command's child outlived it");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let (tx, rx) = tokio::sync::oneshot::channel();
        let argv = ["sh".to_string(), "-c".into(), "sleep 300 & sleep 300".into()];
        let env = BTreeMap::new();
        let mut running = Box::pin(run(&s, &argv, &env, &none, |g| async move {
            let _ = tx.send(g);
        }));
        let group = tokio::select! {
            g = rx => g.unwrap(),
            r = &mut running => panic!("ended: {:?}", r.map(|o| o.detail)),
        };
        assert!(group::alive(group));
        drop(running);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while group::alive(group) {
            assert!(std::time::Instant::now() < deadline, "an aborted command's group outlived it");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
