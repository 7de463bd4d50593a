//! The TOML configuration: schema, defaults and validation.
//! Every problem in a file is reported at once, each as `FILE:LINE:COL: message`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use builder_monitor_core::cnb::PinnedMetadata;
use builder_monitor_core::reference::{ImageRef, ReferenceError};
use builder_monitor_core::rollout::Rollout;
use docker::DockerConfig;

use builder_monitor_core::schedule::Schedule;

pub mod alerts;
mod docker;
mod images;
mod kubernetes;
mod pieces;
use pieces::{Elements, NotAlone, Sections};
mod rollout;
pub use alerts::{AlertKind, AlertSettings, AlertUrl, DEFAULT_EVENTS, redact_url};
pub use images::{
    DEFAULT_WAVE, ExecSettings, ImageSettings, PLACEHOLDERS, Policy, RebasePath, RunnerKind, RunnerSettings,
    Scheduling, Source, Toleration,
};
pub use kubernetes::{DEFAULT_GIT_IMAGE, KubeRunnerSettings, KubeValueError, KubernetesSettings, k8s_typed};

/// Default check interval when neither `[monitor]` nor the builder sets one.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(600);
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
const MAX_RETRY_AFTER_LIMIT: Duration = Duration::from_secs(24 * 3600);
/// Default random delay added before each check.
pub const DEFAULT_JITTER: Duration = Duration::from_secs(30);
/// Default number of changes kept per watch.
pub const DEFAULT_HISTORY: usize = 100;
/// Default state file, relative to the config file's directory.
pub const DEFAULT_STATE: &str = "builder-monitor.db";

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

/// A secret value (password, token). It never prints itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Which secrets loading a config reads (the variables and files named by `*_env`, `*_file` and
/// `docker_config`): only the commands that use them, so a read command needs none of the daemon's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// All of them; a missing one is an error (`run`, `alert test`, `check`).
    Resolve,
    /// Registry credentials only (`resolve`, `diff`); alert and API secrets are left unresolved.
    Registries,
    /// None: alerts are unsigned with an unresolved URL, the API has no token, registries are
    /// anonymous (`status`, `plan`, `build-spec`, `rbac`).
    Skip,
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
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: std::net::SocketAddr,
    /// Bearer token for POST endpoints and hooks; without one they answer 403.
    pub api_token: Option<Secret>,
    pub api_token_env: Option<String>,
    /// Read endpoints (`/api/v1/...`) without a token (health and metrics are always public).
    pub public_read: bool,
    /// Hook requests per second allowed from one client address.
    pub hooks_per_second: f64,
    /// A connection that has not sent a complete request head this long after connecting (or
    /// after its previous response) is closed.
    pub header_timeout: Duration,
    /// Open connections at once, in total and from one client address.
    pub max_connections: usize,
    pub max_connections_per_client: usize,
}

/// `[server]` defaults: a kubelet probe or Prometheus scrape sends its request head at once.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;
/// Largest `max_connections`.
pub const MAX_CONNECTIONS: usize = 65_536;

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

#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// Normalised registry host as it appears in references (`docker.io`, `ghcr.io`, `127.0.0.1:5000`).
    pub host: String,
    /// Requests per second allowed to this registry; `None` disables the limiter.
    pub requests_per_second: Option<f64>,
    pub burst: u32,
    pub credentials: Credentials,
    /// Plain HTTP instead of HTTPS.
    pub insecure: bool,
    /// Extra trusted CA certificates (PEM).
    pub ca_pem: Option<Vec<u8>>,
    pub timeout: Duration,
    /// Tries per request on connection errors, timeouts, 429 and 5xx.
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt (with jitter).
    pub backoff: Duration,
    /// Longest `Retry-After` honoured; a longer one fails the check and pauses only this long.
    pub max_retry_after: Duration,
}

impl RegistrySettings {
    /// Settings for a registry without its own table: anonymous, polite defaults, plain HTTP only on
    /// loopback (as Docker treats 127.0.0.0/8 as an insecure registry).
    pub fn defaults_for(host: &str) -> Self {
        Self {
            host: host.to_string(),
            requests_per_second: Some(5.0),
            burst: 10,
            credentials: Credentials::Anonymous,
            insecure: is_loopback_host(host),
            ca_pem: None,
            timeout: Duration::from_secs(30),
            max_attempts: 4,
            backoff: Duration::from_millis(500),
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Anonymous,
    Basic { username: String, password: Secret, source: CredentialSource },
}

/// Where credentials came from, for `check` output (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    Env(String),
    File(PathBuf),
    DockerConfig(PathBuf),
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Env(name) => write!(f, "password from ${name}"),
            CredentialSource::File(path) => write!(f, "password from {}", path.display()),
            CredentialSource::DockerConfig(path) => write!(f, "from {}", path.display()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct BuilderSettings {
    /// Unique name; also names Kubernetes objects, so DNS-safe.
    pub name: String,
    pub image: ImageRef,
    pub schedule: Schedule,
    pub jitter: Duration,
    /// `None`: every platform of the index.
    pub platforms: Option<Vec<Platform>>,
    /// A new digest is reported only once it has been seen continuously for this long.
    pub settle: Option<Duration>,
    /// Also watch the run image the builder's metadata names.
    pub watch_run_image: bool,
}

/// The run image a builder watches given the metadata of its pin: the run image its preferred
/// platform names, by tag. None when the builder does not watch its run image, the metadata names
/// none, or names it by digest (nothing to watch); an error when the name is not a reference.
pub fn run_image_watch(
    builder: &BuilderSettings,
    metadata: Option<&PinnedMetadata>,
) -> Result<Option<ImageRef>, (String, ReferenceError)> {
    let Some(name) = metadata.filter(|_| builder.watch_run_image).and_then(|m| m.preferred()?.run_image()) else {
        return Ok(None);
    };
    match ImageRef::parse(name) {
        Ok(image) if image.digest().is_none() => Ok(Some(image)),
        Ok(_) => Ok(None),
        Err(err) => Err((name.to_string(), err)),
    }
}

/// `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl Platform {
    pub fn parse(text: &str) -> Option<Self> {
        let parts: Vec<&str> = text.split('/').collect();
        let valid =
            |p: &&str| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(valid) {
            return None;
        }
        Some(Self {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }
}

impl Platform {
    /// Whether `other` (an index entry) is selected by this filter entry; no variant means any variant.
    pub fn matches(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && (self.variant.is_none() || self.variant == other.variant)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
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

    /// [`Config::parse`], resolving the `secrets` asked for.
    pub fn parse_with(path: &Path, text: &str, secrets: Secrets) -> Result<Self, ConfigError> {
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut v = Validator { text, offset: 0, base, diagnostics: Vec::new(), kpack: false, secrets };
        let config = v.document(path);
        if v.diagnostics.is_empty()
            && let Some(config) = config
        {
            return Ok(config);
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
    pub fn image(&self, name: &str) -> Option<&ImageSettings> {
        self.images.iter().find(|i| i.name == name)
    }

    /// The `[[images]]` names, for messages that list what is configured.
    pub fn image_names(&self) -> Vec<String> {
        self.images.iter().map(|i| i.name.clone()).collect()
    }
}

impl Config {
    /// What `check` prints: where state lives, how each registry is reached, what is watched.
    pub fn summary(&self) -> String {
        let mut out = format!("config: {}\n", self.source.display());
        match &self.monitor.state {
            StateLocation::Sqlite(path) => out.push_str(&format!("state:  {} (SQLite)\n", path.display())),
            StateLocation::Kubernetes => {
                out.push_str(&format!("state:  ConfigMaps in namespace {} (Kubernetes)\n", self.kubernetes.namespace))
            }
        }
        let mut hosts: Vec<String> = self.registries.keys().cloned().collect();
        for b in &self.builders {
            if !hosts.iter().any(|h| h == b.image.registry()) {
                hosts.push(b.image.registry().to_string());
            }
        }
        hosts.sort();
        out.push_str(&format!("registries ({}):\n", hosts.len()));
        for host in hosts {
            let r = self.registry(&host);
            let rate = match r.requests_per_second {
                Some(rps) => format!("{rps} req/s, burst {}", r.burst),
                None => "no rate limit".to_string(),
            };
            let auth = match &r.credentials {
                Credentials::Anonymous => "anonymous".to_string(),
                Credentials::Basic { username, source, .. } => format!("user {username} ({source})"),
            };
            out.push_str(&format!(
                "  {host}: {}, {rate}, {auth}, timeout {}, {} attempts{}\n",
                if r.insecure { "http" } else { "https" },
                humantime::format_duration(r.timeout),
                r.max_attempts,
                if r.ca_pem.is_some() { ", extra CA" } else { "" },
            ));
        }
        out.push_str(&format!("builders ({}):\n", self.builders.len()));
        for b in &self.builders {
            let platforms = match &b.platforms {
                None => "all platforms".to_string(),
                Some(list) => list.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            };
            let mut settle =
                b.settle.map(|s| format!(", settle {}", humantime::format_duration(s))).unwrap_or_default();
            if !b.watch_run_image {
                settle.push_str(", run image not watched");
            }
            out.push_str(&format!(
                "  {}: {}\n      {}, jitter up to {}, {platforms}{settle}\n",
                b.name,
                b.image,
                b.schedule,
                humantime::format_duration(b.jitter),
            ));
            let next = b.schedule.next_firings(chrono::Utc::now(), 3);
            if !next.is_empty() {
                let next: Vec<String> = next.into_iter().map(builder_monitor_core::schedule::firing_text).collect();
                out.push_str(&format!("      next: {}\n", next.join(", ")));
            }
        }
        out.push_str(&format!("images ({}):\n", self.images.len()));
        for i in &self.images {
            let wave = if i.wave == images::DEFAULT_WAVE { String::new() } else { format!(", wave {}", i.wave) };
            let approve = if i.approve { ", approval" } else { "" };
            out.push_str(&format!(
                "  {}: {} (builder {}, policy {}{wave}{approve})\n",
                i.name,
                i.image,
                i.builder,
                i.policy.as_str()
            ));
        }
        let r = &self.runner;
        out.push_str(&format!(
            "runner: {}, rebases by {}, {} at a time, {} attempts, backoff {}\n",
            r.kind.as_str(),
            r.rebase.as_str(),
            r.max_concurrent,
            r.max_attempts,
            humantime::format_duration(r.backoff)
        ));
        out.push_str(&rollout::summary(&self.rollout).unwrap_or_default());
        out.push_str(&format!("alerts ({}):\n", self.alerts.len()));
        for a in &self.alerts {
            let builders = if a.builders.is_empty() { "all builders".to_string() } else { a.builders.join(", ") };
            out.push_str(&format!(
                "  {}: {} {}{}\n      events {}; {builders}; timeout {}, retries from {} for up to {}\n",
                a.name,
                a.kind.as_str(),
                a.url,
                if a.secret.is_some() { ", signed" } else { "" },
                a.events.join(", "),
                humantime::format_duration(a.timeout),
                humantime::format_duration(a.backoff),
                humantime::format_duration(a.give_up_after),
            ));
        }
        out
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
    interval: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
    state: Option<Spanned<String>>,
    history: Option<Spanned<i64>>,
    max_platforms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<Spanned<String>>,
    api_token_env: Option<Spanned<String>>,
    public_read: Option<bool>,
    hooks_per_second: Option<Spanned<f64>>,
    header_timeout: Option<Spanned<String>>,
    max_connections: Option<Spanned<i64>>,
    max_connections_per_client: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegistry {
    requests_per_second: Option<Spanned<f64>>,
    burst: Option<Spanned<i64>>,
    username: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    docker_config: Option<Spanned<String>>,
    insecure: Option<bool>,
    ca_file: Option<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    max_attempts: Option<Spanned<i64>>,
    backoff: Option<Spanned<String>>,
    max_retry_after: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuilder {
    name: Spanned<String>,
    image: Spanned<String>,
    interval: Option<Spanned<String>>,
    schedule: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
    platforms: Option<Vec<Spanned<String>>>,
    settle: Option<Spanned<String>>,
    watch_run_image: Option<bool>,
}

// ---- validation ------------------------------------------------------------------------------

struct Validator<'a> {
    text: &'a str,
    /// Where in `text` the piece whose spans are being read starts (0 for the whole document).
    offset: usize,
    base: PathBuf,
    diagnostics: Vec<Diagnostic>,
    /// The runner is kpack (which restricts node selectors).
    kpack: bool,
    secrets: Secrets,
}

/// Names seen so far, with the offset in the text where each was first defined.
type Names = std::collections::HashMap<String, usize>;

const SECTIONS: &[&str] =
    &["monitor", "server", "registries", "builders", "alerts", "images", "runner", "kubernetes", "rollout"];

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
            Some(value) => v.entry::<images::RawRunner>(value).and_then(|raw| v.runner(raw)),
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
        let server = self.at(raw_server, |v, value| match value {
            Some(value) => v.entry::<RawServer>(value).and_then(|raw| v.server(raw)).map(Some),
            None => Some(None),
        });

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
            })
        })())
    }

    fn duration(&mut self, value: &Spanned<String>, what: &str) -> Option<Duration> {
        let parsed = humantime::parse_duration(value.get_ref());
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

    fn positive_duration(&mut self, value: &Spanned<String>, what: &str) -> Option<Duration> {
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
            Some(v) => Some(StateLocation::Sqlite(self.path(v.get_ref()))),
            None => Some(StateLocation::Sqlite(self.path(DEFAULT_STATE))),
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

    fn server(&mut self, raw: RawServer) -> Option<ServerSettings> {
        let errors_before = self.diagnostics.len();
        let listen = match &raw.listen {
            None => Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9464))),
            Some(l) => match l.get_ref().parse() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    self.error(
                        l.span(),
                        format!("listen \"{}\" is not an address like 127.0.0.1:9464 or [::]:9464", l.get_ref()),
                    );
                    None
                }
            },
        };
        let api_token = match &raw.api_token_env {
            None => None,
            Some(_) if self.secrets != Secrets::Resolve => None,
            Some(env) => match std::env::var(env.get_ref()) {
                Ok(token) if token.len() >= 16 => Some(Secret::new(token)),
                Ok(token) if !token.is_empty() => {
                    self.error(
                        env.span(),
                        format!("the API token in {} is too short: use at least 16 characters", env.get_ref()),
                    );
                    None
                }
                _ => {
                    self.error(
                        env.span(),
                        format!("environment variable {} is not set (the API token)", env.get_ref()),
                    );
                    None
                }
            },
        };
        let hooks_per_second = match &raw.hooks_per_second {
            Some(h) if !(MIN_RATE..=MAX_RATE).contains(h.get_ref()) => {
                self.error(h.span(), format!("hooks_per_second must be between {MIN_RATE} and {MAX_RATE}"));
                1.0
            }
            Some(h) => *h.get_ref(),
            None => 5.0,
        };
        let header_timeout = match &raw.header_timeout {
            Some(t) => self.positive_duration(t, "header_timeout").unwrap_or_default(),
            None => DEFAULT_HEADER_TIMEOUT,
        };
        let mut count = |value: &Option<Spanned<i64>>, what: &str, max: usize, default: usize| match value {
            Some(v) if (1..=max as i64).contains(v.get_ref()) => *v.get_ref() as usize,
            Some(v) => {
                self.error(v.span(), format!("{what} must be between 1 and {max}"));
                default
            }
            None => default,
        };
        let max_connections = count(&raw.max_connections, "max_connections", MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS);
        let max_connections_per_client = count(
            &raw.max_connections_per_client,
            "max_connections_per_client",
            max_connections,
            DEFAULT_MAX_CONNECTIONS_PER_CLIENT.min(max_connections),
        );
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(ServerSettings {
            listen: listen?,
            api_token,
            api_token_env: raw.api_token_env.map(|e| e.into_inner()),
            public_read: raw.public_read.unwrap_or(true),
            hooks_per_second,
            header_timeout,
            max_connections,
            max_connections_per_client,
        })
    }

    fn registries(&mut self, value: Option<Spanned<DeValue<'a>>>) -> Option<BTreeMap<String, RegistrySettings>> {
        let mut out = BTreeMap::new();
        let Some(value) = value else { return Some(out) };
        let span = value.span();
        let DeValue::Table(table) = value.into_inner() else {
            self.error(span, "`registries` must be a table of `[registries.\"HOST\"]` tables");
            return None;
        };
        let mut ok = true;
        for (key, value) in table {
            let host_text = key.get_ref().to_string();
            let Some(host) = normalize_registry_host(&host_text) else {
                self.error(key.span(), format!("invalid registry host \"{host_text}\" (expected HOST or HOST:PORT)"));
                ok = false;
                continue;
            };
            if out.contains_key(&host) {
                self.error(key.span(), format!("registry \"{host}\" is configured twice"));
                ok = false;
                continue;
            }
            match self.entry::<RawRegistry>(value) {
                Some(raw) => match self.registry(&host, raw) {
                    Some(settings) => {
                        out.insert(host, settings);
                    }
                    None => ok = false,
                },
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn registry(&mut self, host: &str, raw: RawRegistry) -> Option<RegistrySettings> {
        let errors_before = self.diagnostics.len();
        let mut s = RegistrySettings::defaults_for(host);
        if let Some(rps) = &raw.requests_per_second {
            let value = *rps.get_ref();
            if value != 0.0 && !(MIN_RATE..=MAX_RATE).contains(&value) {
                self.error(
                    rps.span(),
                    format!("requests_per_second must be 0 (no limit) or between {MIN_RATE} and {MAX_RATE}"),
                );
            } else if value == 0.0 {
                s.requests_per_second = None;
            } else {
                s.requests_per_second = Some(value);
            }
        }
        if let Some(burst) = &raw.burst {
            match u32::try_from(*burst.get_ref()) {
                Ok(b) if (1..=MAX_BURST).contains(&b) => s.burst = b,
                _ => self.error(burst.span(), format!("burst must be between 1 and {MAX_BURST}")),
            }
        }
        if let Some(insecure) = raw.insecure {
            s.insecure = insecure;
        }
        if let Some(t) = &raw.timeout
            && let Some(d) = self.positive_duration(t, "timeout")
        {
            s.timeout = d;
        }
        if let Some(b) = &raw.backoff
            && let Some(d) = self.positive_duration(b, "backoff")
        {
            s.backoff = d;
        }
        if let Some(m) = &raw.max_retry_after
            && let Some(d) = self.positive_duration(m, "max_retry_after")
        {
            if d > MAX_RETRY_AFTER_LIMIT {
                self.error(m.span(), "max_retry_after must be at most 1day");
            } else {
                s.max_retry_after = d;
            }
        }
        if let Some(m) = &raw.max_attempts {
            match u32::try_from(*m.get_ref()) {
                Ok(n) if (1..=20).contains(&n) => s.max_attempts = n,
                _ => self.error(m.span(), "max_attempts must be between 1 and 20"),
            }
        }
        if let Some(ca) = &raw.ca_file {
            let path = self.path(ca.get_ref());
            match std::fs::read(&path) {
                Ok(pem) if pem_has_certificate(&pem) => s.ca_pem = Some(pem),
                Ok(_) => self.error(ca.span(), format!("{} contains no PEM certificate", path.display())),
                Err(err) => self.error(ca.span(), format!("cannot read {}: {err}", path.display())),
            }
        }
        s.credentials = self.credentials(host, &raw)?;
        (self.diagnostics.len() == errors_before).then_some(s)
    }

    fn credentials(&mut self, host: &str, raw: &RawRegistry) -> Option<Credentials> {
        let skip = self.secrets == Secrets::Skip;
        if let Some(dc) = &raw.docker_config {
            if let Some(other) = raw.username.as_ref().or(raw.password_env.as_ref()).or(raw.password_file.as_ref()) {
                self.error(other.span(), "use either docker_config or username + password_env/password_file, not both");
                return None;
            }
            if skip {
                return Some(Credentials::Anonymous);
            }
            let path = self.path(dc.get_ref());
            return match DockerConfig::load(&path) {
                Ok(config) => match config.credentials_for(host) {
                    Ok((username, password)) => {
                        Some(Credentials::Basic { username, password, source: CredentialSource::DockerConfig(path) })
                    }
                    Err(err) => {
                        self.error(dc.span(), err.to_string());
                        None
                    }
                },
                Err(err) => {
                    self.error(dc.span(), err.to_string());
                    None
                }
            };
        }
        match (&raw.username, &raw.password_env, &raw.password_file) {
            (None, None, None) => Some(Credentials::Anonymous),
            (Some(_), Some(_), Some(f)) => {
                self.error(f.span(), "use either password_env or password_file, not both");
                None
            }
            (None, Some(p), _) | (None, None, Some(p)) => {
                self.error(p.span(), "a password needs a username");
                None
            }
            (Some(u), None, None) => {
                self.error(u.span(), "username needs password_env or password_file");
                None
            }
            (Some(_), _, _) if skip => Some(Credentials::Anonymous),
            (Some(u), Some(env), None) => {
                let name = env.get_ref();
                match std::env::var(name) {
                    Ok(value) if !value.is_empty() => Some(Credentials::Basic {
                        username: u.get_ref().clone(),
                        password: Secret::new(value),
                        source: CredentialSource::Env(name.clone()),
                    }),
                    _ => {
                        self.error(env.span(), format!("environment variable {name} is not set (password for {host})"));
                        None
                    }
                }
            }
            (Some(u), None, Some(file)) => {
                let path = self.path(file.get_ref());
                match std::fs::read_to_string(&path) {
                    Ok(value) if !value.trim().is_empty() => Some(Credentials::Basic {
                        username: u.get_ref().clone(),
                        password: Secret::new(value.trim_end_matches(['\n', '\r'])),
                        source: CredentialSource::File(path),
                    }),
                    Ok(_) => {
                        self.error(file.span(), format!("{} is empty", path.display()));
                        None
                    }
                    Err(err) => {
                        self.error(file.span(), format!("cannot read {}: {err}", path.display()));
                        None
                    }
                }
            }
        }
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

    fn builders(
        &mut self,
        elements: Elements<'a>,
        monitor: Option<&MonitorSettings>,
    ) -> Result<Option<Vec<BuilderSettings>>, NotAlone> {
        let mut names = Names::default();
        let mut out = Vec::new();
        let ok = self.each_element(elements, "builders", |v, raw: RawBuilder| {
            let unique = v.unique_name(&mut names, &raw.name, "builder");
            match v.builder(raw, monitor) {
                Some(b) => out.push(b),
                None => return false,
            }
            unique
        })?;
        // Kept for the daemon's life: no room for growth (a third of the Vec at 10,000 builders).
        out.shrink_to_fit();
        Ok(ok.then_some(out))
    }

    fn builder(&mut self, raw: RawBuilder, monitor: Option<&MonitorSettings>) -> Option<BuilderSettings> {
        let errors_before = self.diagnostics.len();
        let name = raw.name.get_ref().clone();
        if !is_dns_label(&name) {
            self.error(
                raw.name.span(),
                format!(
                    "invalid builder name \"{name}\": use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit (it names Kubernetes objects)"
                ),
            );
        }
        let image = match ImageRef::parse(raw.image.get_ref()) {
            Ok(image) if image.digest().is_some() => {
                self.error(
                    raw.image.span(),
                    format!(
                        "image \"{}\" is pinned by digest, so there is nothing to watch; name a tag (e.g. \"{}\")",
                        raw.image.get_ref(),
                        image.with_tag_only()
                    ),
                );
                None
            }
            Ok(image) => Some(image),
            Err(err) => {
                self.error(raw.image.span(), format!("invalid image reference \"{}\": {err}", raw.image.get_ref()));
                None
            }
        };
        let schedule = match (&raw.interval, &raw.schedule) {
            (Some(_), Some(s)) => {
                self.error(s.span(), "set either interval or schedule, not both");
                None
            }
            (Some(i), None) => self.positive_duration(i, "interval").map(Schedule::Interval),
            (None, Some(s)) => match Schedule::cron(s.get_ref()) {
                Ok(schedule) => Some(schedule),
                Err(err) => {
                    self.error(s.span(), err.to_string());
                    None
                }
            },
            (None, None) => monitor.map(|m| Schedule::Interval(m.interval)),
        };
        let jitter = match &raw.jitter {
            Some(j) => self.duration(j, "jitter"),
            None => monitor.map(|m| m.jitter),
        };
        let settle = match &raw.settle {
            Some(s) => self.positive_duration(s, "settle").map(Some),
            None => Some(None),
        };
        let platforms = match &raw.platforms {
            None => Some(None),
            Some(list) if list.is_empty() => {
                self.error(raw.name.span(), "platforms is empty; omit it to watch every platform");
                None
            }
            Some(list) => {
                let mut out: Vec<Platform> = Vec::new();
                for p in list {
                    match Platform::parse(p.get_ref()) {
                        Some(platform) if out.contains(&platform) => {
                            self.error(p.span(), format!("platform \"{platform}\" is listed twice"));
                        }
                        Some(platform) => out.push(platform),
                        None => self.error(
                            p.span(),
                            format!(
                                "invalid platform \"{}\" (expected os/arch or os/arch/variant, e.g. \"linux/amd64\")",
                                p.get_ref()
                            ),
                        ),
                    }
                }
                Some(Some(out))
            }
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(BuilderSettings {
            name,
            image: image?,
            schedule: schedule?,
            jitter: jitter?,
            platforms: platforms?,
            settle: settle?,
            watch_run_image: raw.watch_run_image.unwrap_or(true),
        })
    }
}

/// Normalises a `[registries."HOST"]` key to the host used in references.
fn normalize_registry_host(text: &str) -> Option<String> {
    let host = text.trim().trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return None;
    }
    Some(match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io".to_string(),
        other => other.to_ascii_lowercase(),
    })
}

fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn pem_has_certificate(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----")
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, Vec<String>> {
        Config::parse(Path::new("/etc/bm/config.toml"), text).map_err(|e| match e {
            ConfigError::Invalid { diagnostics, .. } => {
                diagnostics.into_iter().map(|d| format!("{}:{}: {}", d.line, d.column, d.message)).collect()
            }
            other => vec![other.to_string()],
        })
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse("[[builders]]\nname = \"b\"\nimage = \"ubuntu\"\n").unwrap();
        assert_eq!(c.monitor.interval, DEFAULT_INTERVAL);
        assert_eq!(c.monitor.state, StateLocation::Sqlite(PathBuf::from("/etc/bm/builder-monitor.db")));
        let b = &c.builders[0];
        assert_eq!(b.image.to_string(), "docker.io/library/ubuntu:latest");
        assert!(matches!(b.schedule, Schedule::Interval(d) if d == DEFAULT_INTERVAL));
        assert_eq!(b.jitter, DEFAULT_JITTER);
        let r = c.registry("docker.io");
        assert!(!r.insecure);
        assert_eq!(r.requests_per_second, Some(5.0));
        assert!(c.registry("127.0.0.1:5000").insecure);
        assert!(c.registry("localhost:5000").insecure);
    }

    #[test]
    fn every_error_is_reported_with_its_position() {
        let text = r#"
[monitor]
interval = "10"

[registries."ghcr.io"]
username = "me"
password_env = "BM_TEST_SURELY_UNSET_VAR"

[[builders]]
name = "a"
image = "paketobuildpacks/builder-jammy-base:latest"
interval = "5m"
schedule = "0 */5 * * * *"

[[builders]]
name = "a"
image = "Not A Reference"

[[builders]]
name = "c"
image = "heroku/builder@sha256:0000000000000000000000000000000000000000000000000000000000000000"
schedule = "*/5 * * * *"
settle = "soon"

[[builders]]
name = "d"
image = "heroku/builder:24"
colour = "blue"
"#;
        let errors = parse(text).unwrap_err();
        let expect = [
            "3:12: invalid interval \"10\" (a unit is required",
            "7:16: environment variable BM_TEST_SURELY_UNSET_VAR is not set",
            "13:12: set either interval or schedule, not both",
            "16:8: duplicate builder name \"a\" (first defined on line 10)",
            "17:9: invalid image reference \"Not A Reference\"",
            "21:9: image \"heroku/builder@sha256:",
            "22:12: cron expression \"*/5 * * * *\" has 5 fields",
            "23:10: invalid settle \"soon\"",
            "28:1: unknown field `colour`",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    }

    #[test]
    fn unknown_top_level_key_and_bad_types() {
        let errors = parse("[monitr]\ninterval = \"1m\"\n[[builders]]\nname = 5\nimage = \"x\"\n").unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("1:2: unknown key `monitr`"), "{errors:?}");
        assert!(errors[1].starts_with("4:8: invalid type"), "{errors:?}");
    }

    #[test]
    fn syntax_error_has_a_position() {
        let errors = parse("[monitor\ninterval = 1").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("1:"), "{errors:?}");
    }

    #[test]
    fn registry_settings_are_validated() {
        let errors = parse(
            "[registries.\"docker.io\"]\nrequests_per_second = -1\nburst = 0\nmax_attempts = 0\nca_file = \"/nonexistent/ca.pem\"\n[registries.\"a b\"]\n",
        )
        .unwrap_err();
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(errors[0].starts_with("2:23: requests_per_second"));
        assert!(errors[1].starts_with("3:9: burst"));
        assert!(errors[2].starts_with("4:16: max_attempts"));
        assert!(errors[3].starts_with("5:11: cannot read /nonexistent/ca.pem"));
        assert!(errors[4].starts_with("6:13: invalid registry host"));
    }

    #[test]
    fn max_retry_after_is_a_positive_duration_up_to_a_day() {
        let errors = parse(
            "[registries.\"a.io\"]\nmax_retry_after = \"0s\"\n[registries.\"b.io\"]\nmax_retry_after = \"2days\"\n",
        )
        .unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(errors[0].starts_with("2:19: max_retry_after must be greater than zero"), "{errors:?}");
        assert!(errors[1].starts_with("4:19: max_retry_after must be at most 1day"), "{errors:?}");
        let c = Config::parse(
            Path::new("/x/c.toml"),
            "[registries.\"a.io\"]\nmax_retry_after = \"1m\"\n[[builders]]\nname = \"b\"\nimage = \"a.io/b\"\n",
        )
        .unwrap();
        assert_eq!(c.registry("a.io").max_retry_after, Duration::from_secs(60));
        assert_eq!(c.registry("b.io").max_retry_after, DEFAULT_MAX_RETRY_AFTER);
    }

    #[test]
    fn registry_keys_are_normalised_and_credentials_resolved() {
        let dir = std::env::temp_dir().join(format!("bm-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pw"), "s3cret\n").unwrap();
        let c = Config::parse(
            &dir.join("c.toml"),
            "[registries.\"index.docker.io\"]\nusername = \"me\"\npassword_file = \"pw\"\nrequests_per_second = 0\n",
        )
        .unwrap();
        let r = c.registry("docker.io");
        assert_eq!(r.requests_per_second, None);
        match r.credentials {
            Credentials::Basic { username, password, .. } => {
                assert_eq!(username, "me");
                assert_eq!(password.expose(), "s3cret");
                assert_eq!(format!("{password:?}"), "Secret(***)");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn platforms_parse() {
        let c =
            parse("[[builders]]\nname = \"b\"\nimage = \"x:1\"\nplatforms = [\"linux/amd64\", \"linux/arm64/v8\"]\n")
                .unwrap();
        let p = c.builders[0].platforms.clone().unwrap();
        assert_eq!(p[1].to_string(), "linux/arm64/v8");
        let errors = parse("[[builders]]\nname = \"b\"\nimage = \"x:1\"\nplatforms = [\"amd64\"]\n").unwrap_err();
        assert!(errors[0].starts_with("4:14: invalid platform"), "{errors:?}");
    }

    #[test]
    fn alerts_are_validated() {
        let errors = parse(
            r#"
[[alerts]]
name = "a"
type = "pager"
url = "https://hooks.example.com/x"

[[alerts]]
name = "b"
type = "webhook"

[[alerts]]
name = "c"
type = "slack"
url = "https://hooks.slack.com/services/T/B/X"
url_env = "BM_TEST_UNSET_URL"

[[alerts]]
name = "d"
type = "webhook"
url = "ftp://example.com"
events = ["builder.changd", "build.*"]
secret_env = "BM_TEST_UNSET_SECRET"
timeout = "0s"
headers = { "X-Builder-Monitor-Event" = "spoof" }

[[alerts]]
name = "a"
type = "cloudevents"
url = "https://bus.example.com"
"#,
        )
        .unwrap_err();
        let expect = [
            "4:8: unknown alert type \"pager\"",
            "8:8: alert \"b\" needs url, url_env or url_file",
            "15:11: set only one of url, url_env and url_file",
            "20:7: alert URL ftp://example.com must be http or https",
            "21:11: \"builder.changd\" matches no event type",
            "22:14: environment variable BM_TEST_UNSET_SECRET is not set (secret)",
            "23:11: timeout must be greater than zero",
            "24:11: header \"X-Builder-Monitor-Event\" is set by builder-monitor itself",
            "27:8: duplicate alert name \"a\"",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");

        let c = parse("[[alerts]]\nname = \"ok\"\ntype = \"slack\"\nurl = \"https://hooks.slack.com/services/T/B/SECRET\"\nbuilders = [\"paketo-*\"]\n").unwrap();
        let a = &c.alerts[0];
        assert_eq!(a.events, DEFAULT_EVENTS);
        assert!(a.wants_type("builder.changed") && !a.wants_type("builder.pinned"));
        assert!(a.wants_builder(["paketo-jammy-base"].into_iter()) && !a.wants_builder(["heroku-24"].into_iter()));
        assert_eq!(a.url.to_string(), "https://hooks.slack.com/…");
        assert!(!format!("{a:?}").contains("SECRET"), "Debug redacts the URL");
        assert_eq!((a.timeout, a.give_up_after), (Duration::from_secs(10), Duration::from_secs(86400)));
    }

    #[test]
    fn images_and_runner_are_validated() {
        let errors = parse(
            r#"
[[builders]]
name = "jammy"
image = "paketobuildpacks/builder-jammy-base"

[[images]]
name = "petclinic"
builder = "jamy"
image = "registry.example.com/apps/petclinic:latest"
policy = "sometimes"

[[images]]
name = "petclinic"
builder = "jammy"
image = "registry.example.com/apps/petclinic@sha256:0000000000000000000000000000000000000000000000000000000000000000"
scheduling = { node_selector = { disktype = "ssd" }, tolerations = [{ key = "dedicated", operator = "Equal", value = "builds", effect = "NoSchedule" }] }

[[images]]
name = "api"
builder = "jammy"
image = "registry.example.com/apps/api"
scheduling = { tolerations = [{ key = "x", colour = "blue" }] }

[runner]
type = "exec"
max_concurrent = 0

[runner.exec]
rebuild = ["pack", "build", "{imag}"]
"#,
        )
        .unwrap_err();
        let expect = [
            "8:11: unknown builder \"jamy\" (configured: jammy)",
            "10:10: unknown policy \"sometimes\"",
            "13:8: duplicate image name \"petclinic\"",
            "15:9: an app image is a tag the runner pushes to, not a digest",
            "22:44: unknown field `colour`",
            "26:18: max_concurrent must be between 1 and 256",
            "28:1: [runner.exec] needs `rebase`",
            "29:11: unknown placeholder {imag} in `rebuild`",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    }

    #[test]
    fn the_rebase_path_is_runner_unless_registry_is_asked_for() {
        let builder = "[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n";
        assert_eq!(parse(builder).unwrap().runner.rebase, RebasePath::Runner);
        let registry = parse(&format!("{builder}[runner]\nrebase = \"registry\"\n")).unwrap();
        assert_eq!((registry.runner.rebase, registry.runner.kind), (RebasePath::Registry, RunnerKind::None));
        let errors = parse(&format!("{builder}[runner]\ntype = \"exec\"\nrebase = \"pod\"\n")).unwrap_err();
        assert_eq!(errors, ["6:10: unknown rebase path \"pod\", expected registry or runner"]);
        // In-daemon rebases need no rebase command; runner rebases still do.
        let exec = "[runner]\ntype = \"exec\"\nrebase = \"REBASE\"\n[runner.exec]\nrebuild = [\"true\"]\n";
        let ok = parse(&format!("{builder}{}", exec.replace("REBASE", "registry"))).unwrap();
        assert!(ok.runner.exec.unwrap().rebase.is_empty());
        let errors = parse(&format!("{builder}{}", exec.replace("REBASE", "runner"))).unwrap_err();
        assert_eq!(errors, ["7:1: [runner.exec] needs `rebase` (an argv array)"]);
    }

    #[test]
    fn kubernetes_runner_values_are_checked_against_the_pod_spec() {
        let errors = parse(
            r#"
[[builders]]
name = "jammy"
image = "paketobuildpacks/builder-jammy-base"

[[images]]
name = "app"
builder = "jammy"
image = "r.example.com/app"
scheduling = { node_selector = { "kubernetes.io/os" = "linux" } }

[runner]
type = "kpack"

[runner.kubernetes]
namespace = "Builds"
node_selector = { "kubernetes.io/os" = "linux" }
affinity = { nodeAffinity = { requiredDuringSchedulingIgnoredDuringExecution = { nodeSelectorTerm = [] } } }
resources = { request = { cpu = "1" } }
backoff_limit = -1
"#,
        )
        .unwrap_err();
        let expect = [
            "10:14: kpack rejects a nodeSelector with kubernetes.io/os",
            "16:13: namespace \"Builds\" is not a valid namespace name",
            "17:17: kpack rejects a nodeSelector with kubernetes.io/os",
            "18:12: affinity is not a Pod spec affinity: unknown field `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerm`",
            "19:13: resources is not a Pod spec resources object: unknown field `request`",
            "20:17: backoff_limit must be a whole number >= 0",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");
        let ok = parse("[runner]\ntype = \"kubernetes\"\n").unwrap();
        let k = ok.runner.kubernetes.unwrap();
        assert_eq!((k.namespace.as_str(), k.git_image.as_str()), ("default", DEFAULT_GIT_IMAGE));
    }

    #[test]
    fn every_duration_rate_and_size_is_range_checked() {
        let errors = parse(
            r#"
[monitor]
interval = "500000000000y"
history = 100000000000

[server]
hooks_per_second = 1e-30

[registries."r.example.com"]
requests_per_second = 1e-30
burst = 4294967295
timeout = "2y"

[[builders]]
name = "b"
image = "r.example.com/b:1"
jitter = "367d"
settle = "1y 1s"

[[alerts]]
name = "a"
type = "webhook"
url = "https://hooks.example.com/x"
give_up_after = "10y"

[runner]
backoff = "100y"

[kubernetes]
lease_duration = "1000y"
"#,
        )
        .unwrap_err();
        let expect = [
            "3:12: interval 500000000000y is over the maximum of 1y",
            "4:11: history must be between 1 and 1000000",
            "7:20: hooks_per_second must be between 0.001 and 10000",
            "10:23: requests_per_second must be 0 (no limit) or between 0.001 and 10000",
            "11:9: burst must be between 1 and 10000",
            "12:11: timeout 2y is over the maximum of 1y",
            "17:10: jitter 367d is over the maximum of 1y",
            "18:10: settle 1y 1s is over the maximum of 1y",
            "24:17: give_up_after 10y is over the maximum of 1y",
            "27:11: backoff 100y is over the maximum of 1y",
            "30:18: lease_duration 1000y is over the maximum of 1y",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");
        // The bounds themselves are accepted.
        let c = parse(
            "[monitor]\ninterval = \"1y\"\n[server]\nhooks_per_second = 0.001\n[registries.\"r.io\"]\nrequests_per_second = 10000\nburst = 10000\n[[builders]]\nname = \"b\"\nimage = \"r.io/b:1\"\n",
        )
        .unwrap();
        assert_eq!(c.monitor.interval, MAX_DURATION);
        assert_eq!(rate_period(0.001), Duration::from_secs(1000));
        assert_eq!(rate_period(1e-30), Duration::from_secs(1000), "clamped, never an overflow");
        assert_eq!(rate_period(f64::NAN), Duration::from_secs(1000));
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback_host("127.0.0.1:5000"));
        assert!(is_loopback_host("localhost"));
        assert!(is_loopback_host("[::1]:5000"));
        assert!(!is_loopback_host("ghcr.io"));
        assert!(!is_loopback_host("10.0.0.1:5000"));
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é = 1", 3), (1, 3));
    }
}
