//! `[signing]`: the key builder-monitor signs with (a file, or a variable holding the PEM as a
//! Kubernetes Secret gives it), the variable holding its password, and what will be signed and
//! trusted. The key is read and decrypted whenever the config's secrets are resolved, so `check`
//! refuses a key `run` could not use; what is decrypted is handed out beside the config
//! ([`Resolved`](super::Resolved)), never kept in it, so no reader of the shared config holds it.

use std::path::PathBuf;

use builder_monitor_core::signing::{KeyError, Signer, Verifier};
use serde::Deserialize;
use toml::Spanned;
use zeroize::Zeroizing;

use super::*;

/// Where the private key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    File(PathBuf),
    /// The variable holding the PEM itself.
    Env(String),
}

#[derive(Debug, Clone)]
pub struct SigningSettings {
    pub key: Option<KeySource>,
    pub password_env: Option<String>,
    /// Parsed, not yet acted on: attest what is signed (in-toto, SLSA provenance).
    pub attest: bool,
    /// Parsed, not yet acted on: sign runner-built digests no trusted key signed.
    pub builds: bool,
    /// The public keys whose signatures an app's digest may carry (besides our own key's).
    pub trusted_keys: Vec<TrustedKey>,
    /// Refuse a rebase, rebuild or deploy whose starting digest no trusted key signed (an
    /// `[[images]]` entry's own `require_signed` overrides it).
    pub require_signed: bool,
    /// Whether the key was read and decrypted when the config was loaded (`run`, `check`): it
    /// signs. The key itself is in the [`Resolved`](super::Resolved) the loading handed out.
    pub key_resolved: bool,
}

/// One `trusted_keys` entry, read.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    pub path: PathBuf,
    pub verifier: Verifier,
}

/// Why the signing key could not be loaded: each names the file or variable and the fix, and
/// none shows the key or the password.
#[derive(Debug, thiserror::Error)]
pub enum SigningKeyError {
    #[error("cannot read the signing key {}: {error}: give a readable key file (key = \"PATH\")", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("environment variable {0} is not set (key_env: the signing key's PEM): set it, or give key = \"PATH\"")]
    KeyEnvUnset(String),
    #[error(
        "environment variable {0} is not set (password_env: the signing key's password): set it to the key's password"
    )]
    PasswordUnset(String),
    #[error("the signing key {origin}: {error}")]
    Key { origin: String, error: KeyError },
}

impl KeySource {
    fn describe(&self) -> String {
        match self {
            KeySource::File(path) => format!("file {}", path.display()),
            KeySource::Env(var) => format!("in variable {var} (key_env)"),
        }
    }
}

impl SigningSettings {
    /// Reads the key from its file or variable and decrypts it with the password's variable.
    /// `None` when `[signing]` names no key (it only trusts others' keys).
    pub fn load_signer(&self) -> Result<Option<Signer>, SigningKeyError> {
        let Some(source) = &self.key else { return Ok(None) };
        let pem = Zeroizing::new(match source {
            KeySource::File(path) => {
                let pem = std::fs::read(path).map_err(|error| SigningKeyError::Read { path: path.clone(), error })?;
                warn_if_shared(path);
                pem
            }
            KeySource::Env(var) => match std::env::var_os(var) {
                Some(value) if !value.is_empty() => value.into_encoded_bytes(),
                _ => return Err(SigningKeyError::KeyEnvUnset(var.clone())),
            },
        });
        let password = match &self.password_env {
            None => None,
            Some(var) => match std::env::var_os(var) {
                // An empty password is one cosign accepts.
                Some(value) => Some(Zeroizing::new(value.into_encoded_bytes())),
                None => return Err(SigningKeyError::PasswordUnset(var.clone())),
            },
        };
        let signer = Signer::from_pem(&pem, password.as_ref().map(|p| p.as_slice()));
        signer.map(Some).map_err(|error| {
            let origin = match (&error, &self.password_env) {
                (KeyError::WrongPassword, Some(var)) => format!("{} (password from {var})", source.describe()),
                _ => source.describe(),
            };
            SigningKeyError::Key { origin, error }
        })
    }
}

/// Warns, once per file and process, when the private key's file is readable by its group or by
/// others: it is still used (a read-only mount may give it such a mode), but whoever else can read
/// it can sign as us.
fn warn_if_shared(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let Ok(metadata) = std::fs::metadata(path) else { return };
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 == 0 {
        return;
    }
    if !WARNED.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_path_buf()) {
        return;
    }
    tracing::warn!(
        path = %path.display(),
        mode = format!("{mode:03o}"),
        "the signing key file is readable by its group or others, who could sign as builder-monitor: chmod 600 it (or 400)"
    );
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSigning {
    key: Option<Spanned<String>>,
    key_env: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
    attest: Option<bool>,
    builds: Option<bool>,
    trusted_keys: Option<Spanned<Vec<Spanned<String>>>>,
    require_signed: Option<Spanned<bool>>,
}

impl<'a> Validator<'a> {
    /// `[[images]] require_signed = true` needs `[signing]` with a key to trust (`signing`: the
    /// table as read, `None` when it had errors of its own).
    pub(super) fn images_need_a_trusted_key(&mut self, signing: Option<&SigningSettings>) {
        if signing.is_some_and(|s| s.key.is_some() || !s.trusted_keys.is_empty()) {
            return;
        }
        for at in std::mem::take(&mut self.signed_images) {
            let (offset, span) = (std::mem::take(&mut self.offset), at..at);
            self.error(span, "require_signed = true trusts no key: list the public keys in [signing] trusted_keys");
            self.offset = offset;
        }
    }

    pub(super) fn signing(&mut self, raw: RawSigning) -> Option<SigningSettings> {
        let errors_before = self.diagnostics.len();
        let key = match (&raw.key, &raw.key_env) {
            (Some(_), Some(env)) => {
                self.error(env.span(), "give key or key_env, not both: the key comes from one place");
                None
            }
            (Some(path), None) if path.get_ref().is_empty() => {
                self.error(path.span(), "key is empty: give the private key file's path (cosign.key)");
                None
            }
            (Some(path), None) => Some(KeySource::File(self.path(path.get_ref()))),
            (None, Some(env)) if env.get_ref().is_empty() => {
                self.error(env.span(), "key_env is empty: name the variable holding the private key's PEM");
                None
            }
            (None, Some(env)) => Some(KeySource::Env(env.get_ref().clone())),
            (None, None) => None,
        };
        if let (Some(password), None, None) = (&raw.password_env, &raw.key, &raw.key_env) {
            self.error(password.span(), "password_env without a key: give key = \"PATH\" or key_env = \"VAR\"");
        }
        let mut trusted_keys = Vec::new();
        for entry in raw.trusted_keys.as_ref().map(|t| t.get_ref().as_slice()).unwrap_or_default() {
            let path = self.path(entry.get_ref());
            let read = std::fs::read(&path).map_err(|e| format!("cannot read it ({e}): give a readable file"));
            match read.and_then(|pem| Verifier::from_pem(&pem).map_err(|e| e.to_string())) {
                Ok(verifier) => trusted_keys.push(TrustedKey { path, verifier }),
                Err(why) => self.error(entry.span(), format!("trusted key {}: {why}", path.display())),
            }
        }
        let require_signed = raw.require_signed.as_ref().is_some_and(|r| *r.get_ref());
        if let Some(flag) =
            raw.require_signed.as_ref().filter(|_| require_signed && key.is_none() && trusted_keys.is_empty())
        {
            self.error(flag.span(), "require_signed = true trusts no key: list the public keys in trusted_keys");
        }
        if self.diagnostics.len() != errors_before {
            return None;
        }
        let mut settings = SigningSettings {
            key,
            password_env: raw.password_env.map(|p| p.into_inner()),
            attest: raw.attest.unwrap_or(true),
            builds: raw.builds.unwrap_or(false),
            trusted_keys,
            require_signed,
            key_resolved: false,
        };
        if self.secrets == Secrets::Resolve {
            match settings.load_signer() {
                Ok(signer) => {
                    settings.key_resolved = signer.is_some();
                    self.resolved.signer = signer;
                }
                Err(error) => {
                    let span = raw.key.as_ref().or(raw.key_env.as_ref()).map(|k| k.span()).unwrap_or_default();
                    self.error(span, error.to_string());
                    return None;
                }
            }
        }
        Some(settings)
    }
}
