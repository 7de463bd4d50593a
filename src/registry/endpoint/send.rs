//! Sending one request: auth, limiter, pauses, retries and the circuit; redirects followed by hand as
//! what is fetched allows; bodies read within a limit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{Method, Response, StatusCode, Url};

use super::direct::DirectError;
use super::limiter::retry_after;
use super::tokens::pull_scope;
use super::{Endpoint, Lane, describe, is_redirect, origin_of, resolution_failed};
use crate::registry::{
    MANIFEST_ACCEPT, MAX_REDIRECTS, RegistryError, RequestClass, Token, speaks_plain_http, whole_seconds,
};

/// Why a request got no answer, from either client.
enum Unanswered {
    Reqwest(reqwest::Error),
    Direct(DirectError),
}

impl Unanswered {
    fn describe(&self) -> String {
        match self {
            Unanswered::Reqwest(e) => describe(e),
            Unanswered::Direct(e) => e.describe(),
        }
    }

    fn resolution_failed(&self) -> bool {
        match self {
            Unanswered::Reqwest(e) => resolution_failed(e),
            Unanswered::Direct(e) => e.as_error().is_some_and(resolution_failed),
        }
    }
}

/// 429s with `Retry-After` an action's request waits out before they count as failed attempts.
const ACTION_THROTTLED_TRIES: u32 = 16;

/// What a registry request fetches; it decides where a redirect may lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::registry) enum Fetch {
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
pub(in crate::registry) enum Payload {
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
pub(in crate::registry) struct Call<'a> {
    /// The repository the request is about (manifest redirects stay inside it).
    pub(in crate::registry) repository: &'a str,
    /// Token scope(s), space-separated; also the token cache key.
    pub(in crate::registry) scope: &'a str,
    pub(in crate::registry) fetch: Fetch,
    pub(in crate::registry) payload: Payload,
    /// Instead of the registry's `timeout`: a layer takes longer than a manifest.
    pub(in crate::registry) timeout: Option<Duration>,
}

impl Lane {
    /// Sends one registry API request with auth, limiter, pauses, retries and the circuit; follows
    /// redirects as `fetch` allows. Returns any response that is not 401/403/429/5xx or a redirect.
    pub(in crate::registry) async fn send(
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

    /// `send` for any URL of this registry, token scope, body and timeout.
    pub(in crate::registry) async fn send_to(
        &self,
        method: Method,
        url: Url,
        call: Call<'_>,
    ) -> Result<Response, RegistryError> {
        // Messages name the path only: an upload URL's query is the registry's state, not ours to print.
        let path = url.path().strip_prefix("/v2/").unwrap_or(url.path()).to_string();
        let once = matches!(call.payload, Payload::Stream(_));
        let mut asking = Asking { method, url, path, call, once, tries: Tries::default() };
        loop {
            // Before the limiter: a request the circuit turns away costs the registry nothing.
            let pass = self.circuit.admit().map_err(|open| {
                self.unavailable(format!(
                    "not asked: its last {} requests got no answer (connection failures or timeouts; failing fast for {}, one probe at a time until it answers)",
                    open.failures,
                    whole_seconds(open.since)
                ))
            })?;
            self.wait_turn(asking.method == Method::GET, self.class).await?;
            let (response, sent) = self.dispatch(&asking).await?;
            self.record_request(asking.method.as_str(), response.as_ref().ok().map(|r| r.status()));
            let failure = match response {
                Ok(response) => {
                    pass.answered(&self.settings.host);
                    match self.answered(response, sent, &mut asking).await? {
                        Answer::Done(response) => return Ok(response),
                        Answer::AskAgain => continue,
                        Answer::Failed(failure) => failure,
                    }
                }
                Err(e) => {
                    pass.unanswered(&self.settings.host);
                    self.unanswered(&e, &asking)?
                }
            };
            let tries = &mut asking.tries;
            tries.attempt += 1;
            if tries.attempt >= self.settings.max_attempts || asking.once {
                return Err(failure.after_attempts(tries.attempt));
            }
            let wait = self.backoff(tries.attempt - 1);
            tracing::debug!(registry = %self.settings.host, attempt = tries.attempt, max_attempts = self.settings.max_attempts, wait = ?wait, error = %failure, "request failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// Sends the request once, as it stands: the plain manifest HEAD (the check's request) on the
    /// lighter client; a redirect's next hop and everything else on reqwest. Answers the response
    /// (or why there was none) and the credentials it carried.
    async fn dispatch(&self, asking: &Asking<'_>) -> Result<(Result<Response, Unanswered>, Sent), RegistryError> {
        let Asking { method, url, path, call, tries, .. } = asking;
        let direct = match &self.direct {
            Some(direct)
                if *method == Method::HEAD
                    && call.fetch == Fetch::Manifest
                    && tries.hops == 0
                    && call.timeout.is_none()
                    && matches!(call.payload, Payload::Empty) =>
            {
                url.as_str().parse::<hyper::Uri>().ok().map(|uri| (direct, uri))
            }
            _ => None,
        };
        if let Some((direct, uri)) = direct {
            let (authorization, sent) = self.authorization(call.scope, self.class).await?;
            return Ok((direct.head(url, uri, authorization).await.map_err(Unanswered::Direct), sent));
        }
        let mut request = self.http.request(method.clone(), url.clone()).header(ACCEPT, MANIFEST_ACCEPT);
        if let Some(timeout) = call.timeout {
            request = request.timeout(timeout);
        }
        request = match &call.payload {
            Payload::Empty if call.fetch == Fetch::Write => request.header(CONTENT_LENGTH, 0),
            Payload::Empty => request,
            Payload::Bytes { bytes, content_type } => {
                request.header(CONTENT_TYPE, content_type.as_str()).body(bytes.clone())
            }
            Payload::Stream(body) => match body.lock().unwrap_or_else(|e| e.into_inner()).take() {
                Some(body) => request.header(CONTENT_TYPE, "application/octet-stream").body(body),
                None => return Err(self.invalid(format!("{method} {path}: a streamed body cannot be sent twice"))),
            },
        };
        let (request, sent) = self.authorize(request, call.scope, self.class).await?;
        Ok((request.send().await.map_err(Unanswered::Reqwest), sent))
    }

    /// What an answer means for the request: done, ask again at once (a redirect followed, a
    /// challenge learned, a pause waited out), a failure to retry, or an error that ends it.
    async fn answered(&self, response: Response, sent: Sent, asking: &mut Asking<'_>) -> Result<Answer, RegistryError> {
        self.observe_quota(response.headers());
        let status = response.status();
        if self.class == RequestClass::Action {
            self.pace_answer(status, response.headers());
        }
        let (method, path, once) = (&asking.method, asking.path.as_str(), asking.once);
        match status {
            s if is_redirect(s) => self.redirected(response, asking).await,
            StatusCode::UNAUTHORIZED if !asking.tries.reauthorized && !once => {
                asking.tries.reauthorized = true;
                Box::pin(self.learn_challenge(response.headers(), asking.call.scope, sent)).await?;
                Ok(Answer::AskAgain)
            }
            StatusCode::UNAUTHORIZED if once => {
                Err(self.unauthorized(format!("{method} {path} answered HTTP 401 to a streamed upload")))
            }
            StatusCode::UNAUTHORIZED => {
                let refused = Box::pin(self.credentials_refused()).await;
                let fix = if refused.is_empty() {
                    format!("; check the username and password in [registries.\"{}\"]", self.settings.host)
                } else {
                    refused
                };
                Err(self.unauthorized(format!("{method} {path} answered HTTP 401 with fresh credentials{fix}")))
            }
            StatusCode::FORBIDDEN => {
                Err(self.unauthorized(format!("{method} {path} answered HTTP 403 (access denied)")))
            }
            StatusCode::TOO_MANY_REQUESTS => self.throttled(&response, asking),
            s if s.is_server_error() => {
                // A 503 that says when to come back is the registry's pace, like a 429.
                if let Some(wait) = retry_after(response.headers()).filter(|_| s == StatusCode::SERVICE_UNAVAILABLE) {
                    self.pause(wait);
                }
                Ok(Answer::Failed(self.unavailable(format!("{method} {path} answered HTTP {s}"))))
            }
            _ => Ok(Answer::Done(response)),
        }
    }

    /// A redirect: the answer itself for a probe, refused for a write, followed within the
    /// registry's origin (and a manifest's repository), to storage elsewhere only for a blob.
    async fn redirected(&self, response: Response, asking: &mut Asking<'_>) -> Result<Answer, RegistryError> {
        let (method, path, fetch) = (&asking.method, asking.path.as_str(), asking.call.fetch);
        let status = response.status();
        match fetch {
            Fetch::Probe => return Ok(Answer::Done(response)),
            Fetch::Write => {
                return Err(
                    self.invalid(format!("{method} {path} answered HTTP {status}; writes do not follow redirects"))
                );
            }
            Fetch::Manifest | Fetch::Blob => {}
        }
        let target = self.redirect_target(&response, &mut asking.tries.hops, &format!("{method} {path}"))?;
        if target.origin() != self.base.origin() {
            if fetch == Fetch::Blob {
                let hops = asking.tries.hops;
                return Box::pin(self.fetch_from_storage(target, hops, asking.call.timeout)).await.map(Answer::Done);
            }
            return Err(self.invalid(format!(
                "{method} {path} redirected to another host, {}; manifest requests follow redirects only within {}",
                origin_of(&target),
                origin_of(&self.base)
            )));
        }
        let manifests = format!("/v2/{}/manifests/", asking.call.repository);
        if fetch == Fetch::Manifest && !target.path().starts_with(&manifests) {
            return Err(self.invalid(format!(
                "{method} {path} redirected to {}, outside {manifests}; not followed",
                target.path()
            )));
        }
        asking.url = target;
        Ok(Answer::AskAgain)
    }

    /// HTTP 429: requests to the registry pause for as long as it asks (up to `max_retry_after`),
    /// then this one is asked again; an action's request told when to come back is not failing
    /// and waits its turn a bounded number of times.
    fn throttled(&self, response: &Response, asking: &mut Asking<'_>) -> Result<Answer, RegistryError> {
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
        let wait = retry.unwrap_or_else(|| self.backoff(asking.tries.attempt));
        // DEBUG: a check that fails for it logs it (`rate_limited`), once per outage.
        tracing::debug!(registry = %self.settings.host, wait = %whole_seconds(wait), "HTTP 429, pausing requests to this registry");
        self.pause(wait);
        let tries = &mut asking.tries;
        tries.throttled += 1;
        let paced = self.class == RequestClass::Action && retry.is_some();
        if !paced || tries.throttled > ACTION_THROTTLED_TRIES {
            tries.attempt += 1;
        }
        if tries.attempt >= self.settings.max_attempts || asking.once {
            return Err(self.rate_limited(match retry {
                Some(wait) => format!("HTTP 429, retry after {}", whole_seconds(wait)),
                None => format!(
                    "HTTP 429 on all {}",
                    builder_monitor_core::text::count(self.settings.max_attempts, "attempt")
                ),
            }));
        }
        // wait_turn sleeps until the pause ends.
        Ok(Answer::AskAgain)
    }

    /// No answer: a failure to retry, unless retrying cannot help (plain HTTP where HTTPS was
    /// asked, a host that does not resolve) or the circuit has opened.
    fn unanswered(&self, e: &Unanswered, asking: &Asking<'_>) -> Result<RegistryError, RegistryError> {
        let (method, path) = (&asking.method, asking.path.as_str());
        let detail = e.describe();
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
        if e.resolution_failed() {
            // Asking again within this check gets the same answer; the next check asks.
            let host = &self.settings.host;
            return Err(self
                .unavailable(format!("{method} {path}: {detail}: {host} does not resolve; check the host name (not retried until the next check)"))
                .after_attempts(asking.tries.attempt + 1));
        }
        let failure = self.unavailable(format!("{method} {path}: {detail}"));
        if self.circuit.is_open() {
            return Err(failure);
        }
        Ok(failure)
    }
}

/// The token a request carried (to tell a stale one from a fresh one on a 401).
type Sent = Option<Arc<Token>>;

/// One request on its way: what is asked, where now, and what its tries have counted.
struct Asking<'a> {
    method: Method,
    /// Where it is asked now (a redirect within the registry moves it).
    url: Url,
    /// The path it is named by in messages.
    path: String,
    call: Call<'a>,
    /// A streamed body: sent once, never retried.
    once: bool,
    tries: Tries,
}

/// What a request's tries have counted so far.
#[derive(Default)]
struct Tries {
    /// Failed attempts (each a retry after backoff, up to `max_attempts`).
    attempt: u32,
    /// HTTP 429s answered.
    throttled: u32,
    /// Whether a 401 has been answered by learning its challenge (once per request).
    reauthorized: bool,
    /// Redirects followed.
    hops: usize,
}

/// Where one answer leaves a request.
enum Answer {
    Done(Response),
    AskAgain,
    /// A failure a retry after backoff may get past.
    Failed(RegistryError),
}

impl Endpoint {
    /// `/v2/PATH` on this registry (PATH may carry a query).
    pub(in crate::registry) fn api_url(&self, method: &Method, path: &str) -> Result<Url, RegistryError> {
        self.base.join(&format!("/v2/{path}")).map_err(|e| self.invalid(format!("{method} {path}: {e}")))
    }

    /// Where a redirect points, counted against `MAX_REDIRECTS`.
    pub(in crate::registry) fn redirect_target(
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
    pub(in crate::registry) async fn fetch_from_storage(
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

    pub(in crate::registry) async fn read_body(
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
