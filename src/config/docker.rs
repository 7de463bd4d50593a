//! Docker's `config.json` as a credential source, read when the config loads: `auths` entries
//! (base64 `auth` or username + password), or the credential helper (`credHelpers`, `credsStore`)
//! that keeps them, found on `PATH` now and run by the registry client when it needs credentials.
//! Identity tokens are refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;

use super::Secret;

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
    #[error("{} keeps the credentials for {host} in the credential helper `docker-credential-{helper}`, which is not on PATH; install it (or put its directory on the daemon's PATH), or use username + password_env instead", path.display())]
    HelperMissing { path: PathBuf, host: String, helper: String },
    #[error("{}: the credential helper name {helper:?} for {host} is not a plain name (letters, digits, `.`, `_`, `-`)", path.display())]
    HelperName { path: PathBuf, host: String, helper: String },
    #[error("{} has no `auths` entry for {host}", path.display())]
    NoEntry { path: PathBuf, host: String },
    #[error("{} holds an identity token for {host}, which builder-monitor does not exchange; use username + password_env instead", path.display())]
    IdentityToken { path: PathBuf, host: String },
    #[error("{}: the `auth` entry for {host} is not base64 of username:password", path.display())]
    BadAuth { path: PathBuf, host: String },
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

    /// The credentials for a registry host (`docker.io` style), or why there are none. As Docker
    /// reads them: the host's `credHelpers` entry first, then its `auths` entry, then `credsStore`.
    pub fn credentials_for(&self, host: &str) -> Result<DockerCredentials, DockerConfigError> {
        if let Some(helper) = self.helpers.get(host) {
            return self.helper(host, helper);
        }
        match self.auths_for(host) {
            Err(DockerConfigError::NoEntry { .. }) if self.store.is_some() => {
                self.helper(host, self.store.as_deref().unwrap_or_default())
            }
            Err(DockerConfigError::NoEntry { .. } | DockerConfigError::BadAuth { .. })
                if self.store.is_some() && self.auths.get(host).is_some_and(AuthEntry::is_empty) =>
            {
                // `docker login` with a store leaves an empty `auths` entry behind: the store has it.
                self.helper(host, self.store.as_deref().unwrap_or_default())
            }
            other => other.map(|(username, password)| DockerCredentials::Basic { username, password }),
        }
    }

    /// The helper program `docker-credential-NAME`, found on `PATH`.
    fn helper(&self, host: &str, name: &str) -> Result<DockerCredentials, DockerConfigError> {
        let (path, host, helper) = (self.path.clone(), host.to_string(), name.to_string());
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
            return Err(DockerConfigError::HelperName { path, host, helper });
        }
        let program = format!("docker-credential-{name}");
        let search = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&search).map(|dir| dir.join(&program)).find(|p| is_executable(p));
        match found {
            Some(program) => Ok(DockerCredentials::Helper { program, server: server_url(&host) }),
            None => Err(DockerConfigError::HelperMissing { path, host, helper }),
        }
    }

    /// Username and password from the host's `auths` entry.
    fn auths_for(&self, host: &str) -> Result<(String, Secret), DockerConfigError> {
        let path = self.path.clone();
        let Some(entry) = self.auths.get(host) else {
            return Err(DockerConfigError::NoEntry { path, host: host.into() });
        };
        if entry.identitytoken.is_some() && entry.auth.is_none() && entry.password.is_none() {
            return Err(DockerConfigError::IdentityToken { path, host: host.into() });
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
            _ => Err(DockerConfigError::BadAuth { path, host: host.into() }),
        }
    }
}

/// Where a registry's credentials come from in a Docker config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerCredentials {
    Basic {
        username: String,
        password: Secret,
    },
    /// A credential helper: `program` (an absolute path) answers `get` for `server` on its stdin.
    Helper {
        program: PathBuf,
        server: String,
    },
}

impl AuthEntry {
    fn is_empty(&self) -> bool {
        self.auth.is_none() && self.username.is_none() && self.password.is_none() && self.identitytoken.is_none()
    }
}

/// The server a helper is asked about: Docker Hub by its historical key, others by host.
fn server_url(host: &str) -> String {
    if host == "docker.io" { "https://index.docker.io/v1/".to_string() } else { host.to_string() }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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
    fn docker_config_auths() {
        let dir = std::env::temp_dir().join(format!("bm-dockercfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("me:pa:ss");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{auth}"}},"ghcr.io":{{"username":"u","password":"p"}},"quay.io":{{"identitytoken":"t"}}}},"credHelpers":{{"gcr.io":"bm-absent-helper"}}}}"#
            ),
        )
        .unwrap();
        let c = DockerConfig::load(&path).unwrap();
        let basic = |u: &str, p: &str| DockerCredentials::Basic { username: u.into(), password: Secret::new(p) };
        assert_eq!(c.credentials_for("docker.io").unwrap(), basic("me", "pa:ss"));
        assert_eq!(c.credentials_for("ghcr.io").unwrap(), basic("u", "p"));
        assert!(c.credentials_for("quay.io").unwrap_err().to_string().contains("identity token"));
        let missing = c.credentials_for("gcr.io").unwrap_err().to_string();
        assert!(missing.contains("docker-credential-bm-absent-helper") && missing.contains("not on PATH"), "{missing}");
        assert!(c.credentials_for("example.com").unwrap_err().to_string().contains("no `auths` entry"));
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
}
