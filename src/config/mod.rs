//! The TOML configuration: schema, defaults and validation.
//! Every problem in a file is reported at once, each as `FILE:LINE:COL: message`.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::Rollout;
use docker::{DockerConfig, DockerCredentials};

pub mod alerts;
mod docker;
mod duration_text;
mod gitops;
mod images;
mod kubernetes;
mod pieces;
pub mod pod_template;
mod runner;
use pieces::{Elements, NotAlone, Sections};
mod builders;
mod registries;
mod rollout;
mod secret;
mod server;
mod signing;
mod summary;
mod vulnerabilities;

pub use alerts::{AlertKind, AlertSettings, AlertUrl, DEFAULT_EVENTS, redact_url};
pub use builders::{BuilderSettings, Platform, run_image_watch, run_image_watch_named};
pub(crate) use duration_text::DurationText;
pub use gitops::{Author, FileFormat, GitAuth, GitopsFile, GitopsTarget, action_subject as gitops_subject};
pub use images::{DEFAULT_WAVE, ImageSettings, Policy, Scheduling, Source, Toleration};
pub use kubernetes::{KubeValueError, KubernetesSettings, k8s_typed, unanswered};
pub use registries::{CredentialSource, Credentials, RegistrySettings};
pub use runner::{
    AfterRestart, BackendKind, COMMITS, Cluster, DEFAULT_GIT_IMAGE, DEFAULT_PLATFORM, DEFAULT_POOL, DEPLOY_PERMISSIONS,
    DEPLOY_PLACEHOLDERS, EVERY_KIND, ExecSettings, Facts, KubeRunnerSettings, NONE, PLACEHOLDERS, PRIORITY_LABEL,
    PodTemplate, Pool, QUEUE_LABEL, REGISTRY, RebasePath, Rule, RunnerKind, RunnerSettings, WORKLOADS,
};
pub use secret::{Resolved, Secret, Secrets};
use server::RawServer;
pub use server::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_CLIENT, MAX_CONNECTIONS,
    ServerSettings,
};
pub use signing::{KeySource, SigningKeyError, SigningSettings, TrustedKey};
pub use vulnerabilities::{DEFAULT_REFRESH, OsvSource, VulnerabilitySettings};

/// Default check interval when neither `[monitor]` nor the builder sets one.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
const MAX_RETRY_AFTER_LIMIT: Duration = Duration::from_secs(24 * 3600);
/// Default random delay added before each check.
pub const DEFAULT_JITTER: Duration = Duration::from_secs(30);
/// Default number of changes kept per watch.
pub const DEFAULT_HISTORY: usize = 100;
/// Default state file, relative to the config file's directory (or to [`STATE_DIR_ENV`]).
pub const DEFAULT_STATE: &str = "builder-monitor.db";
/// The environment variable naming the directory a relative (or absent) `[monitor] state`
/// resolves against instead of the config file's: a writable data directory when the config sits
/// on a read-only mount (the Helm chart sets it to its data volume, `/var/lib/builder-monitor`).
pub const STATE_DIR_ENV: &str = "BUILDER_MONITOR_STATE_DIR";

/// The longest duration any key accepts (humantime's `1y`). The daemon adds durations to instants
/// and timestamps, and multiplies backoffs; nothing up to this bound can overflow there.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);
const MAX_DURATION_TEXT: &str = "1y";
/// Rates (`requests_per_second`, `hooks_per_second`) accepted: one per 1,000 s up to 10,000 a second.
pub const MIN_RATE: f64 = 0.001;
pub const MAX_RATE: f64 = 10_000.0;
/// Largest `burst` of a registry's rate limiter.
pub const MAX_BURST: u32 = 10_000;
/// Largest `history` (changes kept per watch).
pub const MAX_HISTORY: usize = 1_000_000;
/// Distinct platforms of an index read by default, and at most (`[monitor] max_platforms`).
pub const DEFAULT_MAX_PLATFORMS: usize = 16;
pub const MAX_MAX_PLATFORMS: usize = 256;

/// The time between two permits of a rate limiter. The rate is clamped to [`MIN_RATE`, `MAX_RATE`]
/// (which validation enforces), so no value reaching here can overflow a `Duration`.
pub fn rate_period(per_second: f64) -> Duration {
    let rate = if per_second.is_nan() { MIN_RATE } else { per_second.clamp(MIN_RATE, MAX_RATE) };
    Duration::from_secs_f64(1.0 / rate)
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from.
    pub source: PathBuf,
    pub monitor: MonitorSettings,
    /// Registries with an explicit `[registries."HOST"]` table, keyed by normalised host.
    pub registries: BTreeMap<String, RegistrySettings>,
    pub builders: Vec<BuilderSettings>,
    pub alerts: Vec<AlertSettings>,
    pub images: Vec<ImageSettings>,
    pub runner: RunnerSettings,
    pub kubernetes: KubernetesSettings,
    /// `[rollout]`: windows, approvals, `max_in_flight` (the default: none of them).
    pub rollout: Rollout,
    /// `None` when the config has no `[server]` table: no HTTP server.
    pub server: Option<ServerSettings>,
    /// `[[gitops]]`: repositories each change's digests are committed to.
    pub gitops: Vec<GitopsTarget>,
    /// `None` when the config has no `[signing]` table: nothing is signed.
    pub signing: Option<SigningSettings>,
    /// `None` when the config has no `[vulnerabilities]` table: no OSV data is read.
    pub vulnerabilities: Option<VulnerabilitySettings>,
}

#[derive(Debug, Clone)]
pub struct MonitorSettings {
    pub interval: Duration,
    pub jitter: Duration,
    pub state: StateLocation,
    /// Changes kept per watch; older ones are pruned when a new one is recorded.
    pub history: usize,
    /// Distinct platform entries of an index read (in index order); the rest are a note.
    pub max_platforms: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateLocation {
    Sqlite(PathBuf),
    /// ConfigMaps in `[kubernetes] namespace`: no volume needed.
    Kubernetes,
}

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Why a config file was rejected: every problem found, in file order. The read error is part of
/// the message, so it is not also a `source()` (which would print it twice).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read config file: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{}", render(path, diagnostics))]
    Invalid { path: PathBuf, diagnostics: Vec<Diagnostic> },
}

fn render(path: &Path, diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(|d| format!("{}:{}:{}: {}", path.display(), d.line, d.column, d.message))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads and validates a config file, resolving every secret it names.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, Secrets::Resolve)
    }

    /// Reads and validates a config file, resolving the `secrets` asked for.
    pub fn load_with(path: &Path, secrets: Secrets) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
        Self::parse_with(path, &text, secrets)
    }

    /// Validates config text; `path` names the file in errors and anchors relative paths.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        Self::parse_with(path, text, Secrets::Resolve)
    }

    /// [`Config::parse`], resolving the `secrets` asked for; a relative `[monitor] state` resolves
    /// against `$BUILDER_MONITOR_STATE_DIR` when it is set and not empty.
    pub fn parse_with(path: &Path, text: &str, secrets: Secrets) -> Result<Self, ConfigError> {
        let state_dir = std::env::var_os(STATE_DIR_ENV).filter(|dir| !dir.is_empty()).map(PathBuf::from);
        Self::parse_in(path, text, secrets, state_dir)
    }

    /// Reads and validates a config file, resolving every secret it names, and hands out what it
    /// decrypted apart from the config (`run`: the daemon gives each piece to its one user).
    pub fn load_resolved(path: &Path) -> Result<(Self, Resolved), ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|error| ConfigError::Read { path: path.to_path_buf(), error })?;
        let state_dir = std::env::var_os(STATE_DIR_ENV).filter(|dir| !dir.is_empty()).map(PathBuf::from);
        Self::parse_resolving(path, &text, Secrets::Resolve, state_dir)
    }

    /// [`Config::parse_with`] with the state directory given rather than read from the environment.
    pub fn parse_in(
        path: &Path,
        text: &str,
        secrets: Secrets,
        state_dir: Option<PathBuf>,
    ) -> Result<Self, ConfigError> {
        Self::parse_resolving(path, text, secrets, state_dir).map(|(config, _)| config)
    }

    /// [`Config::parse_in`], with what it decrypted.
    pub fn parse_resolving(
        path: &Path,
        text: &str,
        secrets: Secrets,
        state_dir: Option<PathBuf>,
    ) -> Result<(Self, Resolved), ConfigError> {
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut v = Validator {
            text,
            offset: 0,
            base,
            state_dir,
            diagnostics: Vec::new(),
            pools: Vec::new(),
            secrets,
            signed_images: Vec::new(),
            resolved: Resolved::default(),
        };
        let config = v.document(path);
        if v.diagnostics.is_empty()
            && let Some(config) = config
        {
            return Ok((config, v.resolved));
        }
        let mut diagnostics = v.diagnostics;
        diagnostics.sort_by_key(|d| (d.line, d.column));
        diagnostics.dedup();
        Err(ConfigError::Invalid { path: path.to_path_buf(), diagnostics })
    }

    /// The settings used for a registry host (its table, or the defaults).
    pub fn registry(&self, host: &str) -> RegistrySettings {
        self.registries.get(host).cloned().unwrap_or_else(|| RegistrySettings::defaults_for(host))
    }

    pub fn alert(&self, name: &str) -> Option<&AlertSettings> {
        self.alerts.iter().find(|a| a.name == name)
    }

    pub fn builder(&self, name: &str) -> Option<&BuilderSettings> {
        self.builders.iter().find(|b| b.name == name)
    }

    /// The `[[images]]` entry named `name`.
    /// Where the daemon keeps working files (the gitops targets' clones): beside a SQLite ledger,
    /// else in `$BUILDER_MONITOR_STATE_DIR`, else in the temporary directory.
    pub fn work_dir(&self) -> PathBuf {
        match &self.monitor.state {
            StateLocation::Sqlite(path) => path.parent().map(Path::to_path_buf).unwrap_or_default(),
            StateLocation::Kubernetes => std::env::var_os(STATE_DIR_ENV)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join("builder-monitor")),
        }
    }

    pub fn image(&self, name: &str) -> Option<&ImageSettings> {
        self.images.iter().find(|i| i.name == name)
    }

    /// Whether `image` gets a deploy after an action moves its tag.
    pub fn deploys_image(&self, image: &ImageSettings) -> bool {
        !image.deploy.is_empty() || self.runner.deploy_command().is_some()
    }

    /// The `[[images]]` names, for messages that list what is configured.
    pub fn image_names(&self) -> Vec<String> {
        self.images.iter().map(|i| i.name.clone()).collect()
    }

    /// Whether anything is deployed: an image has `deploy` workloads, or `[runner.exec]` has a
    /// `deploy` command.
    pub fn deploys(&self) -> bool {
        self.images.iter().any(|i| !i.deploy.is_empty()) || self.runner.deploy_command().is_some()
    }

    /// Whether an action of `kind` is ever recorded: a deploy only when something is deployed, a
    /// gitops action only with `[[gitops]]` targets; the builds always.
    pub fn records(&self, kind: ActionKind) -> bool {
        match kind {
            ActionKind::Deploy => self.deploys(),
            ActionKind::Gitops => !self.gitops.is_empty(),
            ActionKind::Rebase | ActionKind::Rebuild => true,
        }
    }

    /// The namespaces of every image's `deploy` workloads.
    pub fn deploy_namespaces(&self) -> BTreeSet<String> {
        self.images.iter().flat_map(|i| &i.deploy).map(|w| w.namespace.clone()).collect()
    }
}

pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    } else if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.split(':').next().unwrap_or_default()
    };
    name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

// ---- raw, as written -------------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMonitor {
    interval: Option<Spanned<DurationText>>,
    jitter: Option<Spanned<DurationText>>,
    state: Option<Spanned<String>>,
    history: Option<Spanned<i64>>,
    max_platforms: Option<Spanned<i64>>,
}

// ---- validation ------------------------------------------------------------------------------

struct Validator<'a> {
    text: &'a str,
    /// Where in `text` the piece whose spans are being read starts (0 for the whole document).
    offset: usize,
    base: PathBuf,
    /// What a relative `[monitor] state` resolves against instead of `base` ([`STATE_DIR_ENV`]).
    state_dir: Option<PathBuf>,
    diagnostics: Vec<Diagnostic>,
    /// The pools read so far (`[runner]` comes before `[[images]]`, which name them).
    pools: Vec<runner::PoolSummary>,
    secrets: Secrets,
    /// Where each `[[images]]` entry says `require_signed = true` (offsets in the whole text).
    signed_images: Vec<usize>,
    /// What was decrypted so far (with [`Secrets::Resolve`]), handed out beside the config.
    resolved: Resolved,
}

/// Names seen so far, with the offset in the text where each was first defined.
pub(crate) type Names = std::collections::HashMap<String, usize>;

const SECTIONS: &[&str] = &[
    "monitor",
    "server",
    "registries",
    "builders",
    "alerts",
    "images",
    "runner",
    "kubernetes",
    "rollout",
    "gitops",
    "signing",
    "vulnerabilities",
];

impl<'a> Validator<'a> {
    fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        let (line, column) = line_column(self.text, self.offset + span.start);
        self.diagnostics.push(Diagnostic { line, column, message: message.into() });
    }

    fn toml_error(&mut self, err: &toml::de::Error) {
        let span = err.span().unwrap_or(0..0);
        let message = err.message().trim().to_string();
        self.error(span, message);
    }

    /// Deserializes one value on its own, so a mistake in one entry does not hide mistakes in others.
    fn entry<T: DeserializeOwned>(&mut self, value: Spanned<DeValue<'a>>) -> Option<T> {
        match T::deserialize(ValueDeserializer::from(value)) {
            Ok(t) => Some(t),
            Err(err) => {
                self.toml_error(&err);
                None
            }
        }
    }

    /// The config, from the text in pieces (see `pieces`) when every piece parses on its own and
    /// holds one top-level name, else from the whole document: the same config and the same
    /// diagnostics either way, but a fleet's tables never held as one tree.
    fn document(&mut self, path: &Path) -> Option<Config> {
        if let Some(sections) = self.sections_in_pieces()
            && let Ok(config) = self.validate(path, sections)
        {
            return config;
        }
        self.diagnostics.clear();
        self.offset = 0;
        self.whole_document(path)
    }

    fn whole_document(&mut self, path: &Path) -> Option<Config> {
        let sections = match DeTable::parse(self.text) {
            Ok(root) => Sections::whole(root.into_inner()),
            Err(err) => {
                self.toml_error(&err);
                return None;
            }
        };
        self.validate(path, sections).unwrap_or(None)
    }

    /// Validates every section; `Err` when an array element's piece turns out not to stand alone.
    fn validate(&mut self, path: &Path, sections: Sections<'a>) -> Result<Option<Config>, NotAlone> {
        let mut raw_monitor = None;
        let mut raw_registries = None;
        let mut raw_builders = Elements::Pieces(sections.builder_pieces);
        let mut raw_alerts = None;
        let mut raw_server = None;
        let mut raw_images = Elements::Pieces(sections.image_pieces);
        let mut raw_runner = None;
        let mut raw_kubernetes = None;
        let mut raw_rollout = None;
        let mut raw_gitops = None;
        let mut raw_signing = None;
        let mut raw_vulns = None;
        for (offset, key, value) in sections.values {
            let located = Some((offset, value));
            match key.get_ref().as_ref() {
                "monitor" => raw_monitor = located,
                "registries" => raw_registries = located,
                "builders" => raw_builders = Elements::Value(located),
                "alerts" => raw_alerts = located,
                "server" => raw_server = located,
                "images" => raw_images = Elements::Value(located),
                "runner" => raw_runner = located,
                "kubernetes" => raw_kubernetes = located,
                "rollout" => raw_rollout = located,
                "gitops" => raw_gitops = located,
                "signing" => raw_signing = located,
                "vulnerabilities" => raw_vulns = located,
                other => {
                    let message = format!(
                        "unknown key `{other}`, expected one of {}",
                        SECTIONS.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
                    );
                    self.offset = offset;
                    self.error(key.span(), message);
                    self.offset = 0;
                }
            }
        }

        let monitor = self.at(raw_monitor, |v, value| {
            match value {
                Some(value) => v.entry::<RawMonitor>(value),
                None => Some(RawMonitor::default()),
            }
            .and_then(|raw| v.monitor(raw))
        });

        let registries = self.at(raw_registries, |v, value| v.registries(value));
        let defaults = monitor.as_ref();
        let builders = self.builders(raw_builders, defaults)?;
        let alerts = self.at(raw_alerts, |v, value| v.alerts(value));
        let runner = self.at(raw_runner, |v, value| match value {
            Some(value) => v.entry::<runner::RawRunner>(value).and_then(|raw| v.runner(raw)),
            None => Some(RunnerSettings::default()),
        });
        let images = self.images(raw_images, builders.as_deref())?;
        let kubernetes = self.at(raw_kubernetes, |v, value| match value {
            Some(value) => v.entry::<kubernetes::RawKubernetes>(value).and_then(|raw| v.kubernetes(raw)),
            None => Some(KubernetesSettings::default()),
        });
        let rollout = self.at(raw_rollout, |v, value| match value {
            Some(value) => v.entry::<rollout::RawRollout>(value).and_then(|raw| v.rollout(raw)),
            None => Some(Rollout::default()),
        });
        let gitops = self.at(raw_gitops, |v, value| v.gitops(value, images.as_deref()));
        let server = self.at(raw_server, |v, value| match value {
            Some(value) => v.entry::<RawServer>(value).and_then(|raw| v.server(raw)).map(Some),
            None => Some(None),
        });
        let signing = self.at(raw_signing, |v, value| match value {
            Some(value) => v.entry::<signing::RawSigning>(value).and_then(|raw| v.signing(raw)).map(Some),
            None => Some(None),
        });

        let vulnerabilities = self.at(raw_vulns, |v, value| match value {
            Some(value) => {
                v.entry::<vulnerabilities::RawVulnerabilities>(value).and_then(|r| v.vulnerabilities(r)).map(Some)
            }
            None => Some(None),
        });
        if let Some(signing) = &signing {
            self.images_need_a_trusted_key(signing.as_ref());
        }

        Ok((|| {
            Some(Config {
                source: path.to_path_buf(),
                monitor: monitor?,
                registries: registries?,
                builders: builders?,
                alerts: alerts?,
                images: images?,
                runner: runner?,
                kubernetes: kubernetes?,
                rollout: rollout?,
                server: server?,
                gitops: gitops?,
                signing: signing?,
                vulnerabilities: vulnerabilities?,
            })
        })())
    }

    fn duration(&mut self, value: &Spanned<DurationText>, what: &str) -> Option<Duration> {
        let parsed = humantime::parse_duration(value.get_ref().as_str());
        if matches!(parsed, Ok(d) if d > MAX_DURATION)
            || matches!(parsed, Err(humantime::DurationError::NumberOverflow))
        {
            let message = format!("{what} {} is over the maximum of {MAX_DURATION_TEXT}", value.get_ref().trim());
            self.error(value.span(), message);
            return None;
        }
        match parsed {
            Ok(d) => Some(d),
            Err(err) => {
                let hint = if value.get_ref().trim().chars().all(|c| c.is_ascii_digit() || c == '.') {
                    " (a unit is required, e.g. \"30s\", \"10m\", \"1h\")".to_string()
                } else {
                    format!(": {err}")
                };
                self.error(value.span(), format!("invalid {what} \"{}\"{hint}", value.get_ref()));
                None
            }
        }
    }

    fn positive_duration(&mut self, value: &Spanned<DurationText>, what: &str) -> Option<Duration> {
        let d = self.duration(value, what)?;
        if d.is_zero() {
            self.error(value.span(), format!("{what} must be greater than zero"));
            return None;
        }
        Some(d)
    }

    fn path(&self, text: &str) -> PathBuf {
        let expanded = match text.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)),
            None => None,
        };
        let path = expanded.unwrap_or_else(|| PathBuf::from(text));
        if path.is_absolute() { path } else { self.base.join(path) }
    }

    /// `[monitor] state`'s file: relative to the state directory when one is set, else a path
    /// like any other.
    fn state_path(&self, text: &str) -> PathBuf {
        match &self.state_dir {
            Some(dir) if Path::new(text).is_relative() && !text.starts_with("~/") => dir.join(text),
            _ => self.path(text),
        }
    }

    fn monitor(&mut self, raw: RawMonitor) -> Option<MonitorSettings> {
        let mut ok = true;
        let interval = match &raw.interval {
            Some(v) => self.positive_duration(v, "interval"),
            None => Some(DEFAULT_INTERVAL),
        };
        let jitter = match &raw.jitter {
            Some(v) => self.duration(v, "jitter"),
            None => Some(DEFAULT_JITTER),
        };
        let state = match &raw.state {
            Some(v) if v.get_ref().trim().is_empty() => {
                self.error(v.span(), "state must name a file (the embedded SQLite ledger)");
                None
            }
            Some(v) if v.get_ref() == "kubernetes" => Some(StateLocation::Kubernetes),
            Some(v) => Some(StateLocation::Sqlite(self.state_path(v.get_ref()))),
            None => Some(StateLocation::Sqlite(self.state_path(DEFAULT_STATE))),
        };
        let mut count = |value: &Option<Spanned<i64>>, what: &str, default: usize, max: usize| match value {
            Some(v) if !(1..=max as i64).contains(v.get_ref()) => {
                self.error(v.span(), format!("{what} must be between 1 and {max}"));
                ok = false;
                0
            }
            Some(v) => *v.get_ref() as usize,
            None => default,
        };
        let history = count(&raw.history, "history", DEFAULT_HISTORY, MAX_HISTORY);
        let max_platforms = count(&raw.max_platforms, "max_platforms", DEFAULT_MAX_PLATFORMS, MAX_MAX_PLATFORMS);
        if !ok {
            return None;
        }
        Some(MonitorSettings { interval: interval?, jitter: jitter?, state: state?, history, max_platforms })
    }

    /// Deserializes each table of an `[[section]]` array on its own, so one bad entry does not hide
    /// the others' problems. The flag is false when any entry failed.
    fn tables<T: DeserializeOwned>(&mut self, value: Option<Spanned<DeValue<'a>>>, section: &str) -> (Vec<T>, bool) {
        let Some(value) = value else { return (Vec::new(), true) };
        let span = value.span();
        let DeValue::Array(array) = value.into_inner() else {
            self.error(span, format!("`{section}` must be an array of tables: write each one as [[{section}]]"));
            return (Vec::new(), false);
        };
        let mut ok = true;
        let mut out = Vec::new();
        for value in array {
            match self.entry::<T>(value) {
                Some(t) => out.push(t),
                None => ok = false,
            }
        }
        (out, ok)
    }

    /// Reports every name used a second time; true when all are unique.
    fn unique_names<'n>(&mut self, names: impl IntoIterator<Item = &'n Spanned<String>>, what: &str) -> bool {
        let mut seen = Names::default();
        let mut ok = true;
        for name in names {
            ok &= self.unique_name(&mut seen, name, what);
        }
        ok
    }

    /// Reports `name` when `seen` has it already (else records where it is); true when new.
    fn unique_name(&mut self, seen: &mut Names, name: &Spanned<String>, what: &str) -> bool {
        if let Some(first) = seen.get(name.get_ref().as_str()) {
            let (line, _) = line_column(self.text, *first);
            self.error(
                name.span(),
                format!("duplicate {what} name \"{}\" (first defined on line {line})", name.get_ref()),
            );
            false
        } else {
            seen.insert(name.get_ref().clone(), self.offset + name.span().start);
            true
        }
    }
}

/// A Kubernetes DNS label (RFC 1123): a namespace name.
pub(crate) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}
/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests;
