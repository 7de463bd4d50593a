//! Secret values, which of them loading a config resolves, and what it decrypted ([`Resolved`]):
//! kept apart from the shared [`Config`](super::Config), which is plain data.

use std::fmt;

use builder_monitor_core::signing::Signer;

/// A secret value (password, token). It never prints itself.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Which secrets loading a config reads (the variables and files named by `*_env`, `*_file` and
/// `docker_config`): only the commands that use them, so a read command needs none of the daemon's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// All of them; a missing one is an error (`run`, `alert test`, `check`).
    Resolve,
    /// Registry credentials only (`resolve`, `diff`); alert and API secrets are left unresolved.
    Registries,
    /// None: alerts are unsigned with an unresolved URL, the API has no token, registries are
    /// anonymous (`status`, `plan`, `build-spec`, `rbac`).
    Skip,
}

/// What loading a config with [`Secrets::Resolve`] read and decrypted, kept out of the
/// [`Config`](super::Config) every part of the daemon shares: whoever loads it hands each piece to
/// the one part that uses it (the signing key to the signing service).
#[derive(Debug, Default)]
pub struct Resolved {
    /// `[signing]`'s key (its `Debug` shows no key material).
    pub signer: Option<Signer>,
}
