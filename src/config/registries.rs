//! `[registries."HOST"]`: per-registry limits, retries, TLS and credentials (environment, file or
//! a Docker config).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeValue;

use super::*;

#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// Normalised registry host as it appears in references (`docker.io`, `ghcr.io`, `127.0.0.1:5000`).
    pub host: String,
    /// Requests per second allowed to this registry; `None` disables the limiter.
    pub requests_per_second: Option<f64>,
    pub burst: u32,
    /// Requests per second of actions (rebases, signatures) to this registry; `None`: paced by the
    /// registry's own answers (429/503, `Retry-After`, `RateLimit-*`), additive-increase/
    /// multiplicative-decrease.
    pub write_requests_per_second: Option<f64>,
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
            write_requests_per_second: None,
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
    Basic {
        username: String,
        password: Secret,
        source: CredentialSource,
    },
    /// A Docker credential helper (`program`, an absolute path) that answers `get` for `server`;
    /// the registry client runs it when it needs credentials (`registry::helper`).
    Helper {
        program: PathBuf,
        server: String,
        source: CredentialSource,
    },
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRegistry {
    requests_per_second: Option<Spanned<f64>>,
    burst: Option<Spanned<i64>>,
    write_requests_per_second: Option<Spanned<f64>>,
    username: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    password_file: Option<Spanned<String>>,
    docker_config: Option<Spanned<String>>,
    insecure: Option<bool>,
    ca_file: Option<Spanned<String>>,
    timeout: Option<Spanned<DurationText>>,
    max_attempts: Option<Spanned<i64>>,
    backoff: Option<Spanned<DurationText>>,
    max_retry_after: Option<Spanned<DurationText>>,
}

/// Normalises a `[registries."HOST"]` key to the host used in references.
pub(super) fn normalize_registry_host(text: &str) -> Option<String> {
    let host = text.trim().trim_start_matches("https://").trim_start_matches("http://").trim_end_matches('/');
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return None;
    }
    Some(match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io".to_string(),
        other => other.to_ascii_lowercase(),
    })
}

pub(super) fn pem_has_certificate(pem: &[u8]) -> bool {
    String::from_utf8_lossy(pem).contains("-----BEGIN CERTIFICATE-----")
}

impl<'a> Validator<'a> {
    pub(super) fn registries(
        &mut self,
        value: Option<Spanned<DeValue<'a>>>,
    ) -> Option<BTreeMap<String, RegistrySettings>> {
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

    pub(super) fn registry(&mut self, host: &str, raw: RawRegistry) -> Option<RegistrySettings> {
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
        if let Some(rps) = &raw.write_requests_per_second {
            let value = *rps.get_ref();
            if (MIN_RATE..=MAX_RATE).contains(&value) {
                s.write_requests_per_second = Some(value);
            } else {
                self.error(
                    rps.span(),
                    format!(
                        "write_requests_per_second must be between {MIN_RATE} and {MAX_RATE}; leave it out to pace actions by the registry's own answers"
                    ),
                );
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

    pub(super) fn credentials(&mut self, host: &str, raw: &RawRegistry) -> Option<Credentials> {
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
                    Ok(DockerCredentials::Basic { username, password }) => {
                        Some(Credentials::Basic { username, password, source: CredentialSource::DockerConfig(path) })
                    }
                    Ok(DockerCredentials::Helper { program, server }) => {
                        Some(Credentials::Helper { program, server, source: CredentialSource::DockerConfig(path) })
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
}
