//! `[signing] builds`: a digest a runner built and pushed (a command, a Job, a kpack Build) is
//! signed and attested by our key (with what its move fixes, as OpenVEX, when it claims a fix)
//! unless it already carries a valid signature by a trusted key (kpack signs its own builds with
//! the service account's cosign keys: never twice). The builder
//! moved the tag itself, so this comes after it, and only while the tag still holds what it
//! left; a failure is final, never a second build.

use super::*;
use crate::signing::{Signed, Verdict, openvex, provenance, sign_keeping, trusted, verify};
use builder_monitor_core::signing::{Descriptor, Provenance};

impl Runner {
    /// Signs what `action` pushed (`digest`, under `target.image`) when `[signing] builds` asks for
    /// it, with our key's id: `Ok(None)` when not asked or a trusted key signed it already; `Err` says why it could
    /// not be signed.
    pub(super) async fn sign_build(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        digest: &str,
    ) -> Result<Option<(Signed, String)>, String> {
        let Some(settings) = self.config.signing.as_ref().filter(|s| s.builds) else { return Ok(None) };
        let Some(signer) = &settings.signer else { return Ok(None) };
        let image = ImageRef::parse(&target.image).map_err(|e| e.to_string())?;
        let trusted = trusted(settings);
        match verify(&self.registry, &image, digest, &trusted).await {
            Ok(Verdict::Signed { key, .. }) => {
                tracing::info!(action = %action.key, digest, key, "the build is signed by a trusted key already");
                return Ok(None);
            }
            Ok(_) => {}
            Err(err) => return Err(format!("cannot read {digest}'s signatures: {err}")),
        }
        let provenance = settings.attest.then(|| Provenance {
            run_image: target.run_image.clone(),
            builder: Some(target.builder.clone()),
            change: Some(action.change_id.clone()),
            action: Some(action.key.clone()),
            openvex: target.vex.as_ref().and_then(|facts| openvex(facts, &image, digest, action.created)),
            ..provenance(action.kind.as_str(), &image)
        });
        let manifest = self.registry.get_manifest(&image, digest).await.map_err(|e| e.to_string())?;
        let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
        // The tag last before signing: a digest someone else pushed over the build is not ours
        // to sign.
        let now = self.registry.head_manifest(&image).await.map_err(|e| format!("cannot read the tag: {e}"))?;
        if now.digest != digest {
            return Err(format!(
                "{} moved from {digest} (what the build left) to {} before it was signed: neither was signed",
                target.image, now.digest
            ));
        }
        let keep: Vec<_> = trusted.into_iter().map(|k| k.verifier).collect();
        let signed =
            sign_keeping(&self.registry, &image, &subject, signer, &keep, provenance.as_ref(), action.created).await;
        signed.map(|s| Some((s, signer.key_id().to_string()))).map_err(|e| e.to_string())
    }
}
