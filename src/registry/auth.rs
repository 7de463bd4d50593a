//! Registry authentication pieces: `WWW-Authenticate` challenges and bearer token responses.
//! (Docker `config.json` credentials are read with the config, in `config::docker`.)

use std::collections::BTreeMap;
use std::time::Duration;

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

/// Why a token response is refused. Names fields and shapes, never values: a token response is a
/// secret (so a JSON syntax error is reduced to its position and category).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenResponseError {
    #[error("token response is not valid JSON (line {line} column {column}, {category:?} error)")]
    NotJson { line: usize, column: usize, category: serde_json::error::Category },
    #[error("token response is not a JSON object")]
    NotObject,
    #[error("token response field `{0}` is not a string")]
    NotString(&'static str),
    #[error("token response has neither `token` nor `access_token`")]
    NoToken,
    #[error("token response field `expires_in` is not a whole number")]
    BadExpiry,
}

/// Tokens without `expires_in` live 60 s (distribution spec). We stop using a token a little before it
/// expires, so a check never races its expiry.
pub fn parse_token_response(body: &[u8]) -> Result<Token, TokenResponseError> {
    let parsed: serde_json::Value = serde_json::from_slice(body).map_err(|e| TokenResponseError::NotJson {
        line: e.line(),
        column: e.column(),
        category: e.classify(),
    })?;
    let serde_json::Value::Object(fields) = parsed else {
        return Err(TokenResponseError::NotObject);
    };
    let text = |name: &'static str| -> Result<Option<String>, TokenResponseError> {
        match fields.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone()).filter(|s| !s.is_empty())),
            Some(_) => Err(TokenResponseError::NotString(name)),
        }
    };
    let value = match text("token")? {
        Some(token) => token,
        None => text("access_token")?.ok_or(TokenResponseError::NoToken)?,
    };
    let expires_in = match fields.get("expires_in") {
        None | Some(serde_json::Value::Null) => 60,
        Some(n) => n.as_u64().ok_or(TokenResponseError::BadExpiry)?,
    };
    let lifetime = Duration::from_secs(expires_in.clamp(1, 24 * 3600));
    let margin = (lifetime / 10).clamp(Duration::from_millis(500), Duration::from_secs(30));
    Ok(Token { value: Secret::new(value), ttl: lifetime.saturating_sub(margin).max(Duration::from_millis(500)) })
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
    fn token_response_errors_never_quote_values() {
        for body in [
            r#"{"token":{"t":"tok-SECRET"}}"#,
            r#"{"access_token":["tok-SECRET"]}"#,
            r#"{"token":"tok-SECRET","expires_in":"tok-SECRET"}"#,
            r#"["tok-SECRET"]"#,
            r#"{"token":"tok-SECRET"#,
        ] {
            let message = parse_token_response(body.as_bytes()).unwrap_err().to_string();
            assert!(!message.contains("SECRET"), "{message:?}");
        }
    }
}
