//! A `.sig` or `.att` we cannot extend (an index, a Docker v2 manifest, too many layers, over the
//! size we read, layers whose blobs are gone): anyone who can push to the app's repository can
//! plant one for the digest a rebase will write (`rebase --dry-run` prints it), and a signature
//! appended to it would be refused for ever. It is replaced by a fresh OCI manifest of our layer
//! and the other signers' layers that still exist and still verify with a key we trust, a bounded
//! number of them read within a bounded size. Pure: reading blobs and writing are the caller's.

use super::attached::{Attachment, DSSE_MEDIA_TYPE, Layer, MAX_SIGNATURE_BYTES, MAX_SIGNATURE_LAYERS};
use super::attached::{SIMPLE_SIGNING_MEDIA_TYPE, layer_signs};
use super::key::Verifier;
use super::payload::{Envelope, Statement};

/// Layers of a replaced manifest carried into the fresh one at most: with ours, within the bound
/// every reader keeps.
pub const MAX_CARRIED_LAYERS: usize = MAX_SIGNATURE_LAYERS - 1;
/// Bytes of layer blobs read to decide what is carried, at most.
pub const MAX_CARRIED_BYTES: usize = MAX_SIGNATURE_BYTES / 2;
/// Layer descriptors of a replaced manifest looked at, at most (a planted one may list thousands).
const MAX_LOOKED_AT: usize = 4 * MAX_SIGNATURE_LAYERS;

/// The layers of `bytes` (a manifest as read, whatever it is) that a fresh `attachment` manifest
/// may carry: of the attachment's layer type, sized within [`MAX_CARRIED_BYTES`], at most
/// [`MAX_CARRIED_LAYERS`], each still to be read and checked by [`carried_layer_verifies`]. Nothing
/// from what is not JSON.
pub fn carry_candidates(bytes: &[u8], attachment: Attachment) -> Vec<Layer> {
    let wanted = layer_media_type(attachment);
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(bytes) else { return Vec::new() };
    let Some(layers) = doc.get("layers").and_then(|l| l.as_array()) else { return Vec::new() };
    let mut seen = std::collections::BTreeSet::new();
    layers
        .iter()
        .take(MAX_LOOKED_AT)
        .filter_map(|l| serde_json::from_value::<Layer>(l.clone()).ok())
        .filter(|l| l.media_type == wanted && l.size <= MAX_CARRIED_BYTES as u64)
        .filter(|l| seen.insert((l.digest.clone(), l.annotations.clone())))
        .take(MAX_CARRIED_LAYERS)
        .collect()
}

/// Whether `blob` (`layer`'s, read) still verifies as `attachment` of `digest` in `repository` with
/// `verifier`: a `.sig` layer that signs that digest there, or an `.att` DSSE envelope signed over
/// its PAE whose in-toto Statement is about that digest.
pub fn carried_layer_verifies(
    attachment: Attachment,
    layer: &Layer,
    blob: &[u8],
    digest: &str,
    repository: &str,
    verifier: &Verifier,
) -> bool {
    match attachment {
        Attachment::Signature => layer_signs(layer, blob, digest, repository, verifier),
        Attachment::Attestation => {
            let Ok(envelope) = serde_json::from_slice::<Envelope>(blob) else { return false };
            let Some(statement) = envelope.payload_bytes() else { return false };
            let Ok(statement) = serde_json::from_slice::<Statement>(&statement) else { return false };
            let hex = digest.strip_prefix("sha256:").unwrap_or_default();
            let about = statement.subject.iter().any(|s| s.digest.get("sha256").is_some_and(|h| h == hex));
            about && envelope.verify(verifier)
        }
    }
}

fn layer_media_type(attachment: Attachment) -> &'static str {
    match attachment {
        Attachment::Signature => SIMPLE_SIGNING_MEDIA_TYPE,
        Attachment::Attestation => DSSE_MEDIA_TYPE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::{AttachedManifest, Signer, signature_layer};

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn signer(seed: u8) -> Signer {
        use p256::pkcs8::EncodePrivateKey;
        use p256::pkcs8::der::pem::{LineEnding, encode_string};
        let der = p256::SecretKey::from_slice(&[seed; 32]).unwrap().to_pkcs8_der().unwrap();
        let pem = encode_string("PRIVATE KEY", LineEnding::LF, der.as_bytes()).unwrap();
        Signer::from_pem(pem.as_bytes(), None).unwrap()
    }

    #[test]
    fn candidates_are_bounded_of_the_right_type_and_each_once() {
        let (layer, _) = signature_layer(&signer(7), "r.example/app", DIGEST).unwrap();
        let mut other = layer.clone();
        other.media_type = "application/octet-stream".into();
        let mut big = layer.clone();
        big.size = MAX_CARRIED_BYTES as u64 + 1;
        let many: Vec<Layer> = (0..10_000).map(|_| layer.clone()).chain([other, big]).collect();
        let doc = serde_json::json!({ "manifests": [], "layers": many });
        let found = carry_candidates(doc.to_string().as_bytes(), Attachment::Signature);
        assert_eq!(found, vec![layer.clone()], "one of the 10,000 copies, nothing else");
        let distinct: Vec<Layer> = (0..40)
            .map(|i| {
                let mut l = layer.clone();
                l.digest = format!("sha256:{i:064x}");
                l
            })
            .collect();
        let doc = serde_json::json!({ "layers": distinct });
        assert_eq!(carry_candidates(doc.to_string().as_bytes(), Attachment::Signature).len(), MAX_CARRIED_LAYERS);
        assert!(carry_candidates(b"\x00 not json", Attachment::Signature).is_empty());
        assert!(carry_candidates(doc.to_string().as_bytes(), Attachment::Attestation).is_empty());
    }

    #[test]
    fn a_carried_signature_must_verify_for_this_digest_and_repository() {
        let (ours, theirs) = (signer(7), signer(9));
        let (layer, payload) = signature_layer(&ours, "r.example/app", DIGEST).unwrap();
        let verifies = |repository: &str, verifier: &Verifier| {
            carried_layer_verifies(Attachment::Signature, &layer, &payload, DIGEST, repository, verifier)
        };
        assert!(verifies("r.example/app", &ours.verifier()));
        assert!(!verifies("r.example/other", &ours.verifier()), "another repository's signature");
        assert!(!verifies("r.example/app", &theirs.verifier()), "another key");
        let other = DIGEST.replace("0123", "4567");
        assert!(!carried_layer_verifies(
            Attachment::Signature,
            &layer,
            &payload,
            &other,
            "r.example/app",
            &ours.verifier()
        ));
    }

    #[test]
    fn indexes_docker_manifests_and_full_ones_are_not_extended() {
        let (layer, _) = signature_layer(&signer(7), "r.example/app", DIGEST).unwrap();
        let parse = |doc: serde_json::Value| AttachedManifest::parse("t.sig", doc.to_string().as_bytes()).unwrap();
        let index = parse(serde_json::json!({"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}));
        assert!(index.not_extensible(&layer).unwrap().contains("image.index"));
        let bare_index = parse(serde_json::json!({"schemaVersion": 2, "manifests": []}));
        assert!(bare_index.not_extensible(&layer).is_some());
        let docker = parse(
            serde_json::json!({"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": []}),
        );
        assert!(docker.not_extensible(&layer).unwrap().contains("docker"));
        let mut full = AttachedManifest::fresh(vec![layer.clone(); MAX_SIGNATURE_LAYERS]);
        assert_eq!(full.not_extensible(&layer), None, "ours is there already: nothing to add");
        full.layers.iter_mut().for_each(|l| l.digest = "sha256:other".into());
        assert!(full.not_extensible(&layer).unwrap().contains("16"));
        assert_eq!(AttachedManifest::fresh(vec![layer.clone(); 3]).not_extensible(&layer), None);
    }
}
