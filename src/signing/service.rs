//! The signing service: `[signing]` with its key read and decrypted, built once by whoever loaded
//! the config (the daemon, or the command that signs) and handed only to the code that signs or
//! checks signatures (the runner, rollbacks, the server). The key never lives in the shared
//! `Config`, and nothing here prints it. [`SigningService::ensure_signed`] is the one
//! verify → provenance → sign sequence every path that signs an existing digest goes through
//! (a rebase signs the digests it writes by `rebase::SignPlan::of`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{Descriptor, Provenance, Signer, Verifier};
use chrono::{DateTime, Utc};

use super::{SignError, Signed, TrustedKey, Verdict, sign_keeping, trusted, verify};
use crate::config::{Config, SigningKeyError, SigningSettings};
use crate::registry::{Registry, RegistryError};

/// `[signing]` resolved: its settings, its key (when it names one) and the keys it trusts.
pub struct SigningService {
    settings: SigningSettings,
    signer: Option<Signer>,
    /// `trusted_keys`, then our own key.
    trusted: Vec<TrustedKey>,
}

impl fmt::Debug for SigningService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningService")
            .field("key_id", &self.key_id())
            .field("attest", &self.settings.attest)
            .field("trusted", &self.trusted.iter().map(|k| k.name.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

/// Whose signature makes a digest signed already, so [`SigningService::ensure_signed`] writes none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Already {
    /// Any trusted key's (a build: kpack signs its own with the service account's keys).
    Trusted,
    /// Only our own key's (a rollback's target: admission policies check ours).
    Own,
}

/// What [`SigningService::ensure_signed`] signs: `digest` of `image`'s repository, signed already
/// when a key `already` names signed it; what it writes is dated `created`.
#[derive(Debug, Clone, Copy)]
pub struct ToSign<'a> {
    pub image: &'a ImageRef,
    pub digest: &'a str,
    pub already: Already,
    pub created: DateTime<Utc>,
}

/// Why [`SigningService::ensure_signed`] signed nothing.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// The digest's signatures could not be read (worth another try).
    #[error("cannot read {digest}'s signatures: {source}")]
    Verify { digest: String, source: RegistryError },
    /// What must hold before signing does not (the caller says why).
    #[error("{0}")]
    Precondition(String),
    #[error(transparent)]
    Sign(#[from] SignError),
}

impl SigningService {
    pub fn new(settings: SigningSettings, signer: Option<Signer>) -> Self {
        let trusted = trusted(&settings, signer.as_ref());
        SigningService { settings, signer, trusted }
    }

    /// The service for `config`'s `[signing]`, with the key its loading decrypted (`signer`);
    /// `None` without `[signing]`.
    pub fn of(config: &Config, signer: Option<Signer>) -> Option<Arc<Self>> {
        config.signing.as_ref().map(|settings| Arc::new(Self::new(settings.clone(), signer)))
    }

    /// For a command that signs without the daemon's other secrets: `[signing]`'s key read and
    /// decrypted now.
    pub fn load(settings: &SigningSettings) -> Result<Self, SigningKeyError> {
        Ok(Self::new(settings.clone(), settings.load_signer()?))
    }

    pub fn settings(&self) -> &SigningSettings {
        &self.settings
    }

    /// The key we sign with, when `[signing]` names one.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_ref()
    }

    /// Our key's id (sha256 of its public key, hex), when there is a key.
    pub fn key_id(&self) -> Option<&str> {
        self.signer.as_ref().map(Signer::key_id)
    }

    /// The keys a digest's signature is checked against: `trusted_keys`, then our own.
    pub fn trusted(&self) -> &[TrustedKey] {
        &self.trusted
    }

    /// The keys whose layers a replaced `.sig` or `.att` keeps.
    pub fn keep(&self) -> Vec<Verifier> {
        self.trusted.iter().map(|k| k.verifier.clone()).collect()
    }

    /// Signs `to`'s digest with our key unless a key `to.already` names signed it: reads its
    /// signatures, then `subject` (the manifest's descriptor, after whatever must still hold is
    /// checked: `Err` signs nothing), then signs it, attesting `provenance` when `[signing]
    /// attest`. `Ok(None)`: no key, or signed already.
    pub async fn ensure_signed<S>(
        &self,
        registry: &Registry,
        to: ToSign<'_>,
        provenance: impl FnOnce() -> Provenance,
        subject: impl FnOnce() -> S,
    ) -> Result<Option<Signed>, EnsureError>
    where
        S: Future<Output = Result<Descriptor, String>>,
    {
        let ToSign { image, digest, already, created } = to;
        let Some(signer) = &self.signer else { return Ok(None) };
        let own;
        let keys = match already {
            Already::Trusted => self.trusted.as_slice(),
            Already::Own => {
                own = [TrustedKey::own(signer)];
                own.as_slice()
            }
        };
        let verdict = verify(registry, image, digest, keys).await;
        match verdict.map_err(|source| EnsureError::Verify { digest: digest.to_string(), source })? {
            Verdict::Signed { key, .. } => {
                tracing::info!(digest, key, "signed by a trusted key already");
                return Ok(None);
            }
            Verdict::Unsigned | Verdict::Invalid { .. } => {}
        }
        let provenance = self.settings.attest.then(provenance);
        let subject = subject().await.map_err(EnsureError::Precondition)?;
        let keep = self.keep();
        Ok(Some(sign_keeping(registry, image, &subject, signer, &keep, provenance.as_ref(), created).await?))
    }
}

#[cfg(test)]
mod tests {
    use p256::pkcs8::{EncodePrivateKey, LineEnding};

    use super::*;
    use crate::config::Secrets;

    /// The key a config's loading decrypts comes out beside the config, never in it, and no
    /// `Debug` of the config, of what was resolved or of the service shows the key.
    #[test]
    fn the_key_is_handed_out_beside_the_config_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let pem = p256::SecretKey::from_slice(&[7u8; 32]).unwrap().to_pkcs8_pem(LineEnding::LF).unwrap();
        std::fs::write(dir.path().join("cosign.key"), pem.as_bytes()).unwrap();
        let text = "[[builders]]\nname = \"b\"\nimage = \"a.io/b\"\n[signing]\nkey = \"cosign.key\"\n";
        let path = dir.path().join("c.toml");
        let (config, resolved) = Config::parse_resolving(&path, text, Secrets::Resolve, None).unwrap();
        assert!(config.signing.as_ref().unwrap().key_resolved);
        let key_id = resolved.signer.as_ref().map(|s| s.key_id().to_string());
        assert!(key_id.is_some());
        let resolved_debug = format!("{resolved:?}");
        let service = SigningService::of(&config, resolved.signer).unwrap();
        assert_eq!(service.key_id().map(str::to_string), key_id);
        assert_eq!(service.trusted().len(), 1, "our own key is trusted");
        let body: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        for shown in [format!("{config:?}"), resolved_debug, format!("{service:?}")] {
            assert!(body.iter().all(|line| !shown.contains(line)), "{shown}");
        }

        // A command that resolves no secret decrypts nothing.
        let (config, resolved) = Config::parse_resolving(&path, text, Secrets::Skip, None).unwrap();
        assert!(resolved.signer.is_none());
        assert!(!config.signing.unwrap().key_resolved);
    }
}
