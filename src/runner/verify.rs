//! `require_signed`: before any attempt of a rebase, rebuild or deploy, the digest it starts from
//! must carry a valid signature by a trusted key (`[signing] trusted_keys`, or our own key). One
//! gate for every backend, ahead of the carrier, so a refused action writes nothing (no tag, no
//! Job, no Build, no workload).

use super::*;
use builder_monitor_core::signing::{self as core_signing, SIGNATURE_INVALID, SignatureInfo, UNSIGNED, Verification};

/// What the gate says of an attempt.
pub(super) enum Gate {
    /// Go on; the check made, when one was.
    Pass(Option<Verification>),
    /// Stop here: refused for good, or the registry could not be asked (retried).
    Stop(Box<Attempt>),
}

impl Runner {
    /// Carries out one attempt of `action` by its backend and says how it went: every attempt of
    /// every kind passes `require_signed`'s gate (`verify`) first.
    pub(super) async fn attempt(&self, action: &ClaimedAction, target: &ActionTarget) -> Attempt {
        let verified = match self.signature_gate(action, target).await {
            Gate::Pass(verified) => verified,
            Gate::Stop(attempt) => return *attempt,
        };
        let start = verified.as_ref().map(|v| v.digest.as_str());
        let mut attempt = self.backends.carrier(action.kind).attempt(&self.ctx, action, target, start).await;
        if let Some(verified) = verified {
            attempt.signature.get_or_insert_with(SignatureInfo::default).verified = Some(verified);
        }
        attempt
    }

    /// The check of the digest `action` starts from, when its image requires a signature.
    pub(super) async fn signature_gate(&self, action: &ClaimedAction, target: &ActionTarget) -> Gate {
        let Some(signing) = self.ctx.config.signing.as_ref() else { return Gate::Pass(None) };
        let image_says = self.ctx.config.image(&action.image).and_then(|i| i.require_signed);
        if !action.kind.on_app_image() || !core_signing::required(signing.require_signed, image_says) {
            return Gate::Pass(None);
        }
        let image = match ImageRef::parse(&target.image) {
            Ok(i) => i,
            Err(err) => {
                return Gate::Stop(Box::new(Attempt::failed(
                    format!("invalid app image {}: {err}", target.image),
                    Next::Final,
                )));
            }
        };
        let deploys = target.plan.deploy().map(|d| d.digest.as_str());
        let intent = match deploys {
            Some(_) => None,
            None => match self.ctx.open_intent(action).await {
                Ok(intent) => intent,
                Err(err) => return retry(format!("cannot read the action's open tag write: {err}")),
            },
        };
        let tag_now = match (deploys, &intent) {
            (None, None) => match self.ctx.read_tag(&target.image).await {
                Ok(digest) => digest,
                Err(why) => {
                    return retry(format!("cannot read {}'s digest to check its signature: {why}", target.image));
                }
            },
            _ => None,
        };
        let expected = intent.as_ref().map(|i| i.expected.as_deref());
        let keys = match &self.ctx.signing {
            Some(service) => service.trusted().to_vec(),
            None => crate::signing::trusted(signing, None),
        };
        let names: Vec<String> = keys.iter().map(|k| k.name.clone()).collect();
        let Some(digest) = core_signing::checked_digest(deploys, expected, tag_now.as_deref()) else {
            let check = Verification {
                digest: format!("{} (no digest: the tag does not exist)", target.image),
                verdict: UNSIGNED.into(),
                key_id: None,
                keys: names,
                why: None,
            };
            return refuse(check);
        };
        let verdict = match crate::signing::verify(&self.ctx.registry, &image, digest, &keys).await {
            Ok(v) => v,
            Err(err) => return retry(format!("cannot read the signatures of {digest}: {err}")),
        };
        let check = verification(digest, verdict, names);
        if check.passed() {
            tracing::info!(action = %action.key, digest = %check.digest, key_id = check.key_id.as_deref().unwrap_or(""), "the starting digest is signed by a trusted key");
            return Gate::Pass(Some(check));
        }
        refuse(check)
    }
}

/// What the check of `digest` against the keys `names` found, as events and the ledger keep it.
fn verification(digest: &str, verdict: crate::signing::Verdict, names: Vec<String>) -> Verification {
    let (verdict, key_id, why) = match verdict {
        crate::signing::Verdict::Signed { key_id, .. } => (Verification::SIGNED, Some(key_id), None),
        crate::signing::Verdict::Unsigned => (UNSIGNED, None, None),
        crate::signing::Verdict::Invalid { why } => (SIGNATURE_INVALID, None, Some(why)),
    };
    Verification { digest: digest.to_string(), verdict: verdict.into(), key_id, keys: names, why }
}

fn retry(detail: String) -> Gate {
    let mut attempt = Attempt::failed(detail, Next::Retry);
    // An open intent is the next attempt's to settle.
    attempt.keep_intent = true;
    Gate::Stop(Box::new(attempt))
}

fn refuse(check: Verification) -> Gate {
    let detail = check.refusal().unwrap_or_default();
    let mut attempt = Attempt::failed(detail, Next::Refused);
    attempt.signature =
        Some(builder_monitor_core::signing::SignatureInfo { verified: Some(check), ..Default::default() });
    Gate::Stop(Box::new(attempt))
}
