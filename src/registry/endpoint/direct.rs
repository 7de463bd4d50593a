//! The check's manifest `HEAD` on hyper-util's pooled client instead of reqwest (issue 44, goal 3):
//! reqwest parses the URL again and runs its redirect layer on every request, about 40 k
//! instructions of the check's ~97 k (docs/performance.md). Only the plain case takes this path:
//! a `HEAD` of a manifest with no body, to the registry's own URL, with no proxy configured for it;
//! anything else (a redirect answer's next hop, a proxy, every other request) stays on reqwest.
//! Both clients share one TLS configuration, so they trust the same roots.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::ResponseBuilderExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderValue, USER_AGENT};
use reqwest::{Response, Url};

use crate::registry::{MANIFEST_ACCEPT, USER_AGENT as AGENT};

/// Idle connections kept per host: as many as checks run at once (monitor::CHECK_CONCURRENCY).
pub(super) const MAX_IDLE_PER_HOST: usize = 16;
/// How long an idle connection is kept.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The rustls configuration both clients use, built as reqwest builds its own: the installed
/// crypto provider (ring), TLS 1.2 and 1.3, the platform's roots plus `ca_file`'s. No ALPN: each
/// client offers HTTP/2 and HTTP/1.1 itself (hyper-rustls refuses a configuration that has them).
pub(super) fn tls_config(ca_pem: Option<&[u8]>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    crate::install_crypto_provider();
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    let verifier = match ca_pem {
        Some(pem) => {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("ca_file is not a valid PEM bundle: {e}"))?;
            rustls_platform_verifier::Verifier::new_with_extra_roots(certs, provider.clone())
        }
        None => rustls_platform_verifier::Verifier::new(provider.clone()),
    }
    .map_err(|e| format!("cannot load the TLS roots: {e}"))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth())
}

/// Why a direct `HEAD` got no answer.
#[derive(Debug)]
pub(in crate::registry) enum DirectError {
    TimedOut,
    Failed(hyper_util::client::legacy::Error),
}

/// The pooled hyper client for one registry's manifest `HEAD`s.
pub(in crate::registry) struct Direct {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    timeout: Duration,
    /// `Accept` and `User-Agent`, validated once: a header value built from a string checks each
    /// byte, ~3 k instructions per request for these two.
    accept: HeaderValue,
    agent: HeaderValue,
    /// `HEAD`s sent this way, for tests and the benchmark (`Registry::direct_heads`).
    sent: AtomicU64,
}

impl Direct {
    /// A client for `base`, or `None` when reqwest would send its requests through a proxy
    /// (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` less `NO_PROXY`, read by the same matcher reqwest uses).
    pub(super) fn new(base: &Url, tls: rustls::ClientConfig, timeout: Duration) -> Option<Self> {
        Self::unless_proxied(base, tls, timeout, &Matcher::from_system())
    }

    fn unless_proxied(base: &Url, tls: rustls::ClientConfig, timeout: Duration, proxies: &Matcher) -> Option<Self> {
        let uri: hyper::Uri = base.as_str().parse().ok()?;
        if proxies.intercept(&uri).is_some() {
            return None;
        }
        // reqwest's connector settings (its defaults and the registry client's).
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout.min(Duration::from_secs(10))));
        http.set_keepalive(Some(Duration::from_secs(15)));
        http.set_keepalive_interval(Some(Duration::from_secs(15)));
        http.set_keepalive_retries(Some(3));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(https);
        Some(Self {
            client,
            timeout,
            accept: HeaderValue::from_static(MANIFEST_ACCEPT),
            agent: HeaderValue::from_static(AGENT),
            sent: AtomicU64::new(0),
        })
    }

    /// How many `HEAD`s were sent this way.
    pub(in crate::registry) fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// One `HEAD` of `url` (as `uri`) with the headers reqwest would send, within the registry's
    /// `timeout`; the answer as a reqwest `Response` (no body, its URL set) so the caller judges it
    /// as any other.
    pub(super) async fn head(
        &self,
        url: &Url,
        uri: hyper::Uri,
        authorization: Option<HeaderValue>,
    ) -> Result<Response, DirectError> {
        let mut request = hyper::Request::new(Empty::new());
        *request.method_mut() = hyper::Method::HEAD;
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.insert(ACCEPT, self.accept.clone());
        headers.insert(USER_AGENT, self.agent.clone());
        if let Some(authorization) = authorization {
            headers.insert(AUTHORIZATION, authorization);
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        let answer = tokio::time::timeout(self.timeout, self.client.request(request))
            .await
            .map_err(|_| DirectError::TimedOut)?
            .map_err(DirectError::Failed)?;
        // A HEAD answer has no body: the connection is back in the pool once it is dropped.
        let (parts, _) = answer.into_parts();
        let mut response = hyper::http::Response::builder()
            .status(parts.status)
            .version(parts.version)
            .url(url.clone())
            .body(reqwest::Body::from(Bytes::new()))
            .expect("a status and version from a parsed answer are valid");
        *response.headers_mut() = parts.headers;
        Ok(Response::from(response))
    }
}

impl DirectError {
    /// What went wrong, worded as `describe` words reqwest's errors.
    pub(in crate::registry) fn describe(&self) -> String {
        match self {
            DirectError::TimedOut => "timed out".to_string(),
            DirectError::Failed(e) => super::describe_chain(false, e.is_connect(), e),
        }
    }

    pub(in crate::registry) fn as_error(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DirectError::TimedOut => None,
            DirectError::Failed(e) => Some(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(base: &str, proxies: Matcher) -> Option<Direct> {
        let tls = tls_config(None).unwrap();
        Direct::unless_proxied(&Url::parse(base).unwrap(), tls, Duration::from_secs(5), &proxies)
    }

    #[tokio::test]
    async fn a_registry_behind_a_proxy_stays_on_reqwest() {
        // Nothing is sent: only whether the client is built.
        let proxied = || Matcher::builder().http("http://127.0.0.1:9").https("http://127.0.0.1:9");
        assert!(direct("http://127.0.0.1:5000", proxied().build()).is_none());
        assert!(direct("https://registry.test", proxied().build()).is_none());
        assert!(direct("https://registry.test", proxied().no("registry.test").build()).is_some(), "NO_PROXY");
        assert!(direct("https://registry.test", Matcher::builder().build()).is_some());
    }

    #[test]
    fn a_ca_file_that_is_not_pem_names_the_setting() {
        let err = tls_config(Some(b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"))
            .expect_err("not a certificate");
        assert!(err.contains("ca_file is not a valid PEM bundle"), "{err}");
    }
}
