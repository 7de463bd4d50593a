//! Registry authentication pieces: `WWW-Authenticate` challenges, token responses and the
//! `auths` of a Docker `config.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use crate::config::Secret;

/// How a registry asked us to authenticate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer { realm: String, service: Option<String> },
}

/// Parses a `WWW-Authenticate` header value (`Bearer realm="…",service="…",scope="…"` or `Basic realm="…"`).
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(char::is_whitespace).unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let params = parse_params(rest);
    let realm = params.get("realm")?.clone();
    if realm.is_empty() {
        return None;
    }
    Some(Challenge::Bearer { realm, service: params.get("service").cloned() })
}

/// `key="value", key2=value2`: quoted values may contain commas.
fn parse_params(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect::<String>().trim().to_ascii_lowercase();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(escaped) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        out.insert(key, value);
    }
    out
}

/// A bearer token and how long it may be reused.
#[derive(Debug, Clone)]
pub struct Token {
    pub value: Secret,
    pub ttl: Duration,
}

#[derive(Deserialize)]
struct TokenResponse {
    token: Option<String>,
    access_token: Option<String>,
    expires_in: Option<u64>,
}

/// Tokens without `expires_in` live 60 s (distribution spec). We stop using a token a little before it
/// expires, so a check never races its expiry.
pub fn parse_token_response(body: &[u8]) -> Result<Token, String> {
    let parsed: TokenResponse =
        serde_json::from_slice(body).map_err(|e| format!("token response is not valid JSON: {e}"))?;
    let value = parsed
        .token
        .filter(|t| !t.is_empty())
        .or(parsed.access_token.filter(|t| !t.is_empty()))
        .ok_or_else(|| "token response has neither `token` nor `access_token`".to_string())?;
    let lifetime = Duration::from_secs(parsed.expires_in.unwrap_or(60).clamp(1, 24 * 3600));
    let margin = (lifetime / 10).clamp(Duration::from_millis(500), Duration::from_secs(30));
    Ok(Token { value: Secret::new(value), ttl: lifetime.saturating_sub(margin).max(Duration::from_millis(500)) })
}

/// The credentials part of a Docker `config.json`.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    path: PathBuf,
    auths: BTreeMap<String, AuthEntry>,
    helpers: BTreeMap<String, String>,
    store: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Default)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

#[derive(Deserialize)]
struct DockerConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{} is not a valid Docker config.json: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl DockerConfig {
    pub fn load(path: &Path) -> Result<Self, DockerConfigError> {
        let bytes =
            std::fs::read(path).map_err(|source| DockerConfigError::Read { path: path.to_path_buf(), source })?;
        // serde_json's message names line/column, never the secret values.
        let file: DockerConfigFile = serde_json::from_slice(&bytes)
            .map_err(|e| DockerConfigError::Invalid { path: path.to_path_buf(), message: e.to_string() })?;
        let auths = file.auths.into_iter().map(|(k, v)| (auth_key_host(&k), v)).collect();
        let helpers = file.cred_helpers.into_iter().map(|(k, v)| (auth_key_host(&k), v)).collect();
        Ok(Self { path: path.to_path_buf(), auths, helpers, store: file.creds_store })
    }

    /// Username and password for a registry host (`docker.io` style), or why there are none.
    pub fn credentials_for(&self, host: &str) -> Result<(String, Secret), String> {
        let path = self.path.display();
        let Some(entry) = self.auths.get(host) else {
            if let Some(helper) = self.helpers.get(host).or(self.store.as_ref()) {
                return Err(format!(
                    "{path} keeps the credentials for {host} in the credential helper `docker-credential-{helper}`, which builder-monitor does not run; use username + password_env instead"
                ));
            }
            return Err(format!("{path} has no `auths` entry for {host}"));
        };
        if entry.identitytoken.is_some() && entry.auth.is_none() && entry.password.is_none() {
            return Err(format!(
                "{path} holds an identity token for {host}, which builder-monitor does not exchange; use username + password_env instead"
            ));
        }
        if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
            return Ok((u.clone(), Secret::new(p.clone())));
        }
        let encoded = entry.auth.as_deref().unwrap_or_default();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        match decoded.as_deref().and_then(|d| d.split_once(':')) {
            Some((u, p)) if !u.is_empty() => Ok((u.to_string(), Secret::new(p))),
            _ => Err(format!("{path}: the `auth` entry for {host} is not base64 of username:password")),
        }
    }
}

/// `https://index.docker.io/v1/` → `docker.io`; `ghcr.io` → `ghcr.io`.
fn auth_key_host(key: &str) -> String {
    let host = key.trim_start_matches("https://").trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io".to_string(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/ubuntu:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into())
            })
        );
        assert_eq!(
            parse_challenge(r#"bearer realm="http://127.0.0.1:5004/token", scope="repository:a/b:pull,push""#),
            Some(Challenge::Bearer { realm: "http://127.0.0.1:5004/token".into(), service: None })
        );
        assert_eq!(parse_challenge(r#"Basic realm="test-realm""#), Some(Challenge::Basic));
        assert_eq!(parse_challenge("Bearer service=x"), None);
        assert_eq!(parse_challenge("Negotiate"), None);
        assert_eq!(parse_challenge(""), None);
    }

    #[test]
    fn token_responses() {
        let t = parse_token_response(br#"{"token":"abc","expires_in":300}"#).unwrap();
        assert_eq!(t.value.expose(), "abc");
        assert_eq!(t.ttl, Duration::from_secs(270));
        let t = parse_token_response(br#"{"access_token":"xyz"}"#).unwrap();
        assert_eq!(t.value.expose(), "xyz");
        assert_eq!(t.ttl, Duration::from_secs(54));
        assert!(parse_token_response(b"{}").is_err());
        assert!(parse_token_response(b"<html>").is_err());
    }

    #[test]
    fn docker_config_auths() {
        let dir = std::env::temp_dir().join(format!("bm-dockercfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("me:pa:ss");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},"ghcr.io":{{"username":"u","password":"p"}},"quay.io":{{"identitytoken":"t"}}}},"credHelpers":{{"gcr.io":"gcloud"}}}}"#
            ),
        )
        .unwrap();
        let c = DockerConfig::load(&path).unwrap();
        let (u, p) = c.credentials_for("docker.io").unwrap();
        assert_eq!((u.as_str(), p.expose()), ("me", "pa:ss"));
        assert_eq!(c.credentials_for("ghcr.io").unwrap().0, "u");
        assert!(c.credentials_for("quay.io").unwrap_err().contains("identity token"));
        assert!(c.credentials_for("gcr.io").unwrap_err().contains("docker-credential-gcloud"));
        assert!(c.credentials_for("example.com").unwrap_err().contains("no `auths` entry"));
        std::fs::write(&path, "{not json").unwrap();
        assert!(DockerConfig::load(&path).unwrap_err().to_string().contains("not a valid Docker config.json"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
