//! `[[images]]` (app images built from watched builders, and how each reacts to a move) and
//! `[runner]` (how rebuilds and rebases run: not at all, local commands, or on Kubernetes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::DurationText;

use super::kubernetes::{KubeRunnerSettings, RawKubeRunner};
use super::{BuilderSettings, Validator};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::template;

use builder_monitor_core::plan::{ActionKind, PlannedImage};
pub use builder_monitor_core::plan::{Policy, Scheduling, Source, Toleration};
use builder_monitor_core::rollout::Rollout;

#[derive(Debug, Clone, PartialEq)]
pub struct ImageSettings {
    pub name: String,
    /// The `[[builders]]` name it is built with.
    pub builder: String,
    /// The app image tag.
    pub image: ImageRef,
    pub source: Option<Source>,
    /// Build-time environment.
    pub env: BTreeMap<String, String>,
    pub policy: Policy,
    pub scheduling: Scheduling,
    /// Roll-out order within a change: wave N starts once every lower wave has succeeded.
    pub wave: u32,
    /// Its actions wait for a person's approval, whatever their kind.
    pub approve: bool,
    /// The workloads its new digests are deployed to.
    pub deploy: Vec<builder_monitor_core::deploy::Workload>,
    /// What a failed deploy puts back; none: `[rollout] undo`.
    pub undo: Option<builder_monitor_core::deploy::Undo>,
}

/// The wave of an `[[images]]` entry without one; 0 is left for canaries.
pub const DEFAULT_WAVE: u32 = 1;

impl ImageSettings {
    /// What a failed deploy of it puts back.
    pub fn undo(&self, rollout: &Rollout) -> builder_monitor_core::deploy::Undo {
        self.undo.unwrap_or(rollout.undo)
    }

    /// Whether an action of `kind` for this image waits for approval.
    pub fn needs_approval(&self, kind: ActionKind, rollout: &Rollout) -> bool {
        self.approve || rollout.approve.contains(&kind)
    }
}

impl PlannedImage for ImageSettings {
    fn name(&self) -> &str {
        &self.name
    }
    fn builder(&self) -> &str {
        &self.builder
    }
    fn policy(&self) -> Policy {
        self.policy
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerKind {
    /// Plan and record actions, never run them (a dry run).
    None,
    /// Local commands.
    Exec,
    /// A `batch/v1` Job per action.
    Kubernetes,
    /// A `kpack.io/v1alpha2` Build per action.
    Kpack,
}

impl RunnerKind {
    /// Every runner type, as the docs list them.
    pub const ALL: [RunnerKind; 4] = [RunnerKind::None, RunnerKind::Exec, RunnerKind::Kubernetes, RunnerKind::Kpack];

    pub fn as_str(self) -> &'static str {
        match self {
            RunnerKind::None => "none",
            RunnerKind::Exec => "exec",
            RunnerKind::Kubernetes => "kubernetes",
            RunnerKind::Kpack => "kpack",
        }
    }
}

/// Which path a `rebase` action takes (`[runner] rebase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RebasePath {
    /// The configured runner (a command, Job or kpack Build), like a rebuild.
    #[default]
    Runner,
    /// In the daemon, by registry writes only (`crate::rebase`), whatever the runner type.
    Registry,
}

impl RebasePath {
    pub fn as_str(self) -> &'static str {
        match self {
            RebasePath::Runner => "runner",
            RebasePath::Registry => "registry",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunnerSettings {
    pub kind: RunnerKind,
    /// Where `rebase` actions run.
    pub rebase: RebasePath,
    pub max_concurrent: usize,
    /// Tries per action; a failed try is retried after `backoff`, doubling.
    pub max_attempts: u32,
    pub backoff: Duration,
    pub exec: Option<ExecSettings>,
    /// For the `kubernetes` and `kpack` runners.
    pub kubernetes: Option<KubeRunnerSettings>,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        RunnerSettings {
            kind: RunnerKind::None,
            rebase: RebasePath::Runner,
            max_concurrent: 2,
            max_attempts: 3,
            backoff: Duration::from_secs(30),
            exec: None,
            kubernetes: None,
        }
    }
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawImage {
    name: Spanned<String>,
    builder: Spanned<String>,
    image: Spanned<String>,
    source: Option<Spanned<Source>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    policy: Option<Spanned<String>>,
    scheduling: Option<Spanned<Scheduling>>,
    wave: Option<Spanned<i64>>,
    approve: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRunner {
    #[serde(rename = "type")]
    kind: Option<Spanned<String>>,
    rebase: Option<Spanned<String>>,
    max_concurrent: Option<Spanned<i64>>,
    max_attempts: Option<Spanned<i64>>,
    backoff: Option<Spanned<DurationText>>,
    exec: Option<Spanned<RawExec>>,
    kubernetes: Option<RawKubeRunner>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExec {
    rebuild: Option<Spanned<Vec<String>>>,
    rebase: Option<Spanned<Vec<String>>>,
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

/// What is wrong with a template argument's placeholders: each unknown one, or an unclosed `{`.
fn placeholder_errors(arg: &str, what: &str) -> Vec<String> {
    match template::pieces(arg) {
        Ok(pieces) => pieces
            .into_iter()
            .filter_map(|piece| match piece {
                template::Piece::Placeholder(name) if !PLACEHOLDERS.contains(&name) => Some(format!(
                    "unknown placeholder {{{name}}} in `{what}` (known: {}; write {{{{ and }}}} for literal braces)",
                    PLACEHOLDERS.join(", ")
                )),
                _ => None,
            })
            .collect(),
        Err(err) => vec![format!("`{what}`: {err}")],
    }
}

impl<'a> Validator<'a> {
    pub(super) fn images(
        &mut self,
        elements: super::Elements<'a>,
        builders: Option<&[BuilderSettings]>,
    ) -> Result<Option<Vec<ImageSettings>>, super::NotAlone> {
        let mut names = super::Names::default();
        let mut out = Vec::new();
        let ok = self.each_element(elements, "images", |v, raw: RawImage| {
            let unique = v.unique_name(&mut names, &raw.name, "image");
            match v.image(raw, builders) {
                Some(i) => out.push(i),
                None => return false,
            }
            unique
        })?;
        out.shrink_to_fit();
        Ok(ok.then_some(out))
    }

    fn image(&mut self, raw: RawImage, builders: Option<&[BuilderSettings]>) -> Option<ImageSettings> {
        let errors_before = self.diagnostics.len();
        if let Some(builders) = builders
            && !builders.iter().any(|b| &b.name == raw.builder.get_ref())
        {
            let known: Vec<&str> = builders.iter().map(|b| b.name.as_str()).collect();
            self.error(
                raw.builder.span(),
                format!("unknown builder \"{}\" (configured: {})", raw.builder.get_ref(), known.join(", ")),
            );
        }
        let image = match ImageRef::parse(raw.image.get_ref()) {
            Ok(image) if image.digest().is_some() => {
                self.error(raw.image.span(), "an app image is a tag the runner pushes to, not a digest");
                None
            }
            Ok(image) => Some(image),
            Err(err) => {
                self.error(raw.image.span(), format!("invalid image reference \"{}\": {err}", raw.image.get_ref()));
                None
            }
        };
        let policy = match raw.policy.as_ref().map(|p| (p.get_ref().as_str(), p.span())) {
            None | Some(("auto", _)) => Some(Policy::Auto),
            Some(("rebuild", _)) => Some(Policy::Rebuild),
            Some(("rebase", _)) => Some(Policy::Rebase),
            Some(("notify", _)) => Some(Policy::Notify),
            Some((other, span)) => {
                self.error(span, format!("unknown policy \"{other}\", expected auto, rebuild, rebase or notify"));
                None
            }
        };
        if let Some(source) = &raw.source
            && source.get_ref().git.trim().is_empty()
        {
            self.error(source.span(), "source.git must name a repository");
        }
        if let Some(s) = &raw.scheduling {
            if let Some(affinity) = &s.get_ref().affinity {
                self.affinity(&Spanned::new(s.span(), affinity.clone()));
            }
            if self.kpack && s.get_ref().node_selector.contains_key("kubernetes.io/os") {
                self.error(s.span(), "kpack rejects a nodeSelector with kubernetes.io/os (it sets the os itself)");
            }
        }
        let wave = match &raw.wave {
            None => DEFAULT_WAVE,
            Some(w) => u32::try_from(*w.get_ref()).unwrap_or_else(|_| {
                self.error(w.span(), format!("wave must be between 0 and {}", u32::MAX));
                DEFAULT_WAVE
            }),
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(ImageSettings {
            name: raw.name.into_inner(),
            builder: raw.builder.into_inner(),
            image: image?,
            source: raw.source.map(Spanned::into_inner),
            env: raw.env,
            policy: policy?,
            scheduling: raw.scheduling.map(Spanned::into_inner).unwrap_or_default(),
            wave,
            approve: raw.approve.unwrap_or(false),
            deploy: Vec::new(),
            undo: None,
        })
    }

    pub(super) fn runner(&mut self, raw: RawRunner) -> Option<RunnerSettings> {
        let errors_before = self.diagnostics.len();
        let mut s = RunnerSettings::default();
        if let Some(kind) = &raw.kind {
            match RunnerKind::ALL.into_iter().find(|k| k.as_str() == kind.get_ref()) {
                Some(known) => s.kind = known,
                None => {
                    let names: Vec<&str> = RunnerKind::ALL.iter().map(|k| k.as_str()).collect();
                    let (last, rest) = names.split_last().expect("runner types");
                    let expected = format!("{} or {last}", rest.join(", "));
                    self.error(kind.span(), format!("unknown runner type \"{}\", expected {expected}", kind.get_ref()))
                }
            }
        }
        self.kpack = s.kind == RunnerKind::Kpack;
        match raw.rebase.as_ref().map(|r| (r.get_ref().as_str(), r.span())) {
            None | Some(("runner", _)) => {}
            Some(("registry", _)) => s.rebase = RebasePath::Registry,
            Some((other, span)) => {
                self.error(span, format!("unknown rebase path \"{other}\", expected registry or runner"))
            }
        }
        if let Some(m) = &raw.max_concurrent {
            match usize::try_from(*m.get_ref()) {
                Ok(n) if (1..=256).contains(&n) => s.max_concurrent = n,
                _ => self.error(m.span(), "max_concurrent must be between 1 and 256"),
            }
        }
        if let Some(m) = &raw.max_attempts {
            match u32::try_from(*m.get_ref()) {
                Ok(n) if (1..=100).contains(&n) => s.max_attempts = n,
                _ => self.error(m.span(), "max_attempts must be between 1 and 100"),
            }
        }
        if let Some(b) = &raw.backoff
            && let Some(d) = self.positive_duration(b, "backoff")
        {
            s.backoff = d;
        }
        if let Some(exec) = raw.exec {
            let span = exec.span();
            s.exec = self.exec(exec.into_inner(), span, s.rebase);
        }
        let kube = matches!(s.kind, RunnerKind::Kubernetes | RunnerKind::Kpack);
        s.kubernetes = match raw.kubernetes {
            Some(k) => self.kube_runner(k, s.kind == RunnerKind::Kpack),
            None if kube => self.kube_runner(RawKubeRunner::default(), false),
            None => None,
        };
        if s.kind == RunnerKind::Exec && s.exec.is_none() && self.diagnostics.len() == errors_before {
            let span = raw.kind.as_ref().map(|k| k.span()).unwrap_or(0..0);
            self.error(span, "runner type \"exec\" needs a [runner.exec] table with rebuild and rebase commands");
        }
        (self.diagnostics.len() == errors_before).then_some(s)
    }

    fn exec(&mut self, raw: RawExec, span: std::ops::Range<usize>, rebase_path: RebasePath) -> Option<ExecSettings> {
        let errors_before = self.diagnostics.len();
        let argv = |v: &mut Self, template: &Option<Spanned<Vec<String>>>, what: &str| -> Vec<String> {
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
                        for problem in placeholder_errors(arg, what) {
                            v.error(t.span(), problem);
                        }
                    }
                    t.get_ref().clone()
                }
            }
        };
        let rebuild = argv(self, &raw.rebuild, "rebuild");
        // Rebases done in the daemon need no command.
        let rebase = match (&raw.rebase, rebase_path) {
            (None, RebasePath::Registry) => Vec::new(),
            (template, _) => argv(self, template, "rebase"),
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
            deploy: Vec::new(),
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
        let errors = |arg| placeholder_errors(arg, "rebuild");
        assert!(errors("{image}").is_empty());
        assert!(errors("--builder={builder}:{revision}").is_empty());
        assert!(errors("{imge}")[0].starts_with("unknown placeholder {imge} in `rebuild` (known: image,"));
        assert!(errors("{oops")[0].contains("`{` without a closing `}`"), "{:?}", errors("{oops"));
        assert!(errors("plain").is_empty());
        // Doubled braces are literal: a shell group and a shell variable need no placeholder.
        assert!(errors("{{ make; }} && echo ${{HOME}}").is_empty());
        assert!(errors("{ make; }")[0].starts_with("unknown placeholder { make; }"));
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

    /// Every runner type parses by its name; any other is refused with the list of them.
    #[test]
    fn runner_types_are_their_names() {
        let parse = |kind: &str| {
            let text = format!("[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n[runner]\ntype = \"{kind}\"\n");
            crate::config::Config::parse(std::path::Path::new("/c.toml"), &text)
        };
        for kind in [RunnerKind::None, RunnerKind::Kubernetes, RunnerKind::Kpack] {
            assert_eq!(parse(kind.as_str()).unwrap().runner.kind, kind);
        }
        let refused = parse("nomad").unwrap_err().to_string();
        assert!(
            refused.contains("unknown runner type \"nomad\", expected none, exec, kubernetes or kpack"),
            "{refused}"
        );
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
