//! Signatures in registries: cosign's tag forms attached to a digest we wrote (`.sig` simple
//! signing, `.att` DSSE attestations), appended beside any other signer's; the Sigstore bundle
//! form (cosign v3's default) as an OCI 1.1 referrer of the signed digest ([`bundle`]); and the
//! check that a digest carries a valid signature by a trusted key, read within bounds; and what we
//! attached to digests no tag reaches any more, found and removed when asked ([`orphans`]). What a
//! signature is (keys, payloads, the manifests' layers) is the core's `signing`; this is its I/O.
//! [`service`]: `[signing]` with its key decrypted, handed to the code that signs (never kept in
//! the shared config), and its one verify → provenance → sign step.

pub mod bundle;
pub mod orphans;
mod read;
pub mod service;
mod write;

pub use read::{TrustedKey, Verdict, trusted, verify};
pub use service::{Already, EnsureError, SigningService, ToSign};
pub use write::{Replaced, SignError, Signed, openvex, provenance, sign, sign_keeping};
