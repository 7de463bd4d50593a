//! `[signing] builds`: a digest a runner built and pushed (a command, a Job, a kpack Build) is
//! signed and attested by our key (with what its move fixes, as OpenVEX, when it claims a fix)
//! unless it already carries a valid signature by a trusted key (kpack signs its own builds with
//! the service account's cosign keys: never twice). The builder
//! moved the tag itself, so this comes after it, and only while the tag still holds what it
//! left; a failure is final, never a second build.

use super::*;
use crate::signing::{Already, EnsureError, Signed, ToSign, openvex, provenance};
use builder_monitor_core::signing::{Descriptor, Provenance};

impl Context {
    /// Signs what `action` pushed (`digest`, under `target.image`) when `[signing] builds` asks for
    /// it, with our key's id: `Ok(None)` when not asked or a trusted key signed it already; `Err`
    /// says why it could not be signed.
    pub(super) async fn sign_build(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        digest: &str,
    ) -> Result<Option<(Signed, String)>, String> {
        let Some(signing) = self.signing.as_ref().filter(|s| s.settings().builds) else { return Ok(None) };
        let Some(key_id) = signing.key_id() else { return Ok(None) };
        let image = ImageRef::parse(&target.image).map_err(|e| e.to_string())?;
        let provenance = || Provenance {
            run_image: target.run_image.clone(),
            builder: Some(target.builder.clone()),
            change: Some(action.change_id.clone()),
            action: Some(action.key.clone()),
            openvex: target.vex.as_ref().and_then(|facts| openvex(facts, &image, digest, action.created)),
            ..provenance(action.kind.as_str(), &image)
        };
        let subject = || self.unmoved_build(&image, target, digest);
        let to = ToSign { image: &image, digest, already: Already::Trusted, created: action.created };
        let signed = signing.ensure_signed(&self.registry, to, provenance, subject).await;
        match signed {
            Ok(signed) => Ok(signed.map(|s| (s, key_id.to_string()))),
            Err(EnsureError::Precondition(why)) => Err(why),
            Err(err) => Err(err.to_string()),
        }
    }

    /// The descriptor of the manifest the build left (`digest`), once the tag is checked to still
    /// hold it, last before signing: a digest someone else pushed over the build is not ours to sign.
    async fn unmoved_build(&self, image: &ImageRef, target: &ActionTarget, digest: &str) -> Result<Descriptor, String> {
        let manifest = self.registry.get_manifest(image, digest).await.map_err(|e| e.to_string())?;
        let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
        let now = self.registry.head_manifest(image).await.map_err(|e| format!("cannot read the tag: {e}"))?;
        if now.digest != digest {
            return Err(format!(
                "{} moved from {digest} (what the build left) to {} before it was signed: neither was signed",
                target.image, now.digest
            ));
        }
        Ok(subject)
    }
}
