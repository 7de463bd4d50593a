//! `[[alerts]]`: where events go (webhook, Slack, CloudEvents), which events and builders each
//! receiver asked for, and the secrets (HMAC keys, tokenised URLs) that must never be printed.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::DurationText;
use toml::de::DeValue;

use super::{Secret, Secrets, Validator};
use builder_monitor_core::event::{Event, EventType};

/// Events an alert gets when it does not say.
pub const DEFAULT_EVENTS: &[&str] = &[
    "builder.changed",
    "run_image.changed",
    "check.failed",
    "registry.unavailable",
    // An outage's end, to the alerts told of its start only (`alert::outage`): never on its own.
    "check.recovered",
    "registry.recovered",
    // A person has to act on these.
    "action.awaiting_approval",
    "action.held",
    "action.refused",
    "signature.replaced",
    // A change skipping the windows and the soak on the word of the vulnerability data.
    "action.expedited",
];

/// Failed checks in a row before an alert hears of them, when it does not say.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    Webhook,
    Slack,
    CloudEvents,
}

impl AlertKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Webhook => "webhook",
            AlertKind::Slack => "slack",
            AlertKind::CloudEvents => "cloudevents",
        }
    }
}

/// A receiver URL. It may embed a token (Slack's do), so it only ever prints redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct AlertUrl(Secret);

impl AlertUrl {
    pub fn new(url: String) -> Self {
        AlertUrl(Secret::new(url))
    }
    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

impl fmt::Display for AlertUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(self.0.expose()))
    }
}

impl fmt::Debug for AlertUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlertUrl({self})")
    }
}

/// `scheme://host[:port]/…`: the path and query of a URL can carry tokens.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let mut out = format!("{}://{}", u.scheme(), u.host_str().unwrap_or("?"));
            if let Some(port) = u.port() {
                out.push_str(&format!(":{port}"));
            }
            if u.path() != "/" || u.query().is_some() {
                out.push_str("/…");
            }
            out
        }
        Err(_) => "<invalid URL>".to_string(),
    }
}

#[derive(Debug, Clone)]
pub struct AlertSettings {
    pub name: String,
    pub kind: AlertKind,
    pub url: AlertUrl,
    /// HMAC-SHA256 key for `X-Builder-Monitor-Signature-256`.
    pub secret: Option<Secret>,
    /// Event type patterns (`builder.changed`, `build.*`, `*`).
    pub events: Vec<String>,
    /// Builder name globs; empty means every builder.
    pub builders: Vec<String>,
    /// OS package name globs (`openssl*`): when set, a builder or run image move reaches this
    /// alert only when one of these packages moved. Empty means every move.
    pub packages: Vec<String>,
    /// Extra static headers.
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    /// Accept any TLS certificate (explicit, per alert).
    pub insecure: bool,
    /// First retry delay, doubling per attempt.
    pub backoff: Duration,
    /// A delivery still failing this long after its event is given up (dead letter).
    pub give_up_after: Duration,
    /// Failed checks of a watch in a row before this alert hears of them (`check.failed`,
    /// `registry.unavailable`).
    pub failure_threshold: u32,
}

impl AlertSettings {
    /// Whether this alert asked for events of this type.
    pub fn wants_type(&self, event_type: &str) -> bool {
        self.events.iter().any(|p| glob_match(p, event_type))
    }

    /// Whether this alert asked for events about any of these builders.
    pub fn wants_builder<'b>(&self, mut builders: impl Iterator<Item = &'b str>) -> bool {
        self.builders.is_empty() || builders.any(|b| self.builders.iter().any(|p| glob_match(p, b)))
    }

    /// Whether this alert wants this event for the OS packages it moved (only moves are filtered;
    /// a move without a package diff does not match a package filter).
    pub fn wants_packages(&self, event: &Event) -> bool {
        if self.packages.is_empty()
            || !matches!(event.event_type, EventType::BuilderChanged | EventType::RunImageChanged)
        {
            return true;
        }
        let moved = event.change.as_ref().and_then(|c| c.packages.as_ref()).map(|d| d.names()).unwrap_or_default();
        moved.iter().any(|name| self.packages.iter().any(|p| glob_match(p, name)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlert {
    name: Spanned<String>,
    #[serde(rename = "type")]
    kind: Spanned<String>,
    url: Option<Spanned<String>>,
    url_env: Option<Spanned<String>>,
    url_file: Option<Spanned<String>>,
    secret_env: Option<Spanned<String>>,
    secret_file: Option<Spanned<String>>,
    events: Option<Vec<Spanned<String>>>,
    builders: Option<Vec<Spanned<String>>>,
    packages: Option<Vec<Spanned<String>>>,
    headers: Option<Spanned<std::collections::BTreeMap<String, String>>>,
    timeout: Option<Spanned<DurationText>>,
    insecure: Option<bool>,
    backoff: Option<Spanned<DurationText>>,
    give_up_after: Option<Spanned<DurationText>>,
    failure_threshold: Option<Spanned<i64>>,
}

impl<'a> Validator<'a> {
    pub(super) fn alerts(&mut self, value: Option<Spanned<DeValue<'a>>>) -> Option<Vec<AlertSettings>> {
        let (raws, mut ok): (Vec<RawAlert>, bool) = self.tables(value, "alerts");
        ok &= self.unique_names(raws.iter().map(|r| &r.name), "alert");
        let mut out = Vec::new();
        for raw in raws {
            match self.alert(raw) {
                Some(a) => out.push(a),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// A secret named by `*_env` or `*_file` (exactly one of them, or neither).
    pub(super) fn secret_source(
        &mut self,
        env: Option<&Spanned<String>>,
        file: Option<&Spanned<String>>,
        what: &str,
    ) -> Result<Option<Secret>, ()> {
        match (env, file) {
            (None, None) => Ok(None),
            (Some(_), Some(f)) => {
                self.error(f.span(), format!("set either {what}_env or {what}_file, not both"));
                Err(())
            }
            _ if self.secrets != Secrets::Resolve => Ok(None),
            (Some(env), None) => match std::env::var(env.get_ref()) {
                Ok(value) if !value.is_empty() => Ok(Some(Secret::new(value))),
                _ => {
                    self.error(env.span(), format!("environment variable {} is not set ({what})", env.get_ref()));
                    Err(())
                }
            },
            (None, Some(file)) => {
                let path = self.path(file.get_ref());
                match std::fs::read_to_string(&path) {
                    Ok(value) if !value.trim().is_empty() => {
                        Ok(Some(Secret::new(value.trim_end_matches(['\n', '\r']))))
                    }
                    Ok(_) => {
                        self.error(file.span(), format!("{} is empty", path.display()));
                        Err(())
                    }
                    Err(err) => {
                        self.error(file.span(), format!("cannot read {}: {err}", path.display()));
                        Err(())
                    }
                }
            }
        }
    }

    fn alert(&mut self, raw: RawAlert) -> Option<AlertSettings> {
        let errors_before = self.diagnostics.len();
        let name = raw.name.get_ref().clone();
        if name.trim().is_empty() {
            self.error(raw.name.span(), "alert name must not be empty");
        }
        let kind = match raw.kind.get_ref().as_str() {
            "webhook" => Some(AlertKind::Webhook),
            "slack" => Some(AlertKind::Slack),
            "cloudevents" => Some(AlertKind::CloudEvents),
            other => {
                self.error(
                    raw.kind.span(),
                    format!("unknown alert type \"{other}\", expected webhook, slack or cloudevents"),
                );
                None
            }
        };

        // The URL: literal, or from the environment / a file when it embeds a token.
        let url = match (&raw.url, &raw.url_env, &raw.url_file) {
            (Some(u), None, None) => Some((u.get_ref().clone(), u.span())),
            (None, env, file) if env.is_some() || file.is_some() => {
                let span = env.as_ref().or(file.as_ref()).map(|s| s.span()).unwrap_or(raw.name.span());
                match self.secret_source(env.as_ref(), file.as_ref(), "url") {
                    Ok(Some(url)) => Some((url.expose().to_string(), span)),
                    // Left unresolved by a command that sends nothing; `.invalid` never resolves.
                    Ok(None) => Some(("http://unresolved-url.invalid/".to_string(), span)),
                    Err(()) => None,
                }
            }
            (None, None, None) => {
                self.error(raw.name.span(), format!("alert \"{name}\" needs url, url_env or url_file"));
                None
            }
            (_, _, _) => {
                let span = raw.url_env.as_ref().or(raw.url_file.as_ref()).map(|s| s.span()).unwrap_or(raw.name.span());
                self.error(span, "set only one of url, url_env and url_file");
                None
            }
        };
        let url = url.and_then(|(text, span)| match reqwest::Url::parse(text.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
                Some(AlertUrl::new(text.trim().to_string()))
            }
            Ok(_) => {
                self.error(span, format!("alert URL {} must be http or https", redact_url(&text)));
                None
            }
            Err(err) => {
                self.error(span, format!("alert URL is not a URL: {err}"));
                None
            }
        });
        let secret = self.secret_source(raw.secret_env.as_ref(), raw.secret_file.as_ref(), "secret").ok().flatten();

        let events = match &raw.events {
            None => DEFAULT_EVENTS.iter().map(|e| e.to_string()).collect(),
            Some(list) if list.is_empty() => {
                self.error(raw.name.span(), "events is empty; omit it for the default, or use [\"*\"]");
                Vec::new()
            }
            Some(list) => {
                for pattern in list {
                    if !EventType::ALL.iter().any(|t| glob_match(pattern.get_ref(), t.as_str())) {
                        let known = EventType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ");
                        self.error(
                            pattern.span(),
                            format!(
                                "\"{}\" matches no event type (known: {known}; `*` matches all)",
                                pattern.get_ref()
                            ),
                        );
                    }
                }
                list.iter().map(|p| p.get_ref().clone()).collect()
            }
        };
        let builders = raw.builders.iter().flatten().map(|b| b.get_ref().clone()).collect();
        if raw.packages.as_ref().is_some_and(Vec::is_empty) {
            self.error(raw.name.span(), "packages is empty; omit it to get every move");
        }
        for pattern in raw.packages.iter().flatten().filter(|p| p.get_ref().trim().is_empty()) {
            self.error(pattern.span(), "a package pattern must not be empty");
        }
        let packages = raw.packages.iter().flatten().map(|p| p.get_ref().clone()).collect();
        let mut headers = Vec::new();
        if let Some(table) = &raw.headers {
            for (k, v) in table.get_ref() {
                let name_ok = reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_ok();
                let value_ok = reqwest::header::HeaderValue::from_str(v).is_ok();
                if !name_ok || !value_ok {
                    self.error(table.span(), format!("header \"{k}\" is not a valid HTTP header name and value"));
                } else if k.to_ascii_lowercase().starts_with("x-builder-monitor-")
                    || k.eq_ignore_ascii_case("content-type")
                {
                    self.error(table.span(), format!("header \"{k}\" is set by builder-monitor itself"));
                } else {
                    headers.push((k.clone(), v.clone()));
                }
            }
        }
        let duration = |v: &mut Self, value: &Option<Spanned<DurationText>>, what: &str, default: Duration| match value
        {
            Some(d) => v.positive_duration(d, what).unwrap_or(default),
            None => default,
        };
        let timeout = duration(self, &raw.timeout, "timeout", Duration::from_secs(10));
        let backoff = duration(self, &raw.backoff, "backoff", Duration::from_secs(5));
        let give_up_after = duration(self, &raw.give_up_after, "give_up_after", Duration::from_secs(24 * 3600));
        let failure_threshold = match &raw.failure_threshold {
            None => DEFAULT_FAILURE_THRESHOLD,
            Some(n) => match u32::try_from(*n.get_ref()) {
                Ok(n @ 1..=1000) => n,
                _ => {
                    self.error(n.span(), format!("failure_threshold must be 1 to 1000, not {}", n.get_ref()));
                    DEFAULT_FAILURE_THRESHOLD
                }
            },
        };
        if self.diagnostics.len() != errors_before {
            return None;
        }
        Some(AlertSettings {
            name,
            kind: kind?,
            url: url?,
            secret,
            events,
            builders,
            packages,
            headers,
            timeout,
            insecure: raw.insecure.unwrap_or(false),
            backoff,
            give_up_after,
            failure_threshold,
        })
    }
}

/// `*` matches any run of characters, `?` one character; everything else itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Classic two-pointer match with backtracking to the last `*`.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The alerts that asked for this event: its type, any builder it concerns and, for a move, any
/// package it moved.
pub fn routes<'a>(alerts: &'a [AlertSettings], event: &Event) -> Vec<&'a str> {
    let about_all = matches!(event.event_type, EventType::RolloutFrozen | EventType::RolloutUnfrozen);
    let builders =
        || std::iter::once(event.builder.name.as_str()).chain(event.builders.iter().map(|b| b.name.as_str()));
    alerts
        .iter()
        // A freeze concerns every builder.
        .filter(|a| {
            a.wants_type(event.event_type.as_str())
                && (about_all || a.wants_builder(builders()))
                && a.wants_packages(event)
        })
        .map(|a| a.name.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", "builder.changed"));
        assert!(glob_match("build.*", "build.failed"));
        assert!(!glob_match("build.*", "builder.changed"));
        assert!(glob_match("paketo-*", "paketo-jammy-base"));
        assert!(glob_match("*-jammy-*", "paketo-jammy-base"));
        assert!(glob_match("heroku-2?", "heroku-24"));
        assert!(!glob_match("heroku-2?", "heroku-240"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
    }

    fn alert(extra: &str) -> Result<super::super::Config, super::super::ConfigError> {
        let text = format!(
            "[[builders]]\nname = \"b\"\nimage = \"docker.io/x/y:latest\"\n[[alerts]]\nname = \"a\"\ntype = \"webhook\"\nurl = \"https://hooks.example.test/x\"\n{extra}"
        );
        super::super::Config::parse(std::path::Path::new("config.toml"), &text)
    }

    #[test]
    fn package_filters_are_validated_and_match_moved_packages_only() {
        let config = alert("packages = [\"openssl*\", \"libc6\"]\n").unwrap();
        let a = &config.alerts[0];
        assert_eq!(a.packages, ["openssl*", "libc6"]);
        let err = alert("packages = []\n").unwrap_err().to_string();
        assert!(err.contains("packages is empty"), "{err}");
        let err = alert("packages = [\" \"]\n").unwrap_err().to_string();
        assert!(err.contains("config.toml:8:13: a package pattern must not be empty"), "{err}");

        use builder_monitor_core::packages::{PackageChange, PackageDiff, Source};
        let mut event = builder_monitor_core::event::example_builder_changed();
        assert!(!a.wants_packages(&event), "a move without a package diff");
        let diff = |name: &str| PackageDiff {
            source: Source::PaketoLabel,
            changed: vec![PackageChange { name: name.into(), arch: None, from: "1".into(), to: "2".into() }],
            added: vec![],
            removed: vec![],
            platforms: Default::default(),
        };
        event.change.as_mut().unwrap().packages = Some(diff("libssl3"));
        assert!(!a.wants_packages(&event));
        event.change.as_mut().unwrap().packages = Some(diff("openssl-dev"));
        assert!(a.wants_packages(&event));
        assert_eq!(routes(&config.alerts, &event), ["a"]);
        // Failures are not moves: the filter leaves them alone.
        event.event_type = EventType::CheckFailed;
        event.change.as_mut().unwrap().packages = None;
        assert!(a.wants_packages(&event));
    }
}
