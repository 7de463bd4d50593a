//! `[server]`: the HTTP listener, its token and its connection limits.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::*;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    listen: Option<Spanned<String>>,
    api_token_env: Option<Spanned<String>>,
    public_read: Option<bool>,
    hooks_per_second: Option<Spanned<f64>>,
    header_timeout: Option<Spanned<DurationText>>,
    max_connections: Option<Spanned<i64>>,
    max_connections_per_client: Option<Spanned<i64>>,
}

impl<'a> Validator<'a> {
    pub(super) fn server(&mut self, raw: RawServer) -> Option<ServerSettings> {
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
}
