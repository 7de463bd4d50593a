use chrono::TimeZone;
use p256::pkcs8::EncodePrivateKey;
use p256::pkcs8::der::pem::{LineEnding, encode_string};
use serde_json::Value;

use super::*;
use crate::signing::Envelope;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const OTHER: &str = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

fn signer() -> Signer {
    let der = p256::SecretKey::from_slice(&[7u8; 32]).unwrap().to_pkcs8_der().unwrap();
    Signer::from_pem(encode_string("PRIVATE KEY", LineEnding::LF, der.as_bytes()).unwrap().as_bytes(), None).unwrap()
}

fn subject() -> Descriptor {
    Descriptor {
        media_type: OCI_MANIFEST.into(),
        size: 1234,
        digest: DIGEST.into(),
        annotations: None,
        artifact_type: None,
    }
}

fn created() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 4, 5, 6, 7).unwrap()
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn the_statement_is_cosigns_sign_statement_for_the_digest() {
    let statement = sign_statement(DIGEST).unwrap();
    assert_eq!(
        String::from_utf8(statement).unwrap(),
        r#"{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},"annotations":{}}],"predicateType":"https://sigstore.dev/cosign/sign/v1","predicate":{}}"#
    );
    assert_eq!(sign_statement("sha256:ABC"), Err(PayloadError::Digest("sha256:ABC".into())));
}

#[test]
fn the_hint_is_base64_of_the_sha256_of_the_public_keys_der() {
    let signer = signer();
    let pem = signer.public_key_pem();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = STANDARD.decode(body).unwrap();
    assert_eq!(public_key_hint(&signer), STANDARD.encode(Sha256::digest(&der)));
}

#[test]
fn the_bundle_holds_a_dsse_envelope_signed_over_the_statement_that_names_the_digest() {
    let signer = signer();
    let bundle = json(&super::bundle(&signer, DIGEST).unwrap());
    assert_eq!(bundle["mediaType"], BUNDLE_MEDIA_TYPE);
    assert_eq!(bundle["verificationMaterial"], json!({ "publicKey": { "hint": public_key_hint(&signer) } }));
    let keys: Vec<&String> = bundle.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 3, "{bundle}");
    let envelope = &bundle["dsseEnvelope"];
    assert_eq!(envelope["payloadType"], DSSE_PAYLOAD_TYPE);
    assert_eq!(envelope["signatures"].as_array().unwrap().len(), 1);
    assert!(envelope["signatures"][0].get("keyid").is_none(), "cosign writes no key id: {envelope}");
    let envelope = Envelope {
        payload_type: envelope["payloadType"].as_str().unwrap().into(),
        payload: envelope["payload"].as_str().unwrap().into(),
        signatures: vec![crate::signing::EnvelopeSignature {
            keyid: String::new(),
            sig: envelope["signatures"][0]["sig"].as_str().unwrap().into(),
        }],
    };
    assert_eq!(envelope.payload_bytes().unwrap(), sign_statement(DIGEST).unwrap());
    assert!(envelope.verify(&signer.verifier()));
    // The signature binds this digest: the same signature over another digest's statement fails.
    let forged = Envelope { payload: STANDARD.encode(sign_statement(OTHER).unwrap()), ..envelope };
    assert!(!forged.verify(&signer.verifier()));
}

#[test]
fn the_referrer_manifest_is_cosigns_with_the_bundle_as_its_one_layer() {
    let signer = signer();
    let referrer = Referrer::new(&signer, &subject(), created()).unwrap();
    assert_eq!(referrer.bundle, super::bundle(&signer, DIGEST).unwrap());
    let text = String::from_utf8(referrer.manifest.clone()).unwrap();
    let expected = format!(
        concat!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","#,
            r#""config":{{"mediaType":"application/vnd.oci.empty.v1+json","size":2,"digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","artifactType":"{bt}"}},"#,
            r#""layers":[{{"mediaType":"{bt}","size":{size},"digest":"{layer}"}}],"#,
            r#""annotations":{{"dev.sigstore.bundle.content":"dsse-envelope","dev.sigstore.bundle.predicateType":"https://sigstore.dev/cosign/sign/v1","org.opencontainers.image.created":"2026-03-04T05:06:07Z"}},"#,
            r#""subject":{{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":1234,"digest":"{DIGEST}"}},"#,
            r#""artifactType":"{bt}"}}"#
        ),
        bt = BUNDLE_MEDIA_TYPE,
        size = referrer.bundle.len(),
        layer = sha256_digest(&referrer.bundle),
        DIGEST = DIGEST,
    );
    assert_eq!(text, expected);
    assert_eq!(referrer.digest(), sha256_digest(&referrer.manifest));
    assert_eq!(referrer.descriptor.media_type, OCI_MANIFEST);
    assert_eq!(referrer.descriptor.size, referrer.manifest.len() as u64);
    assert_eq!(referrer.descriptor.artifact_type.as_deref(), Some(BUNDLE_MEDIA_TYPE));
    assert_eq!(
        referrer.descriptor.annotations,
        json(&referrer.manifest)["annotations"]
            .as_object()
            .map(|a| { a.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect() })
    );
}

#[test]
fn the_same_inputs_make_the_same_bytes_and_the_time_is_the_callers() {
    let signer = signer();
    let a = Referrer::new(&signer, &subject(), created()).unwrap();
    assert_eq!(a, Referrer::new(&signer, &subject(), created()).unwrap());
    let later = Referrer::new(&signer, &subject(), created() + chrono::Duration::seconds(1)).unwrap();
    assert_ne!(a.digest(), later.digest());
    assert_eq!(a.bundle, later.bundle);
    let bad = Descriptor { digest: "sha256:short".into(), ..subject() };
    assert_eq!(Referrer::new(&signer, &bad, created()), Err(PayloadError::Digest("sha256:short".into())));
}

#[test]
fn the_referrers_tag_is_the_digest_with_a_dash() {
    assert_eq!(referrers_tag(DIGEST).unwrap(), format!("sha256-{}", &DIGEST[7..]));
    assert!(referrers_tag("latest").is_err());
}

#[test]
fn a_referrer_is_added_once_to_a_new_or_existing_index_keeping_the_others() {
    let referrer = Referrer::new(&signer(), &subject(), created()).unwrap();
    let first = add_referrer(None, &referrer.descriptor).unwrap().unwrap();
    let index = json(&first);
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["mediaType"], OCI_INDEX);
    assert_eq!(index["manifests"], json!([serde_json::to_value(&referrer.descriptor).unwrap()]));
    assert_eq!(add_referrer(Some(&first), &referrer.descriptor).unwrap(), None, "a retry adds nothing");

    let foreign = json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": OTHER, "size": 9, "artifactType": "application/spdx+json", "x-kept": true}],
        "annotations": {"kept": "yes"},
    });
    let added =
        json(&add_referrer(Some(&serde_json::to_vec(&foreign).unwrap()), &referrer.descriptor).unwrap().unwrap());
    assert_eq!(added["manifests"][0], foreign["manifests"][0]);
    assert_eq!(added["manifests"][1]["digest"], referrer.digest());
    assert_eq!(added["manifests"].as_array().unwrap().len(), 2);
    assert_eq!(added["annotations"], foreign["annotations"]);
}

#[test]
fn a_hostile_index_is_refused_within_bounds() {
    let descriptor = Referrer::new(&signer(), &subject(), created()).unwrap().descriptor;
    let huge = vec![b' '; MAX_REFERRERS_INDEX_BYTES + 1];
    assert_eq!(add_referrer(Some(&huge), &descriptor), Err(IndexError::TooLarge(MAX_REFERRERS_INDEX_BYTES + 1)));

    let entry = json!({"mediaType": OCI_MANIFEST, "digest": OTHER, "size": 1});
    let full = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": vec![entry; MAX_REFERRERS]});
    let full = serde_json::to_vec(&full).unwrap();
    assert!(full.len() <= MAX_REFERRERS_INDEX_BYTES);
    assert_eq!(add_referrer(Some(&full), &descriptor), Err(IndexError::TooMany(MAX_REFERRERS + 1)));

    for (bytes, why) in [
        (br#"[1,2]"#.to_vec(), "not a JSON object"),
        (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#.to_vec(), "mediaType"),
        (br#"{"schemaVersion":1,"mediaType":"application/vnd.oci.image.index.v1+json"}"#.to_vec(), "schemaVersion"),
        (
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":{}}"#.to_vec(),
            "list",
        ),
    ] {
        let error = add_referrer(Some(&bytes), &descriptor).unwrap_err();
        assert!(matches!(&error, IndexError::NotIndex(m) if m.contains(why)), "{error}");
        assert!(error.to_string().contains("delete that tag"), "{error}");
    }
}

fn provenance_statement(digest: &str) -> crate::signing::Statement {
    crate::signing::Statement::new("r.example/apps/web", digest, crate::signing::SLSA_PROVENANCE_V1, json!({"x": 1}))
        .unwrap()
}

#[test]
fn an_attestation_bundle_holds_the_att_layers_envelope_and_names_its_predicate_type() {
    let signer = signer();
    let statement = provenance_statement(DIGEST);
    let referrer = Referrer::attestation(&signer, &subject(), &statement, created()).unwrap();
    let bundle = json(&referrer.bundle);
    assert_eq!(bundle["mediaType"], BUNDLE_MEDIA_TYPE);
    // The same envelope as the `.att` layer's: the payload and the signature (RFC 6979).
    let att = Envelope::statement(&signer, &statement);
    assert_eq!(bundle["dsseEnvelope"]["payload"], att.payload.as_str());
    assert_eq!(bundle["dsseEnvelope"]["signatures"][0]["sig"], att.signatures[0].sig.as_str());
    let manifest = json(&referrer.manifest);
    assert_eq!(manifest["annotations"][ANNOTATION_PREDICATE_TYPE], crate::signing::SLSA_PROVENANCE_V1);
    assert_eq!(manifest["annotations"][ANNOTATION_CONTENT], "dsse-envelope");
    assert_eq!(manifest["subject"]["digest"], DIGEST);
    assert_eq!(manifest["artifactType"], BUNDLE_MEDIA_TYPE);
    // Not the signature's referrer: both are listed.
    assert_ne!(referrer.digest(), Referrer::new(&signer, &subject(), created()).unwrap().digest());
    // A statement about another digest is not attached to this one.
    let error = Referrer::attestation(&signer, &subject(), &provenance_statement(OTHER), created()).unwrap_err();
    assert_eq!(error, PayloadError::Digest(DIGEST.into()));
}

#[test]
fn several_referrers_are_added_in_one_write_and_a_retry_adds_none() {
    let signer = signer();
    let signature = Referrer::new(&signer, &subject(), created()).unwrap().descriptor;
    let attestation =
        Referrer::attestation(&signer, &subject(), &provenance_statement(DIGEST), created()).unwrap().descriptor;
    let both = [signature.clone(), attestation.clone()];
    let first = add_referrers(None, &both).unwrap().unwrap();
    let listed = json(&first);
    assert_eq!(listed["manifests"].as_array().unwrap().len(), 2);
    assert_eq!(listed["manifests"][1]["digest"], attestation.digest.as_str());
    assert_eq!(add_referrers(Some(&first), &both).unwrap(), None);
    // One listed already (a crash between the two): only the other is added.
    let one = add_referrer(None, &signature).unwrap().unwrap();
    let completed = json(&add_referrers(Some(&one), &both).unwrap().unwrap());
    assert_eq!(completed, listed);
}
