use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crypto_secretbox::aead::Aead;
use crypto_secretbox::{KeyInit, XSalsa20Poly1305};
use p256::SecretKey;
use p256::pkcs8::EncodePrivateKey;
use p256::pkcs8::der::pem::{LineEnding, encode_string};

use super::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn secret() -> SecretKey {
    SecretKey::from_slice(&[7u8; 32]).unwrap()
}

fn pkcs8_der() -> Vec<u8> {
    secret().to_pkcs8_der().unwrap().as_bytes().to_vec()
}

/// cosign's encrypted key format, written with the crates' encrypting side.
fn encrypted(label: &str, password: &[u8], n: u64, r: u32) -> String {
    let (salt, nonce) = ([3u8; 32], [5u8; 24]);
    let params = scrypt::Params::new(n.trailing_zeros() as u8, r, 1).unwrap();
    let mut key = [0u8; 32];
    scrypt::scrypt(password, &salt, &params, &mut key).unwrap();
    let ciphertext = XSalsa20Poly1305::new(&key.into()).encrypt(&nonce.into(), pkcs8_der().as_slice()).unwrap();
    let json = serde_json::json!({
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": 1}, "salt": STANDARD.encode(salt)},
        "cipher": {"name": "nacl/secretbox", "nonce": STANDARD.encode(nonce)},
        "ciphertext": STANDARD.encode(ciphertext),
    });
    encode_string(label, LineEnding::LF, json.to_string().as_bytes()).unwrap()
}

fn expected_key_id() -> String {
    Signer::from_pem(encode_string("PRIVATE KEY", LineEnding::LF, &pkcs8_der()).unwrap().as_bytes(), None)
        .unwrap()
        .key_id()
        .to_string()
}

#[test]
fn both_encrypted_labels_decrypt_to_the_key() {
    for label in [ENCRYPTED_SIGSTORE, ENCRYPTED_COSIGN] {
        let pem = format!("a line before\n{}", encrypted(label, b"hunter2", 16, 8));
        let signer = Signer::from_pem(pem.as_bytes(), Some(b"hunter2")).unwrap();
        assert_eq!(signer.key_id(), expected_key_id());
        assert!(signer.verifier().verify(b"payload", &signer.sign(b"payload")));
        assert!(!signer.verifier().verify(b"other", &signer.sign(b"payload")));
    }
}

#[test]
fn a_wrong_or_missing_password_is_named() {
    let pem = encrypted(ENCRYPTED_SIGSTORE, b"hunter2", 16, 8);
    assert_eq!(Signer::from_pem(pem.as_bytes(), Some(b"hunter3")).unwrap_err(), KeyError::WrongPassword);
    assert_eq!(Signer::from_pem(pem.as_bytes(), None).unwrap_err(), KeyError::NeedsPassword);
}

#[test]
fn scrypt_parameters_beyond_the_bound_are_refused_before_any_work() {
    // 128 · 16 · 2^20 bytes = 2 GiB: refused from the JSON alone (no allocation, no wait).
    let pem = encrypted(ENCRYPTED_SIGSTORE, b"pw", 2, 16);
    let json = String::from_utf8(p256::pkcs8::der::pem::decode_vec(pem.as_bytes()).unwrap().1).unwrap();
    let hostile = json.replace("\"N\":2", "\"N\":1048576");
    let hostile = encode_string(ENCRYPTED_SIGSTORE, LineEnding::LF, hostile.as_bytes()).unwrap();
    let err = Signer::from_pem(hostile.as_bytes(), Some(b"pw")).unwrap_err().to_string();
    assert!(err.contains("N = 1048576, r = 16"), "{err}");
    let odd = json.replace("\"N\":2", "\"N\":3");
    let odd = encode_string(ENCRYPTED_SIGSTORE, LineEnding::LF, odd.as_bytes()).unwrap();
    assert!(Signer::from_pem(odd.as_bytes(), Some(b"pw")).unwrap_err().to_string().contains("power of two"));
}

#[test]
fn other_pem_types_are_named() {
    let public = Signer::from_pem(encrypted(ENCRYPTED_SIGSTORE, b"p", 16, 8).as_bytes(), Some(b"p"))
        .unwrap()
        .public_key_pem()
        .to_string();
    assert_eq!(Signer::from_pem(public.as_bytes(), None).unwrap_err(), KeyError::PublicKey("PUBLIC KEY".into()));
    let rsa = encode_string("RSA PRIVATE KEY", LineEnding::LF, b"x").unwrap();
    assert_eq!(Signer::from_pem(rsa.as_bytes(), None).unwrap_err(), KeyError::OtherKind("RSA".into()));
    let ssh = encode_string("OPENSSH PRIVATE KEY", LineEnding::LF, b"x").unwrap();
    assert_eq!(
        Signer::from_pem(ssh.as_bytes(), None).unwrap_err(),
        KeyError::UnknownPemType("OPENSSH PRIVATE KEY".into())
    );
    assert!(matches!(Signer::from_pem(b"not a key", None), Err(KeyError::NotPem(_))));
    let private = encode_string("PRIVATE KEY", LineEnding::LF, &pkcs8_der()).unwrap();
    assert_eq!(Verifier::from_pem(private.as_bytes()).unwrap_err(), KeyError::NotPublicKey("PRIVATE KEY".into()));
    assert_eq!(Verifier::from_pem(public.as_bytes()).unwrap().public_key_pem(), public);
}

#[test]
fn debug_shows_the_key_id_only() {
    let signer =
        Signer::from_pem(encode_string("PRIVATE KEY", LineEnding::LF, &pkcs8_der()).unwrap().as_bytes(), None).unwrap();
    let debug = format!("{signer:?}");
    assert_eq!(debug, format!("Signer {{ key_id: {:?}, .. }}", signer.key_id()));
    assert!(!debug.contains(&hex::encode([7u8; 32])));
}

#[test]
fn pae_is_the_dsse_specs_test_vector() {
    // DSSE protocol.md, "Test vectors".
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    );
    // Lengths are bytes, not characters.
    assert_eq!(pae("t", "é".as_bytes()), "DSSEv1 1 t 2 é".as_bytes());
}

#[test]
fn the_simple_signing_payload_is_cosigns_bytes() {
    let payload = simple_signing_payload("registry.example/team/app", DIGEST).unwrap();
    assert_eq!(
        String::from_utf8(payload).unwrap(),
        format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"registry.example/team/app"}},"image":{{"docker-manifest-digest":"{DIGEST}"}},"type":"cosign container image signature"}},"optional":null}}"#
        )
    );
    assert_eq!(simple_signing_payload("r/a", "sha256:XYZ").unwrap_err(), PayloadError::Digest("sha256:XYZ".into()));
}

#[test]
fn an_envelope_signs_the_pae_of_its_statement() {
    let signer =
        Signer::from_pem(encode_string("PRIVATE KEY", LineEnding::LF, &pkcs8_der()).unwrap().as_bytes(), None).unwrap();
    let statement = Statement::new(
        "registry.example/team/app",
        DIGEST,
        "https://slsa.dev/provenance/v1",
        serde_json::json!({"a": 1}),
    )
    .unwrap();
    let json = String::from_utf8(statement.to_json()).unwrap();
    assert!(json.starts_with(r#"{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"registry.example/team/app","digest":{"sha256":"0123"#), "{json}");
    let envelope = Envelope::statement(&signer, &statement);
    assert_eq!(envelope.payload_type, DSSE_PAYLOAD_TYPE);
    assert_eq!(envelope.payload_bytes().unwrap(), statement.to_json());
    assert_eq!(envelope.signatures[0].keyid, "");
    let sig = STANDARD.decode(&envelope.signatures[0].sig).unwrap();
    assert!(signer.verifier().verify(&pae(DSSE_PAYLOAD_TYPE, &statement.to_json()), &sig));
    assert!(!signer.verifier().verify(&statement.to_json(), &sig), "over the PAE, not the bare payload");
    assert!(envelope.verify(&signer.verifier()));
    let json = String::from_utf8(envelope.to_json()).unwrap();
    assert!(json.starts_with(r#"{"payloadType":"application/vnd.in-toto+json","payload":""#), "{json}");
}
