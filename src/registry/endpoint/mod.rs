//! One registry's connection: its state (HTTP client, circuit, limiter, pauses, token cache,
//! request counters) and its errors. What it does with them parts along three seams: how often it
//! asks (`limiter`), who it says it is (`tokens`) and sending a request (`send`).

mod direct;
mod limiter;
mod send;
mod tokens;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::DefaultDirectRateLimiter;
use reqwest::header::HeaderMap;
use reqwest::{StatusCode, Url};
use tokio::time::Instant;

pub use limiter::{rate_limiter, write_rate_limiter};

/// `scheme://host:port` of a URL, for messages: never its path or query (signed URLs carry secrets).
pub(in crate::registry) fn origin_of(url: &Url) -> String {
    url.origin().ascii_serialization()
}

pub(in crate::registry) fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

#[cfg(test)]
pub(super) use limiter::{parse_quota, retry_after};
pub(super) use send::{Call, Fetch, Payload};
pub(super) use tokens::pull_scope;
use tokens::{Scheme, TokenExpiry};

use super::*;
use crate::config::{Credentials, RegistrySettings};
use crate::metrics::{Metrics, RegistryLabels, RequestLabels};
use builder_monitor_core::pace::Pace;
use prometheus_client::metrics::counter::Counter;

pub(super) fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string())
}

/// One registry host as one class of requests sees it: `send` and the writes go through the
/// pace of that class; everything else is the endpoint's.
pub(super) struct Lane {
    pub(super) endpoint: Arc<Endpoint>,
    pub(super) class: RequestClass,
}

impl std::ops::Deref for Lane {
    type Target = Endpoint;

    fn deref(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// One registry host.
pub struct Endpoint {
    pub(super) settings: RegistrySettings,
    /// `scheme://api_host`: requests go here, redirects are judged against its origin.
    pub(super) base: Url,
    pub(super) http: reqwest::Client,
    /// The check's manifest `HEAD`s, when no proxy stands between (`direct`).
    pub(super) direct: Option<direct::Direct>,
    pub(super) circuit: circuit::Circuit,
    /// The watching's limiter (`requests_per_second`).
    pub(super) limiter: Option<DefaultDirectRateLimiter>,
    /// Actions' fixed limiter (`write_requests_per_second`); without one, `action_pace` paces them.
    pub(super) action_limiter: Option<DefaultDirectRateLimiter>,
    /// Actions' pace by what the registry answers (AIMD, `builder_monitor_core::pace`).
    pub(super) action_pace: Mutex<Pace>,
    /// Set by 429 `Retry-After`: no request to this registry before then.
    pub(super) paused_until: Mutex<Option<Instant>>,
    /// Set when the pull quota is exhausted: no GET before then.
    pub(super) pulls_paused_until: Mutex<Option<Instant>>,
    pub(super) scheme: Mutex<Scheme>,
    pub(super) tokens: moka::future::Cache<String, Arc<Token>>,
    /// The credential helper that keeps this registry's credentials, if one does.
    pub(super) helper: Option<CredentialHelper>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) labels: RegistryLabels,
    /// This registry's request counters by method and status, so counting a request allocates no
    /// labels (a handful of pairs, kept for the process's life as the metric family keeps them).
    pub(super) request_counters: Mutex<Vec<RequestCounter>>,
    /// Whether the registry serves the OCI 1.1 referrers API, once it answered
    /// ([`super::ReferrersApi`] as a byte): not asked again (a fleet's signatures would ask once
    /// per digest).
    pub(super) referrers_api: std::sync::atomic::AtomicU8,
    /// Whether that answer was handed to the ledger ([`super::Registry::mark_referrers_recorded`]).
    pub(super) referrers_recorded: std::sync::atomic::AtomicBool,
}

/// One (method, status) pair's counter of this registry's requests; `None` is no answer.
pub(super) struct RequestCounter {
    method: String,
    status: Option<u16>,
    counter: Counter,
}

impl Endpoint {
    pub(super) fn new(
        settings: RegistrySettings,
        api_host: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Self, RegistryError> {
        let setup = |detail: String| RegistryError::Setup { registry: settings.host.clone(), detail };
        let scheme = if settings.insecure { "http" } else { "https" };
        crate::install_crypto_provider();
        let builder = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(direct::IDLE_TIMEOUT)
            // As many idle connections as checks run at once (monitor::CHECK_CONCURRENCY): a burst of due checks
            // otherwise leaves thousands of idle sockets and their buffers behind.
            .pool_max_idle_per_host(direct::MAX_IDLE_PER_HOST)
            // Followed by hand (`send`): where a redirect may lead depends on what is fetched.
            .redirect(reqwest::redirect::Policy::none());
        // One TLS configuration (one verifier, one copy of the roots) for both clients.
        let tls = direct::tls_config(settings.ca_pem.as_deref()).map_err(setup)?;
        let mut reqwest_tls = tls.clone();
        // What reqwest offers when it builds the configuration itself (its `http2` feature).
        reqwest_tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let http = builder
            .tls_backend_preconfigured(reqwest_tls)
            .build()
            .map_err(|e| setup(format!("cannot build HTTP client: {e}")))?;
        let limiter = rate_limiter(&settings);
        let action_limiter = write_rate_limiter(&settings);
        let base = Url::parse(&format!("{scheme}://{api_host}"))
            .map_err(|e| setup(format!("\"{api_host}\" is not a usable host: {e}")))?;
        let direct = direct::Direct::new(&base, tls, settings.timeout);
        Ok(Self {
            base,
            http,
            direct,
            circuit: circuit::Circuit::default(),
            limiter,
            action_limiter,
            action_pace: Mutex::default(),
            paused_until: Mutex::new(None),
            pulls_paused_until: Mutex::new(None),
            scheme: Mutex::new(Scheme::Unknown),
            tokens: moka::future::Cache::builder().max_capacity(100_000).expire_after(TokenExpiry).build(),
            helper: match &settings.credentials {
                Credentials::Helper { program, server, .. } => {
                    Some(CredentialHelper::new(program.clone(), server.clone()))
                }
                _ => None,
            },
            labels: Metrics::registry_labels(&settings.host),
            metrics,
            request_counters: Mutex::default(),
            referrers_api: Default::default(),
            referrers_recorded: Default::default(),
            settings,
        })
    }

    pub(super) fn record_request(&self, method: &str, status: Option<StatusCode>) {
        let status = status.map(|s| s.as_u16());
        let mut counters = self.request_counters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = counters.iter().find(|c| c.method == method && c.status == status) {
            known.counter.inc();
            return;
        }
        let labels = RequestLabels {
            registry: self.settings.host.clone(),
            method: method.to_string(),
            status: status.map_or_else(|| "error".to_string(), |s| s.to_string()),
        };
        let counter = self.metrics.registry_requests.get_or_create(&labels).clone();
        counter.inc();
        counters.push(RequestCounter { method: method.to_string(), status, counter });
    }

    pub(super) fn invalid(&self, detail: String) -> RegistryError {
        RegistryError::InvalidResponse { registry: self.settings.host.clone(), detail }
    }

    pub(super) fn unavailable(&self, detail: String) -> RegistryError {
        RegistryError::Unavailable { registry: self.settings.host.clone(), detail }
    }

    pub(super) fn rate_limited(&self, detail: String) -> RegistryError {
        RegistryError::RateLimited { registry: self.settings.host.clone(), detail }
    }

    pub(super) fn unauthorized(&self, detail: impl Into<String>) -> RegistryError {
        RegistryError::Unauthorized { registry: self.settings.host.clone(), detail: detail.into() }
    }
}

/// An error message with its causes, without the URL noise reqwest puts first.
/// Whether a request failed because the registry's name does not resolve. Not a passing fault
/// within one check: a lookup that failed now fails the same a second later, and each costs the
/// resolver's time (seconds when a name server is slow to say no); the next check asks again.
///
/// Known by the errors' words: hyper-util's connector says `dns error` and reqwest's resolver
/// `error resolving DNS`, in types neither crate exports, so there is no type to match.
pub(in crate::registry) fn resolution_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = error.source();
    while let Some(s) = source {
        if matches!(s.to_string().as_str(), "dns error" | "error resolving DNS") {
            return true;
        }
        source = s.source();
    }
    false
}

pub(super) fn describe(error: &reqwest::Error) -> String {
    describe_chain(error.is_timeout(), error.is_connect(), error)
}

/// `describe` for any client's error: what failed, then each cause once.
pub(super) fn describe_chain(timeout: bool, connect: bool, error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    if timeout {
        parts.push("timed out".to_string());
    } else if connect {
        parts.push("connection failed".to_string());
    }
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() {
        parts.push(error.to_string());
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    /// A name glibc refuses without asking a name server (a label over 63 characters: no query
    /// can carry it, checked with strace: no socket but nscd's), so the test sends nothing off
    /// this machine, while the error is the real resolver's, through reqwest and hyper-util.
    fn unresolvable() -> String {
        format!("http://{}.invalid/v2/", "a".repeat(64))
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_told_apart_from_other_failures() {
        crate::install_crypto_provider();
        let client = reqwest::Client::new();
        let err = client.get(unresolvable()).send().await.expect_err("the name does not resolve");
        assert!(super::resolution_failed(&err), "{}", super::describe(&err));
        // A connection closed before any answer fails the request too, but not for its name.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { drop(listener.accept().await) });
        let err = client.get(format!("http://{addr}/v2/")).send().await.expect_err("closed at once");
        assert!(!super::resolution_failed(&err), "{}", super::describe(&err));
    }
}
