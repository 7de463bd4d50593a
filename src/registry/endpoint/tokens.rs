//! Who a registry is told we are: credentials (configured or a helper's), the scheme its first 401
//! asked for, and bearer tokens fetched from its token service and cached per scope.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};

use super::limiter::retry_after;
use super::{Endpoint, describe, is_redirect, origin_of};
use crate::config::{Credentials, Secret};
use crate::registry::{
    Challenge, RegistryError, RequestClass, Token, parse_challenge, parse_token_response, whole_seconds,
};

/// `repository:NAME:pull`, the token scope of reads.
pub(in crate::registry) fn pull_scope(repository: &str) -> String {
    format!("repository:{repository}:pull")
}

/// The scheme a registry asked for, learned from its first 401.
#[derive(Debug, Clone)]
pub(in crate::registry) enum Scheme {
    Unknown,
    Basic,
    Bearer { realm: String, service: Option<String> },
}

/// `Basic base64(user:password)`, as reqwest's `basic_auth` writes it, marked sensitive.
fn basic(user: &str, password: &str) -> HeaderValue {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    sensitive(HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header value"))
}

/// Kept out of debug output (hyper and reqwest print sensitive values as `Sensitive`).
fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

pub(super) struct TokenExpiry;

impl moka::Expiry<String, Arc<Token>> for TokenExpiry {
    fn expire_after_create(&self, _: &String, token: &Arc<Token>, _: std::time::Instant) -> Option<Duration> {
        Some(token.ttl)
    }
}

impl Endpoint {
    /// The username and password sent as basic auth (to the registry, or to its token service):
    /// configured, or a credential helper's answer.
    pub(in crate::registry) async fn credentials(&self) -> Result<Option<(String, Secret)>, RegistryError> {
        match (&self.settings.credentials, &self.helper) {
            (Credentials::Basic { username, password, .. }, _) => Ok(Some((username.clone(), password.clone()))),
            (_, Some(helper)) => helper.credentials().await.map(Some).map_err(|e| self.unauthorized(e.to_string())),
            _ => Ok(None),
        }
    }

    /// Whether this registry has credentials to send.
    pub(in crate::registry) fn has_credentials(&self) -> bool {
        !matches!(self.settings.credentials, Credentials::Anonymous)
    }

    /// The registry (or its token service) refused the credentials sent: a helper's answer is
    /// dropped so the next request asks the helper again. Answers what to tell the user.
    pub(in crate::registry) async fn credentials_refused(&self) -> String {
        match &self.helper {
            Some(helper) => {
                helper.forget().await;
                format!("; the credentials {} gave were refused (it is asked again at the next request)", helper.name())
            }
            None => String::new(),
        }
    }

    /// Adds credentials; returns the bearer token it sent, so a 401 can retire exactly that token.
    pub(in crate::registry) async fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        scope: &str,
        class: RequestClass,
    ) -> Result<(reqwest::RequestBuilder, Option<Arc<Token>>), RegistryError> {
        let (authorization, sent) = self.authorization(scope, class).await?;
        Ok((
            match authorization {
                Some(value) => request.header(AUTHORIZATION, value),
                None => request,
            },
            sent,
        ))
    }

    /// The `Authorization` header a request gets (marked sensitive), and the bearer token it
    /// carries, so a 401 can retire exactly that token.
    pub(in crate::registry) async fn authorization(
        &self,
        scope: &str,
        class: RequestClass,
    ) -> Result<(Option<HeaderValue>, Option<Arc<Token>>), RegistryError> {
        let scheme = self.scheme.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match scheme {
            Scheme::Unknown => Ok((None, None)),
            Scheme::Basic => {
                Ok((Box::pin(self.credentials()).await?.map(|(user, password)| basic(&user, password.expose())), None))
            }
            Scheme::Bearer { realm, service } => {
                // A cached token first: the fetch's future, which `try_get_with` holds inline, is
                // built (boxed) only on a miss, and a hit allocates no key.
                let token = match self.tokens.get(scope).await {
                    Some(token) => token,
                    None => self
                        .tokens
                        .try_get_with(
                            scope.to_string(),
                            Box::pin(self.fetch_token(&realm, service.as_deref(), scope, class)),
                        )
                        .await
                        .map_err(|e: Arc<RegistryError>| (*e).clone())?,
                };
                let value = HeaderValue::from_str(&format!("Bearer {}", token.value.expose()))
                    .map_err(|_| self.invalid("the token service's token is not a valid HTTP header value".into()))?;
                Ok((Some(sensitive(value)), Some(token)))
            }
        }
    }

    pub(in crate::registry) async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        class: RequestClass,
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
            self.wait_turn(false, class).await?;
            let mut request = self.http.get(url.clone());
            if let Some((user, password)) = self.credentials().await? {
                request = request.header(AUTHORIZATION, basic(&user, password.expose()));
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
    pub(in crate::registry) async fn learn_challenge(
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
}
