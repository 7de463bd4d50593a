//! One registry's connection: its rate limiter and pull quota, bearer tokens cached per scope,
//! requests with retries that honour `Retry-After`, redirects followed by hand, and bodies read
//! within a limit.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::Rng;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, LOCATION, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode, Url};
use tokio::time::Instant;

use super::*;
use crate::config::{Credentials, RegistrySettings, Secret};
use crate::metrics::{Metrics, RegistryLabels, RequestLabels};
use prometheus_client::metrics::counter::Counter;

/// `scheme://host:port` of a URL, for messages: never its path or query (signed URLs carry secrets).
pub(super) fn origin_of(url: &Url) -> String {
    url.origin().ascii_serialization()
}

pub(super) fn is_redirect(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    )
}

/// What a registry request fetches; it decides where a redirect may lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fetch {
    /// Digests come from these: only redirects within the registry's origin and repository.
    Manifest,
    /// Digest-verified content: storage on other hosts too, without credentials.
    Blob,
    /// Uploads and manifest PUTs: a redirect is not followed (a body would go where we did not choose).
    Write,
    /// A blob HEAD: a redirect (to storage) is the answer itself, the blob exists.
    Probe,
}

/// The body of a registry request.
pub(super) enum Payload {
    Empty,
    /// Sent again on a retry.
    Bytes {
        bytes: bytes::Bytes,
        content_type: String,
    },
    /// Sent once: a failure is not retried (the bytes are gone).
    Stream(Mutex<Option<reqwest::Body>>),
}

/// One registry request besides its method and URL.
pub(super) struct Call<'a> {
    /// The repository the request is about (manifest redirects stay inside it).
    pub(super) repository: &'a str,
    /// Token scope(s), space-separated; also the token cache key.
    pub(super) scope: &'a str,
    pub(super) fetch: Fetch,
    pub(super) payload: Payload,
    /// Instead of the registry's `timeout`: a layer takes longer than a manifest.
    pub(super) timeout: Option<Duration>,
}

/// `repository:NAME:pull`, the token scope of reads.
pub(super) fn pull_scope(repository: &str) -> String {
    format!("repository:{repository}:pull")
}

pub(super) fn header_str(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_string())
}

/// The scheme a registry asked for, learned from its first 401.
#[derive(Debug, Clone)]
pub(super) enum Scheme {
    Unknown,
    Basic,
    Bearer { realm: String, service: Option<String> },
}

/// Pull quota a registry reported in `RateLimit-*` headers (Docker Hub: `76;w=21600`).
#[derive(Debug, Clone, Copy)]
pub(super) struct PullQuota {
    pub(super) remaining: u64,
    pub(super) limit: Option<u64>,
    pub(super) window: Option<Duration>,
}

/// One registry host.
pub struct Endpoint {
    pub(super) settings: RegistrySettings,
    /// `scheme://api_host`: requests go here, redirects are judged against its origin.
    pub(super) base: Url,
    pub(super) http: reqwest::Client,
    pub(super) circuit: circuit::Circuit,
    pub(super) limiter: Option<DefaultDirectRateLimiter>,
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
}

/// One (method, status) pair's counter of this registry's requests; `None` is no answer.
pub(super) struct RequestCounter {
    method: String,
    status: Option<u16>,
    counter: Counter,
}

pub(super) struct TokenExpiry;

impl moka::Expiry<String, Arc<Token>> for TokenExpiry {
    fn expire_after_create(&self, _: &String, token: &Arc<Token>, _: std::time::Instant) -> Option<Duration> {
        Some(token.ttl)
    }
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
        let mut builder = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .pool_idle_timeout(Duration::from_secs(90))
            // As many idle connections as checks run at once (monitor::CHECK_CONCURRENCY): a burst of due checks
            // otherwise leaves thousands of idle sockets and their buffers behind.
            .pool_max_idle_per_host(16)
            // Followed by hand (`send`): where a redirect may lead depends on what is fetched.
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = &settings.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| setup(format!("ca_file is not a valid PEM bundle: {e}")))?;
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder.build().map_err(|e| setup(format!("cannot build HTTP client: {e}")))?;
        let limiter = rate_limiter(&settings);
        let base = Url::parse(&format!("{scheme}://{api_host}"))
            .map_err(|e| setup(format!("\"{api_host}\" is not a usable host: {e}")))?;
        Ok(Self {
            base,
            http,
            circuit: circuit::Circuit::default(),
            limiter,
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

    /// The username and password sent as basic auth (to the registry, or to its token service):
    /// configured, or a credential helper's answer.
    pub(super) async fn credentials(&self) -> Result<Option<(String, Secret)>, RegistryError> {
        match (&self.settings.credentials, &self.helper) {
            (Credentials::Basic { username, password, .. }, _) => Ok(Some((username.clone(), password.clone()))),
            (_, Some(helper)) => helper.credentials().await.map(Some).map_err(|e| self.unauthorized(e.to_string())),
            _ => Ok(None),
        }
    }

    /// Whether this registry has credentials to send.
    pub(super) fn has_credentials(&self) -> bool {
        !matches!(self.settings.credentials, Credentials::Anonymous)
    }

    /// The registry (or its token service) refused the credentials sent: a helper's answer is
    /// dropped so the next request asks the helper again. Answers what to tell the user.
    pub(super) async fn credentials_refused(&self) -> String {
        match &self.helper {
            Some(helper) => {
                helper.forget().await;
                format!("; the credentials {} gave were refused (it is asked again at the next request)", helper.name())
            }
            None => String::new(),
        }
    }

    /// Waits out any pause and the rate limiter; fails fast when a pause is too long to wait inline.
    pub(super) async fn wait_turn(&self, pull: bool) -> Result<(), RegistryError> {
        let started = Instant::now();
        loop {
            let now = Instant::now();
            let paused = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
            let pulls = if pull { *self.pulls_paused_until.lock().unwrap_or_else(|e| e.into_inner()) } else { None };
            match paused.max(pulls) {
                Some(until) if until > now => {
                    let wait = until - now;
                    if wait > MAX_INLINE_WAIT {
                        let why = if pulls > paused { "the pull quota is spent" } else { "after an HTTP 429" };
                        return Err(self.rate_limited(format!(
                            "requests to this registry are paused for another {} ({why})",
                            whole_seconds(wait)
                        )));
                    }
                    tokio::time::sleep_until(until).await;
                }
                _ => break,
            }
        }
        if let Some(limiter) = &self.limiter {
            limiter.until_ready().await;
        }
        let waited = started.elapsed();
        if !waited.is_zero() {
            self.metrics.rate_limit_wait.get_or_create(&self.labels).inc_by(waited.as_secs_f64());
        }
        Ok(())
    }

    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.settings.backoff.saturating_mul(1u32 << attempt.min(16)).min(MAX_BACKOFF);
        // Half fixed, half random: retries from many tasks spread out but never come back at once.
        let half = exp / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }

    /// Holds every request back for `wait`, at most `max_retry_after`.
    pub(super) fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait.min(self.settings.max_retry_after);
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if paused.is_none_or(|p| p < until) {
            *paused = Some(until);
        }
    }

    /// Reads `RateLimit-Remaining`/`RateLimit-Limit`; when the pull quota is spent, holds GETs back for
    /// the time one pull takes to come back (window / limit), rather than earning a 429.
    pub(super) fn observe_quota(&self, headers: &HeaderMap) {
        let Some(quota) = parse_quota(headers) else {
            return;
        };
        if quota.remaining > 0 {
            if let Some(limit) = quota.limit
                && quota.remaining * 10 < limit
            {
                tracing::warn!(registry = %self.settings.host, remaining = quota.remaining, limit, "registry pull quota nearly spent");
            }
            return;
        }
        let window = quota.window.unwrap_or(Duration::from_secs(3600));
        let limit = u32::try_from(quota.limit.unwrap_or(1).max(1)).unwrap_or(u32::MAX);
        // A registry's word, so bounded like Retry-After.
        let wait = (window / limit).min(self.settings.max_retry_after);
        tracing::warn!(registry = %self.settings.host, wait = %whole_seconds(wait), "registry pull quota spent, holding GETs back");
        *self.pulls_paused_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + wait);
    }

    /// Adds credentials; returns the bearer token it sent, so a 401 can retire exactly that token.
    pub(super) async fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        scope: &str,
    ) -> Result<(reqwest::RequestBuilder, Option<Arc<Token>>), RegistryError> {
        let scheme = self.scheme.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match scheme {
            Scheme::Unknown => Ok((request, None)),
            Scheme::Basic => Ok((
                match Box::pin(self.credentials()).await? {
                    Some((user, password)) => request.basic_auth(user, Some(password.expose())),
                    None => request,
                },
                None,
            )),
            Scheme::Bearer { realm, service } => {
                // A cached token first: the fetch's future, which `try_get_with` holds inline, is
                // built (boxed) only on a miss, and a hit allocates no key.
                let token = match self.tokens.get(scope).await {
                    Some(token) => token,
                    None => self
                        .tokens
                        .try_get_with(scope.to_string(), Box::pin(self.fetch_token(&realm, service.as_deref(), scope)))
                        .await
                        .map_err(|e: Arc<RegistryError>| (*e).clone())?,
                };
                Ok((request.bearer_auth(token.value.expose()), Some(token)))
            }
        }
    }

    pub(super) async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<Arc<Token>, RegistryError> {
        let mut url = reqwest::Url::parse(realm)
            .map_err(|e| self.invalid(format!("token realm \"{realm}\" is not a URL: {e}")))?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            // A push with a mount asks for two scopes: one parameter each, as Docker clients send them.
            for scope in scope.split(' ').filter(|s| !s.is_empty()) {
                query.append_pair("scope", scope);
            }
        }
        let realm_url = url.clone();
        let mut attempt = 0;
        let mut hops = 0;
        loop {
            self.wait_turn(false).await?;
            let mut request = self.http.get(url.clone());
            if let Some((user, password)) = self.credentials().await? {
                request = request.basic_auth(user, Some(password.expose()));
            }
            self.metrics.token_fetches.get_or_create(&self.labels).inc();
            let response = request.send().await;
            self.record_request("GET", response.as_ref().ok().map(|r| r.status()));
            let failure = match response {
                Ok(response) => match response.status() {
                    s if is_redirect(s) => {
                        // The credentials above go with every hop: only within the realm's origin.
                        let target = self.redirect_target(&response, &mut hops, "the token service")?;
                        if target.origin() != realm_url.origin() {
                            return Err(self.invalid(format!(
                                "the token service redirected to another host, {}; token requests follow redirects only within {}",
                                origin_of(&target),
                                origin_of(&realm_url)
                            )));
                        }
                        url = target;
                        continue;
                    }
                    s if s.is_success() => {
                        let body = self.read_body(response, 1 << 20, "token response").await?;
                        return parse_token_response(&body).map(Arc::new).map_err(|e| self.invalid(e.to_string()));
                    }
                    StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                        let refused = Box::pin(self.credentials_refused()).await;
                        return Err(self.unauthorized(format!(
                            "token service refused {scope} (HTTP {}){refused}",
                            response.status()
                        )));
                    }
                    s if s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error() => {
                        let retry = retry_after(response.headers());
                        if let Some(wait) = retry {
                            self.pause(wait);
                        }
                        if s == StatusCode::TOO_MANY_REQUESTS {
                            self.rate_limited(match retry {
                                Some(wait) => {
                                    format!("token service answered HTTP 429, retry after {}", whole_seconds(wait))
                                }
                                None => "token service answered HTTP 429".to_string(),
                            })
                        } else {
                            self.unavailable(format!("token service answered HTTP {s}"))
                        }
                    }
                    s => return Err(self.invalid(format!("token service answered HTTP {s}"))),
                },
                Err(e) => self.unavailable(format!("token service: {}", describe(&e))),
            };
            attempt += 1;
            if attempt >= self.settings.max_attempts {
                return Err(failure);
            }
            tokio::time::sleep(self.backoff(attempt - 1)).await;
        }
    }

    /// Reacts to a 401: learns the scheme and says whether a retry can succeed.
    ///
    /// `sent` is the bearer token the rejected request carried. Only that token is retired: the first
    /// checks of a scope all arrive without one, and dropping the token the first of them fetched
    /// would make every other one fetch its own.
    pub(super) async fn learn_challenge(
        &self,
        headers: &HeaderMap,
        scope: &str,
        sent: Option<Arc<Token>>,
    ) -> Result<(), RegistryError> {
        let challenge = headers.get(WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).and_then(parse_challenge);
        match challenge {
            Some(Challenge::Bearer { realm, service }) => {
                *self.scheme.lock().unwrap_or_else(|e| e.into_inner()) = Scheme::Bearer { realm, service };
                if let Some(sent) = sent {
                    self.tokens
                        .entry(scope.to_string())
                        .and_compute_with(|cached| {
                            let stale = cached.is_some_and(|c| Arc::ptr_eq(c.value(), &sent));
                            std::future::ready(if stale {
                                moka::ops::compute::Op::Remove
                            } else {
                                moka::ops::compute::Op::Nop
                            })
                        })
                        .await;
                }
                Ok(())
            }
            Some(Challenge::Basic) if self.has_credentials() => {
                *self.scheme.lock().unwrap_or_else(|e| e.into_inner()) = Scheme::Basic;
                Ok(())
            }
            Some(Challenge::Basic) => {
                Err(self.unauthorized(format!(
                    "registry requires a username and password; set them in [registries.\"{}\"] (username + password_env, or docker_config)",
                    self.settings.host
                )))
            }
            None => Err(self.unauthorized("HTTP 401 without a usable WWW-Authenticate challenge")),
        }
    }

    /// Sends one registry API request with auth, limiter, pauses, retries and the circuit; follows
    /// redirects as `fetch` allows. Returns any response that is not 401/403/429/5xx or a redirect.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        repository: &str,
        fetch: Fetch,
    ) -> Result<Response, RegistryError> {
        let url = self.api_url(&method, path)?;
        let scope = pull_scope(repository);
        self.send_to(method, url, Call { repository, scope: &scope, fetch, payload: Payload::Empty, timeout: None })
            .await
    }

    /// `/v2/PATH` on this registry (PATH may carry a query).
    pub(super) fn api_url(&self, method: &Method, path: &str) -> Result<Url, RegistryError> {
        self.base.join(&format!("/v2/{path}")).map_err(|e| self.invalid(format!("{method} {path}: {e}")))
    }

    /// `send` for any URL of this registry, token scope, body and timeout.
    pub(super) async fn send_to(
        &self,
        method: Method,
        mut url: Url,
        call: Call<'_>,
    ) -> Result<Response, RegistryError> {
        let Call { repository, scope, fetch, payload, timeout } = call;
        // Messages name the path only: an upload URL's query is the registry's state, not ours to print.
        let path = url.path().strip_prefix("/v2/").unwrap_or(url.path()).to_string();
        let once = matches!(payload, Payload::Stream(_));
        let pull = method == Method::GET;
        let mut attempt = 0u32;
        let mut reauthorized = false;
        let mut hops = 0;
        loop {
            // Before the limiter: a request the circuit turns away costs the registry nothing.
            let pass = self.circuit.admit().map_err(|open| {
                self.unavailable(format!(
                    "not asked: its last {} requests got no answer (connection failures or timeouts; failing fast for {}, one probe at a time until it answers)",
                    open.failures,
                    whole_seconds(open.since)
                ))
            })?;
            self.wait_turn(pull).await?;
            let mut request = self.http.request(method.clone(), url.clone()).header(ACCEPT, MANIFEST_ACCEPT);
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            request = match &payload {
                Payload::Empty if fetch == Fetch::Write => request.header(CONTENT_LENGTH, 0),
                Payload::Empty => request,
                Payload::Bytes { bytes, content_type } => {
                    request.header(CONTENT_TYPE, content_type.as_str()).body(bytes.clone())
                }
                Payload::Stream(body) => match body.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(body) => request.header(CONTENT_TYPE, "application/octet-stream").body(body),
                    None => return Err(self.invalid(format!("{method} {path}: a streamed body cannot be sent twice"))),
                },
            };
            let (request, sent) = self.authorize(request, scope).await?;
            let response = request.send().await;
            self.record_request(method.as_str(), response.as_ref().ok().map(|r| r.status()));
            let failure = match response {
                Ok(response) => {
                    pass.answered(&self.settings.host);
                    self.observe_quota(response.headers());
                    let status = response.status();
                    match status {
                        s if is_redirect(s) && fetch == Fetch::Probe => return Ok(response),
                        s if is_redirect(s) && fetch == Fetch::Write => {
                            return Err(self.invalid(format!(
                                "{method} {path} answered HTTP {s}; writes do not follow redirects"
                            )));
                        }
                        s if is_redirect(s) => {
                            let target = self.redirect_target(&response, &mut hops, &format!("{method} {path}"))?;
                            if target.origin() != self.base.origin() {
                                if fetch == Fetch::Blob {
                                    return Box::pin(self.fetch_from_storage(target, hops, timeout)).await;
                                }
                                return Err(self.invalid(format!(
                                    "{method} {path} redirected to another host, {}; manifest requests follow redirects only within {}",
                                    origin_of(&target),
                                    origin_of(&self.base)
                                )));
                            }
                            let manifests = format!("/v2/{repository}/manifests/");
                            if fetch == Fetch::Manifest && !target.path().starts_with(&manifests) {
                                return Err(self.invalid(format!(
                                    "{method} {path} redirected to {}, outside {manifests}; not followed",
                                    target.path()
                                )));
                            }
                            url = target;
                            continue;
                        }
                        StatusCode::UNAUTHORIZED if !reauthorized && !once => {
                            reauthorized = true;
                            Box::pin(self.learn_challenge(response.headers(), scope, sent)).await?;
                            continue;
                        }
                        StatusCode::UNAUTHORIZED if once => {
                            return Err(
                                self.unauthorized(format!("{method} {path} answered HTTP 401 to a streamed upload"))
                            );
                        }
                        StatusCode::UNAUTHORIZED => {
                            let refused = Box::pin(self.credentials_refused()).await;
                            let fix = if refused.is_empty() {
                                format!("; check the username and password in [registries.\"{}\"]", self.settings.host)
                            } else {
                                refused
                            };
                            return Err(self.unauthorized(format!(
                                "{method} {path} answered HTTP 401 with fresh credentials{fix}"
                            )));
                        }
                        StatusCode::FORBIDDEN => {
                            return Err(self.unauthorized(format!("{method} {path} answered HTTP 403 (access denied)")));
                        }
                        StatusCode::TOO_MANY_REQUESTS => {
                            let retry = retry_after(response.headers());
                            self.metrics.rate_limited.get_or_create(&self.labels).inc();
                            let cap = self.settings.max_retry_after;
                            if let Some(asked) = retry.filter(|r| *r > cap) {
                                // Not a day-long silence on one answer: wait the cap, then ask again.
                                tracing::warn!(registry = %self.settings.host, retry_after = %whole_seconds(asked), max_retry_after = %whole_seconds(cap), "HTTP 429 asks for a longer pause than max_retry_after; pausing for max_retry_after");
                                self.pause(cap);
                                return Err(self.rate_limited(format!(
                                    "the registry asks to retry after {}, more than max_retry_after ({}); requests to it pause for {}",
                                    whole_seconds(asked),
                                    whole_seconds(cap),
                                    whole_seconds(cap)
                                )));
                            }
                            let wait = retry.unwrap_or_else(|| self.backoff(attempt));
                            // DEBUG: a check that fails for it logs it (`rate_limited`), once per outage.
                            tracing::debug!(registry = %self.settings.host, wait = %whole_seconds(wait), "HTTP 429, pausing requests to this registry");
                            self.pause(wait);
                            attempt += 1;
                            if attempt >= self.settings.max_attempts || once {
                                return Err(self.rate_limited(match retry {
                                    Some(wait) => format!("HTTP 429, retry after {}", whole_seconds(wait)),
                                    None => format!(
                                        "HTTP 429 on all {}",
                                        builder_monitor_core::text::count(self.settings.max_attempts, "attempt")
                                    ),
                                }));
                            }
                            // wait_turn sleeps until the pause ends.
                            continue;
                        }
                        s if s.is_server_error() => self.unavailable(format!("{method} {path} answered HTTP {s}")),
                        _ => return Ok(response),
                    }
                }
                Err(e) => {
                    pass.unanswered(&self.settings.host);
                    let detail = describe(&e);
                    if !self.settings.insecure && speaks_plain_http(&detail) {
                        // Not a passing fault: retrying cannot help, the configuration must change.
                        return Err(RegistryError::Setup {
                            registry: self.settings.host.clone(),
                            detail: format!(
                                "{method} {path}: {detail}: the registry answers plain HTTP, not HTTPS; if that is intended, set `insecure = true` under [registries.\"{}\"] (or pass --insecure to resolve and diff)",
                                self.settings.host
                            ),
                        });
                    }
                    let failure = self.unavailable(format!("{method} {path}: {detail}"));
                    if self.circuit.is_open() {
                        return Err(failure);
                    }
                    failure
                }
            };
            attempt += 1;
            if attempt >= self.settings.max_attempts || once {
                return Err(failure.after_attempts(attempt));
            }
            let wait = self.backoff(attempt - 1);
            tracing::debug!(registry = %self.settings.host, attempt, max_attempts = self.settings.max_attempts, wait = ?wait, error = %failure, "request failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// Where a redirect points, counted against `MAX_REDIRECTS`.
    pub(super) fn redirect_target(
        &self,
        response: &Response,
        hops: &mut usize,
        what: &str,
    ) -> Result<Url, RegistryError> {
        *hops += 1;
        if *hops > MAX_REDIRECTS {
            return Err(self.invalid(format!("{what}: more than {MAX_REDIRECTS} redirects")));
        }
        let status = response.status();
        let target = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|location| response.url().join(location).ok())
            .ok_or_else(|| self.invalid(format!("{what} answered HTTP {status} without a usable Location")))?;
        if !matches!(target.scheme(), "http" | "https") {
            return Err(self.invalid(format!("{what} redirected to a {} URL", target.scheme())));
        }
        Ok(target)
    }

    /// A blob from storage on another host (object storage, a CDN) that the registry redirected
    /// to: sent without credentials; the caller verifies the blob's digest as always.
    pub(super) async fn fetch_from_storage(
        &self,
        mut url: Url,
        mut hops: usize,
        timeout: Option<Duration>,
    ) -> Result<Response, RegistryError> {
        loop {
            let storage = origin_of(&url);
            let mut request = self.http.get(url.clone());
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            let response = request.send().await;
            self.record_request("GET", response.as_ref().ok().map(|r| r.status()));
            let response =
                response.map_err(|e| self.unavailable(format!("blob storage {storage}: {}", describe(&e))))?;
            let status = response.status();
            if is_redirect(status) {
                url = self.redirect_target(&response, &mut hops, &format!("blob storage {storage}"))?;
                continue;
            }
            if status.is_success() {
                return Ok(response);
            }
            let detail = format!("blob storage {storage} answered HTTP {status}");
            // Its 404 is not the registry's: the registry named a blob it does not have.
            return Err(if status.is_server_error() { self.unavailable(detail) } else { self.invalid(detail) });
        }
    }

    pub(super) async fn read_body(
        &self,
        mut response: Response,
        limit: usize,
        what: &str,
    ) -> Result<bytes::Bytes, RegistryError> {
        let announced = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(len) = announced
            && len > limit as u64
        {
            return Err(self.invalid(format!("{what} is {len} bytes, over the {limit}-byte limit")));
        }
        // Sized once when announced: growing by doubling would hold up to twice a large config.
        let mut body = Vec::with_capacity(announced.unwrap_or(0) as usize);
        while let Some(chunk) =
            response.chunk().await.map_err(|e| self.unavailable(format!("reading {what}: {}", describe(&e))))?
        {
            if body.len() + chunk.len() > limit {
                return Err(self.invalid(format!("{what} is over the {limit}-byte limit")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.into())
    }
}

/// A registry's request limiter (`None`: no limit). The rate goes through `config::rate_period`, so
/// no configured rate can overflow the period (a rate of 1e-30 once panicked every check).
pub fn rate_limiter(settings: &RegistrySettings) -> Option<DefaultDirectRateLimiter> {
    let rps = settings.requests_per_second?;
    let burst = NonZeroU32::new(settings.burst).unwrap_or(NonZeroU32::MIN);
    let quota =
        Quota::with_period(crate::config::rate_period(rps)).unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX));
    Some(RateLimiter::direct(quota.allow_burst(burst)))
}

/// `Retry-After` as seconds or an HTTP date.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds.min(24 * 3600)));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).to_std().ok()
}

pub(super) fn parse_quota(headers: &HeaderMap) -> Option<PullQuota> {
    let parse = |name: &str| -> Option<(u64, Option<Duration>)> {
        let value = headers.get(name)?.to_str().ok()?;
        let mut parts = value.split(';');
        let count = parts.next()?.trim().parse().ok()?;
        let window = parts
            .filter_map(|p| p.trim().strip_prefix("w="))
            .find_map(|w| w.parse::<u64>().ok())
            .map(Duration::from_secs);
        Some((count, window))
    };
    let (remaining, w1) = parse("ratelimit-remaining")?;
    let (limit, w2) = parse("ratelimit-limit").map(|(l, w)| (Some(l), w)).unwrap_or((None, None));
    Some(PullQuota { remaining, limit, window: w1.or(w2) })
}

/// An error message with its causes, without the URL noise reqwest puts first.
pub(super) fn describe(error: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    if error.is_timeout() {
        parts.push("timed out".to_string());
    } else if error.is_connect() {
        parts.push("connection failed".to_string());
    }
    let mut source = std::error::Error::source(error);
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
