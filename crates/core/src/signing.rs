//! Signing images as cosign does, without I/O: cosign's private key files read (its encrypted
//! form decrypted) into a [`Signer`] of ECDSA P-256 SHA-256 signatures, a [`Verifier`] from a
//! public key, and the payloads those signatures cover (cosign's simple-signing JSON, DSSE's PAE
//! and envelope around an in-toto Statement v1, SLSA provenance), the `.sig`/`.att` manifests
//! those signatures are attached in, and the Sigstore bundle form (cosign v3's default) with the
//! OCI 1.1 referrer manifest and referrers tag index that attach it to an image. Reading the key's
//! file or variable is the config's; writing signatures to registries is the caller's.

mod attached;
mod bundle;
mod cosign;
mod error;
mod key;
mod orphans;
mod payload;
mod provenance;
mod replace;
mod seen;
#[cfg(test)]
mod seen_tests;
#[cfg(test)]
mod tests;

pub use attached::{
    AttachedError, AttachedManifest, Attachment, CONFIG_MEDIA_TYPE, DSSE_MEDIA_TYPE, Layer, MAX_SIGNATURE_BYTES,
    MAX_SIGNATURE_LAYERS, PREDICATE_TYPE_ANNOTATION, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE,
    attestation_layer, layer_signs, signature_layer, signed_digest,
};
pub use bundle::{
    ANNOTATION_CONTENT, ANNOTATION_CREATED, ANNOTATION_PREDICATE_TYPE, BUNDLE_MEDIA_TYPE, COSIGN_SIGN_PREDICATE_TYPE,
    Descriptor, IndexError, MAX_REFERRERS, MAX_REFERRERS_INDEX_BYTES, OCI_EMPTY, OCI_EMPTY_MEDIA_TYPE, Referrer,
    add_referrer, add_referrers, bundle, public_key_hint, referrers_tag, sign_statement, statement_bundle,
};
pub use cosign::{ENCRYPTED_COSIGN, ENCRYPTED_SIGSTORE, MAX_SCRYPT_MEMORY};
pub use error::KeyError;
pub use key::{Signer, Verifier};
pub use orphans::{AttachmentTag, attachment_tag, bundle_layer, bundle_signs, index_digests};
pub use payload::{
    DSSE_PAYLOAD_TYPE, Envelope, EnvelopeSignature, PayloadError, STATEMENT_TYPE, Statement, Subject, pae,
    simple_signing_payload,
};
pub use provenance::{OPENVEX_PREDICATE_TYPE, Provenance, SLSA_PROVENANCE_V1};
pub use replace::{MAX_CARRIED_BYTES, MAX_CARRIED_LAYERS, carried_layer_verifies, carry_candidates};
pub use seen::{SIGNATURE_INVALID, SignatureInfo, UNSIGNED, Verification, checked_digest, required, signed_by};
