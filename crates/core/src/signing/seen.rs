//! What an action found and wrote of signatures, as its events and `status` carry it
//! (`action.signature`): the verification of the digest it started from, when a signature was
//! required, and our signature of the digest it wrote. Also the pure decisions around them:
//! whether an image requires a signature, which digest is checked, and which key signed an image's
//! current digest as far as the record says.

use serde::{Deserialize, Serialize};

/// The refusal reason of a digest that carries no signature at all.
pub const UNSIGNED: &str = "unsigned";
/// The refusal reason of a digest whose signatures none of the trusted keys verifies.
pub const SIGNATURE_INVALID: &str = "signature_invalid";

/// An action's signatures: what it verified before acting, what it signed after.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureInfo {
    /// The digest it signed (the one the tag points at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Our key's id (sha256 of its public key, hex), when it signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The `.sig` manifest holding our signature layer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The `.att` manifest holding our attestation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<String>,
    /// The check of the digest it started from (`require_signed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verification>,
}

/// The check of one digest's signatures against the trusted keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub digest: String,
    /// `signed`, [`UNSIGNED`] or [`SIGNATURE_INVALID`].
    pub verdict: String,
    /// The id of the key whose signature verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The keys tried (their files, `own key` for `[signing] key`).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Why no signature verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Verification {
    /// The verdict that lets the action go.
    pub const SIGNED: &'static str = "signed";

    pub fn passed(&self) -> bool {
        self.verdict == Self::SIGNED
    }

    /// The refusal's text: the reason first (what alerts and scripts match), then the digest and
    /// the keys tried. `None` when it passed.
    pub fn refusal(&self) -> Option<String> {
        if self.passed() {
            return None;
        }
        let keys = if self.keys.is_empty() { "none".to_string() } else { self.keys.join(", ") };
        let mut text = format!(
            "{}: refused to act on {}: no valid signature by a trusted key (tried: {keys})",
            self.verdict, self.digest
        );
        if let Some(why) = &self.why {
            text.push_str(&format!("; {why}"));
        }
        Some(text)
    }
}

/// Whether an image's actions need a signed starting digest: its own `require_signed` when it
/// says, else `[signing] require_signed`.
pub fn required(global: bool, image: Option<bool>) -> bool {
    image.unwrap_or(global)
}

/// The digest an action is checked by: the one it starts from. A deploy starts from the digest it
/// deploys; a rebase or rebuild from the digest an earlier attempt recorded before its write (its
/// open intent: after a crash the tag may hold the new digest already, which is not what was
/// trusted), else the tag's digest now.
pub fn checked_digest<'a>(
    deploys: Option<&'a str>,
    intent_expected: Option<Option<&'a str>>,
    tag_now: Option<&'a str>,
) -> Option<&'a str> {
    match (deploys, intent_expected) {
        (Some(digest), _) => Some(digest),
        (None, Some(expected)) => expected,
        (None, None) => tag_now,
    }
}

/// Which key signed `current` (an image's digest) as far as `seen` (its actions' signatures,
/// newest first) says: our key after we signed it, the trusted key after a check passed;
/// `Some(None)` when a check found it unsigned or invalid; `None` when nothing is known of it.
/// With `current` unknown, the newest record about any digest answers.
pub fn signed_by<'a>(
    current: Option<&str>,
    seen: impl IntoIterator<Item = &'a SignatureInfo>,
) -> Option<Option<String>> {
    for info in seen {
        let wrote = info.digest.as_deref().zip(info.key_id.as_ref());
        if let Some((digest, key_id)) = wrote
            && current.is_none_or(|c| c == digest)
        {
            return Some(Some(key_id.clone()));
        }
        if let Some(v) = &info.verified
            && current.is_none_or(|c| c == v.digest)
        {
            return Some(v.key_id.clone().filter(|_| v.passed()));
        }
    }
    None
}
