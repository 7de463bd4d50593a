//! Signatures in registries: cosign's tag forms attached to a digest we wrote (`.sig` simple
//! signing, `.att` DSSE attestations), appended beside any other signer's, and the check that a
//! digest carries a valid signature by a trusted key, read within bounds. What a signature is
//! (keys, payloads, the manifests' layers) is the core's `signing`; this is only its I/O.

mod read;
mod write;

pub use read::{TrustedKey, Verdict, trusted, verify};
pub use write::{SignError, Signed, sign};
