//! `[runner.exec]`: the argv templates the `exec` runner fills (without a shell) for rebuilds,
//! rebases and, when `deploy` is set, every deploy; and the `exec` runner's answers ([`FACTS`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::super::{DurationText, Validator};
use super::RunnerKind;
use super::facts::{AfterRestart, BackendKind, EVERY_KIND, Facts, RebasePath};
use builder_monitor_core::template;

/// The `exec` runner's answers: a command retried by the daemon, stopped and run again after a
/// restart (`Runner::recover` stops its process group first if it still lives).
pub const FACTS: Facts = Facts {
    backend: BackendKind::Runner(RunnerKind::Exec),
    name: "exec",
    setting: "[runner] type = \"exec\"",
    permissions: &[],
    kinds: EVERY_KIND,
    retries: true,
    after_restart: AfterRestart::RunAgain,
    needs_app_digest: false,
    path: RebasePath::Runner,
    on_cluster: false,
    pools: false,
};

#[derive(Debug, Clone, PartialEq)]
pub struct ExecSettings {
    /// argv templates, run without a shell.
    pub rebuild: Vec<String>,
    pub rebase: Vec<String>,
    /// A deploy's command (`{digest}`, `{reference}` besides the others); empty: deploys go to
    /// Kubernetes workloads.
    pub deploy: Vec<String>,
    pub timeout: Duration,
    /// Absolute: a relative one would depend on where the daemon was started from.
    pub working_dir: PathBuf,
    pub env: BTreeMap<String, String>,
    /// Variables of the daemon's environment a command also gets (besides PATH, HOME and LANG).
    pub pass_env: Vec<String>,
}

/// Placeholders the exec templates may use.
pub const PLACEHOLDERS: &[&str] =
    &["image", "builder", "run_image", "source", "revision", "sub_path", "change_id", "action", "name"];

/// Placeholders the `deploy` template may use: [`PLACEHOLDERS`], then the digest deployed
/// (`sha256:…`) and its reference (`repo@sha256:…`).
pub const DEPLOY_PLACEHOLDERS: &[&str] = &[
    "image",
    "builder",
    "run_image",
    "source",
    "revision",
    "sub_path",
    "change_id",
    "action",
    "name",
    "digest",
    "reference",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::config) struct RawExec {
    rebuild: Option<Spanned<Vec<String>>>,
    rebase: Option<Spanned<Vec<String>>>,
    deploy: Option<Spanned<Vec<String>>>,
    timeout: Option<Spanned<DurationText>>,
    working_dir: Option<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    pass_env: Option<Spanned<Vec<String>>>,
}

/// `NAME` as a shell would accept it: a letter or `_`, then letters, digits and `_`.
fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The directory a command runs in, absolute: the config's own directory is `""` for a bare file
/// name (`--config ex.toml`), which no process can be started in.
fn absolute_dir(dir: PathBuf) -> PathBuf {
    let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
    dir.canonicalize().or_else(|_| std::path::absolute(&dir)).unwrap_or(dir)
}

/// What is wrong with a template argument's placeholders (`known` being the ones the template may
/// use): each unknown one, or an unclosed `{`.
fn placeholder_errors(arg: &str, what: &str, known: &[&str]) -> Vec<String> {
    match template::pieces(arg) {
        Ok(pieces) => pieces
            .into_iter()
            .filter_map(|piece| match piece {
                template::Piece::Placeholder(name) if !known.contains(&name) => Some(format!(
                    "unknown placeholder {{{name}}} in `{what}` (known: {}; write {{{{ and }}}} for literal braces)",
                    known.join(", ")
                )),
                _ => None,
            })
            .collect(),
        Err(err) => vec![format!("`{what}`: {err}")],
    }
}

impl Validator<'_> {
    pub(in crate::config) fn exec(
        &mut self,
        raw: RawExec,
        span: std::ops::Range<usize>,
        rebase_path: RebasePath,
        kind: RunnerKind,
    ) -> Option<ExecSettings> {
        let errors_before = self.diagnostics.len();
        let argv = |v: &mut Self, template: &Option<Spanned<Vec<String>>>, what: &str, known: &[&str]| -> Vec<String> {
            match template {
                None => {
                    v.error(span.clone(), format!("[runner.exec] needs `{what}` (an argv array)"));
                    Vec::new()
                }
                Some(t) if t.get_ref().is_empty() || t.get_ref()[0].trim().is_empty() => {
                    v.error(t.span(), format!("`{what}` must name a program"));
                    Vec::new()
                }
                Some(t) => {
                    for arg in t.get_ref() {
                        for problem in placeholder_errors(arg, what, known) {
                            v.error(t.span(), problem);
                        }
                    }
                    t.get_ref().clone()
                }
            }
        };
        // A table for deploys alone needs no build commands, unless the runner runs them.
        let builds = raw.deploy.is_none() || kind == RunnerKind::Exec;
        let rebuild = match &raw.rebuild {
            None if !builds => Vec::new(),
            template => argv(self, template, "rebuild", PLACEHOLDERS),
        };
        // Rebases done in the daemon need no command.
        let rebase = match (&raw.rebase, rebase_path) {
            (None, RebasePath::Registry) => Vec::new(),
            (None, _) if !builds => Vec::new(),
            (template, _) => argv(self, template, "rebase", PLACEHOLDERS),
        };
        let deploy = match &raw.deploy {
            None => Vec::new(),
            template => argv(self, template, "deploy", DEPLOY_PLACEHOLDERS),
        };
        let timeout = match &raw.timeout {
            Some(t) => self.positive_duration(t, "timeout").unwrap_or_default(),
            None => Duration::from_secs(3600),
        };
        let working_dir = match &raw.working_dir {
            Some(w) => self.path(w.get_ref()),
            None => self.base.clone(),
        };
        let pass_env = raw.pass_env.map(|names| {
            for name in names.get_ref().iter().filter(|n| !is_variable_name(n)) {
                self.error(names.span(), format!("pass_env: {name:?} is not an environment variable name"));
            }
            names.into_inner()
        });
        (self.diagnostics.len() == errors_before).then_some(ExecSettings {
            rebuild,
            rebase,
            deploy,
            timeout,
            working_dir: absolute_dir(working_dir),
            env: raw.env,
            pass_env: pass_env.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders() {
        let errors = |arg| placeholder_errors(arg, "rebuild", PLACEHOLDERS);
        assert!(errors("{image}").is_empty());
        assert!(errors("--builder={builder}:{revision}").is_empty());
        assert!(errors("{imge}")[0].starts_with("unknown placeholder {imge} in `rebuild` (known: image,"));
        assert!(errors("{oops")[0].contains("`{` without a closing `}`"), "{:?}", errors("{oops"));
        assert!(errors("plain").is_empty());
        // Doubled braces are literal: a shell group and a shell variable need no placeholder.
        assert!(errors("{{ make; }} && echo ${{HOME}}").is_empty());
        assert!(errors("{ make; }")[0].starts_with("unknown placeholder { make; }"));
        assert!(errors("{digest}")[0].starts_with("unknown placeholder {digest} in `rebuild`"));
        let deploy = |arg| placeholder_errors(arg, "deploy", DEPLOY_PLACEHOLDERS);
        assert!(deploy("{image}={reference} ({digest}, {{x}})").is_empty());
        assert!(deploy("{ref}")[0].ends_with("(known: image, builder, run_image, source, revision, sub_path, change_id, action, name, digest, reference; write {{ and }} for literal braces)"));
        assert_eq!(&DEPLOY_PLACEHOLDERS[..PLACEHOLDERS.len()], PLACEHOLDERS, "the others' placeholders, then its own");
    }

    #[test]
    fn variable_names() {
        for ok in ["DOCKER_CONFIG", "_x", "a1"] {
            assert!(is_variable_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A=B", "A B", "É"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_bare_config_file_name_runs_commands_in_the_current_directory() {
        let config = crate::config::Config::parse(
            std::path::Path::new("ex.toml"),
            "[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n",
        )
        .unwrap();
        let dir = &config.runner.exec.unwrap().working_dir;
        assert!(dir.is_absolute(), "{}", dir.display());
        assert_eq!(dir, &std::env::current_dir().unwrap().canonicalize().unwrap());
    }
}
