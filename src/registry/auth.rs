//! Registry authentication pieces: `WWW-Authenticate` challenges, token responses and the
//! `auths` of a Docker `config.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;

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

/// Tokens without `expires_in` live 60 s (distribution spec). We stop using a token a little before it
/// expires, so a check never races its expiry. Errors name fields and shapes, never values: a token
/// response is a secret.
pub fn parse_token_response(body: &[u8]) -> Result<Token, String> {
    let parsed: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!("token response is not valid JSON (line {} column {}, {:?} error)", e.line(), e.column(), e.classify())
    })?;
    let serde_json::Value::Object(fields) = parsed else {
        return Err("token response is not a JSON object".to_string());
    };
    let text = |name: &str| -> Result<Option<String>, String> {
        match fields.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone()).filter(|s| !s.is_empty())),
            Some(_) => Err(format!("token response field `{name}` is not a string")),
        }
    };
    let value = match text("token")? {
        Some(token) => token,
        None => {
            text("access_token")?.ok_or_else(|| "token response has neither `token` nor `access_token`".to_string())?
        }
    };
    let expires_in = match fields.get("expires_in") {
        None | Some(serde_json::Value::Null) => 60,
        Some(n) => n.as_u64().ok_or_else(|| "token response field `expires_in` is not a whole number".to_string())?,
    };
    let lifetime = Duration::from_secs(expires_in.clamp(1, 24 * 3600));
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

#[derive(Debug, Clone, Default)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// Never carries a value from the file: it holds credentials.
    #[error("{} is not a valid Docker config.json: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

/// The JSON type of a value, for shape errors that must not quote the value.
fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// `auths."ghcr.io"` style paths; keys are registry names, not secrets.
fn json_path(parent: &str, key: &str) -> String {
    if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!("{parent}.{key}")
    } else {
        format!("{parent}.{key:?}")
    }
}

fn shape_error(path: &str, expected: &str, found: &serde_json::Value) -> String {
    format!("`{path}` must be {expected}, not {}", json_type(found))
}

impl DockerConfig {
    pub fn load(path: &Path) -> Result<Self, DockerConfigError> {
        let bytes =
            std::fs::read(path).map_err(|source| DockerConfigError::Read { path: path.to_path_buf(), source })?;
        let invalid = |message: String| DockerConfigError::Invalid { path: path.to_path_buf(), message };
        // serde's type errors quote the offending value (base64 of user:password in a bare-string
        // `auths` entry): the file is read as untyped JSON and its shape checked here, by path.
        let root: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            invalid(format!("JSON syntax error at line {} column {} ({:?})", e.line(), e.column(), e.classify()))
        })?;
        let serde_json::Value::Object(mut root) = root else {
            return Err(invalid(shape_error("$", "an object", &root)));
        };
        let mut auths = BTreeMap::new();
        match root.remove("auths") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(entries)) => {
                for (key, entry) in entries {
                    let entry_path = json_path("auths", &key);
                    let serde_json::Value::Object(fields) = &entry else {
                        return Err(invalid(shape_error(
                            &entry_path,
                            "an object with `auth` (base64 of username:password) or `username` and `password`",
                            &entry,
                        )));
                    };
                    let field = |name: &str| -> Result<Option<String>, DockerConfigError> {
                        match fields.get(name) {
                            None | Some(serde_json::Value::Null) => Ok(None),
                            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
                            Some(other) => Err(invalid(shape_error(&json_path(&entry_path, name), "a string", other))),
                        }
                    };
                    let parsed = AuthEntry {
                        auth: field("auth")?,
                        username: field("username")?,
                        password: field("password")?,
                        identitytoken: field("identitytoken")?,
                    };
                    auths.insert(auth_key_host(&key), parsed);
                }
            }
            Some(other) => return Err(invalid(shape_error("auths", "an object keyed by registry", &other))),
        }
        let mut helpers = BTreeMap::new();
        match root.remove("credHelpers") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(entries)) => {
                for (key, helper) in entries {
                    match helper {
                        serde_json::Value::String(name) => {
                            helpers.insert(auth_key_host(&key), name);
                        }
                        other => {
                            return Err(invalid(shape_error(&json_path("credHelpers", &key), "a string", &other)));
                        }
                    }
                }
            }
            Some(other) => return Err(invalid(shape_error("credHelpers", "an object keyed by registry", &other))),
        }
        let store = match root.remove("credsStore") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(name)) => Some(name),
            Some(other) => return Err(invalid(shape_error("credsStore", "a string", &other))),
        };
        Ok(Self { path: path.to_path_buf(), auths, helpers, store })
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

    #[test]
    fn docker_config_errors_name_the_path_and_shape_never_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let secret = "Y2ZnLXVzZXI6Y2ZnLXBhc3N3b3Jk";
        let cases = [
            (format!(r#"{{"auths":{{"ghcr.io":"{secret}"}}}}"#), "`auths.\"ghcr.io\"` must be an object"),
            (
                format!(r#"{{"auths":{{"ghcr.io":{{"auth":["{secret}"]}}}}}}"#),
                "`auths.\"ghcr.io\".auth` must be a string",
            ),
            (
                format!(r#"{{"auths":{{"x":{{"password":{{"p":"{secret}"}}}}}}}}"#),
                "`auths.x.password` must be a string",
            ),
            (format!(r#"{{"auths":["{secret}"]}}"#), "`auths` must be an object"),
            (format!(r#"{{"credsStore":["{secret}"]}}"#), "`credsStore` must be a string"),
            (format!(r#"{{"credHelpers":{{"a":5,"b":"{secret}"}}}}"#), "`credHelpers.a` must be a string"),
            (format!(r#"["{secret}"]"#), "`$` must be an object"),
            (format!(r#"{{"auths":{{"x":{{"auth":"{secret}}}}}}}"#), "JSON syntax error at line 1"),
        ];
        for (text, want) in cases {
            std::fs::write(&path, &text).unwrap();
            let message = DockerConfig::load(&path).unwrap_err().to_string();
            assert!(message.contains(want), "{message:?} lacks {want:?}");
            assert!(!message.contains(secret) && !message.contains("Y2Zn"), "{message:?} quotes the value");
        }
    }

    #[test]
    fn token_response_errors_never_quote_values() {
        for body in [
            r#"{"token":{"t":"tok-SECRET"}}"#,
            r#"{"access_token":["tok-SECRET"]}"#,
            r#"{"token":"tok-SECRET","expires_in":"tok-SECRET"}"#,
            r#"["tok-SECRET"]"#,
            r#"{"token":"tok-SECRET"#,
        ] {
            let message = parse_token_response(body.as_bytes()).unwrap_err();
            assert!(!message.contains("SECRET"), "{message:?}");
        }
    }
}
