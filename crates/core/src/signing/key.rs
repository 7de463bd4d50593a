//! Private keys read into a [`Signer`], public keys into a [`Verifier`]: ECDSA P-256 with
//! SHA-256, signatures in ASN.1 DER (what cosign writes and verifiers read). Other curves and
//! kinds are named when refused, so the user knows which key they gave.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::der::asn1::ObjectIdentifier;
use p256::pkcs8::der::pem::LineEnding;
use p256::pkcs8::spki::SubjectPublicKeyInfoRef;
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePublicKey, PrivateKeyInfoRef};
use p256::{PublicKey, SecretKey};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::cosign::{ENCRYPTED_COSIGN, ENCRYPTED_SIGSTORE, decrypt};
use super::error::KeyError;

const EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const P256: &str = "1.2.840.10045.3.1.7";

/// Signs payloads with one P-256 key. The key is zeroised when the signer is dropped (the
/// `ecdsa` crate's `SigningKey` does so), and neither `Debug` nor any error shows it.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
    public_key_pem: String,
    key_id: String,
}

/// Checks signatures against one P-256 public key.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    key: VerifyingKey,
    key_id: String,
}

impl Signer {
    /// Reads a private key PEM: cosign's encrypted key (with `password`), or an unencrypted
    /// PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`. Text around the PEM block is ignored, as
    /// cosign ignores it.
    pub fn from_pem(pem: &[u8], password: Option<&[u8]>) -> Result<Self, KeyError> {
        let (label, body) = decode_pem(pem)?;
        let secret = match label.as_str() {
            ENCRYPTED_SIGSTORE | ENCRYPTED_COSIGN => {
                let password = password.ok_or(KeyError::NeedsPassword)?;
                from_pkcs8(&decrypt(&body, password)?)?
            }
            "PRIVATE KEY" => from_pkcs8(&body)?,
            "EC PRIVATE KEY" => from_sec1(&body)?,
            "RSA PRIVATE KEY" => return Err(KeyError::OtherKind("RSA".into())),
            "PUBLIC KEY" | "RSA PUBLIC KEY" | "EC PUBLIC KEY" | "CERTIFICATE" => {
                return Err(KeyError::PublicKey(label));
            }
            _ => return Err(KeyError::UnknownPemType(label)),
        };
        Ok(Self::from_secret(&secret))
    }

    fn from_secret(secret: &SecretKey) -> Self {
        let key = SigningKey::from(secret);
        let public = Verifier::new(*key.verifying_key());
        let public_key_pem = public.public_key_pem();
        Self { key, public_key_pem, key_id: public.key_id }
    }

    /// The ASN.1 DER ECDSA P-256 signature of SHA-256(`payload`) (deterministic, RFC 6979).
    pub fn sign(&self, payload: &[u8]) -> Vec<u8> {
        let signature: Signature = self.key.sign(payload);
        signature.to_der().as_bytes().to_vec()
    }

    /// The public key as a `PUBLIC KEY` PEM (PKIX), what admission policies and `cosign verify
    /// --key` take.
    pub fn public_key_pem(&self) -> &str {
        &self.public_key_pem
    }

    /// The hex SHA-256 of the public key's PKIX DER: names the key in records without showing it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn verifier(&self) -> Verifier {
        Verifier::new(*self.key.verifying_key())
    }
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

impl Verifier {
    fn new(key: VerifyingKey) -> Self {
        let der = key.to_public_key_der().expect("a P-256 public key encodes");
        Self { key, key_id: hex::encode(Sha256::digest(der.as_bytes())) }
    }

    /// Reads a `PUBLIC KEY` PEM (PKIX) of an ECDSA P-256 key.
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let (label, body) = decode_pem(pem)?;
        if label != "PUBLIC KEY" {
            return Err(KeyError::NotPublicKey(label));
        }
        let info = SubjectPublicKeyInfoRef::try_from(body.as_slice())
            .map_err(|e| KeyError::malformed("public key")(e.to_string()))?;
        let curve = info.algorithm.parameters.and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
        check_algorithm(info.algorithm.oid, curve)?;
        let key = PublicKey::from_public_key_der(&body)
            .map_err(|e| KeyError::malformed("P-256 public key")(e.to_string()))?;
        Ok(Self::new(VerifyingKey::from(key)))
    }

    /// Whether `der_signature` is this key's ECDSA signature of SHA-256(`payload`). A signature
    /// that is not DER is simply not valid.
    pub fn verify(&self, payload: &[u8], der_signature: &[u8]) -> bool {
        Signature::from_der(der_signature).is_ok_and(|s| self.key.verify(payload, &s).is_ok())
    }

    pub fn public_key_pem(&self) -> String {
        self.key.to_public_key_pem(LineEnding::LF).expect("a P-256 public key encodes")
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier").field("key_id", &self.key_id).finish()
    }
}

/// The first PEM block's type and body (zeroised when dropped: it may be an unencrypted key).
/// The body is read as Go's and OpenSSL's readers read it: lines of any length (76, or all on one
/// line), `\r\n` or `\n` line ends, blanks ignored. Errors name positions and kinds, never text.
fn decode_pem(pem: &[u8]) -> Result<(String, Zeroizing<Vec<u8>>), KeyError> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const DASHES: &[u8] = b"-----";
    let find = |haystack: &[u8], needle: &[u8]| haystack.windows(needle.len()).position(|w| w == needle);
    let start = find(pem, BEGIN).ok_or_else(|| KeyError::NotPem("no -----BEGIN line".into()))? + BEGIN.len();
    let label_len =
        find(&pem[start..], DASHES).ok_or_else(|| KeyError::NotPem("its BEGIN line is not closed".into()))?;
    let label = &pem[start..start + label_len];
    if label.len() > 64 || !label.iter().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b' ') {
        return Err(KeyError::NotPem("its BEGIN line names no PEM type".into()));
    }
    let body_start = start + label_len + DASHES.len();
    let end_line = [b"-----END ".as_slice(), label, DASHES].concat();
    let body_len = find(&pem[body_start..], &end_line)
        .ok_or_else(|| KeyError::NotPem("no -----END line of the same type".into()))?;
    let body: Zeroizing<Vec<u8>> = Zeroizing::new(
        pem[body_start..body_start + body_len].iter().copied().filter(|b| !b.is_ascii_whitespace()).collect(),
    );
    let decoded = STANDARD
        .decode(body.as_slice())
        .map_err(|e| KeyError::NotPem(format!("its body is not base64 ({})", base64_error(&e))))?;
    let label = String::from_utf8(label.to_vec()).expect("checked ASCII");
    Ok((label, Zeroizing::new(decoded)))
}

/// A base64 error by position and kind (the `base64` crate's message names the byte it met).
fn base64_error(e: &base64::DecodeError) -> String {
    match e {
        base64::DecodeError::InvalidByte(offset, _) => format!("a character that is not base64 at {offset}"),
        base64::DecodeError::InvalidLength(_) => "its length is not a whole number of base64 groups".into(),
        base64::DecodeError::InvalidLastSymbol(offset, _) => format!("a bad last character at {offset}"),
        base64::DecodeError::InvalidPadding => "bad padding".into(),
    }
}

fn from_pkcs8(der: &[u8]) -> Result<SecretKey, KeyError> {
    let info = PrivateKeyInfoRef::try_from(der).map_err(|e| KeyError::malformed("PKCS#8 key")(e.to_string()))?;
    let curve = info.algorithm.parameters.and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
    check_algorithm(info.algorithm.oid, curve)?;
    SecretKey::from_pkcs8_der(der).map_err(|e| KeyError::malformed("P-256 PKCS#8 key")(e.to_string()))
}

fn from_sec1(der: &[u8]) -> Result<SecretKey, KeyError> {
    let key = sec1::EcPrivateKey::try_from(der).map_err(|e| KeyError::malformed("SEC1 EC key")(e.to_string()))?;
    match key.parameters.and_then(|p| p.named_curve()) {
        Some(curve) => check_algorithm(EC_PUBLIC_KEY.parse().expect("an OID"), Some(curve))?,
        // No curve named: the scalar's length tells P-256 (32 bytes) from the others.
        None if key.private_key.len() != 32 => {
            return Err(KeyError::OtherCurve(format!("of {}-byte scalars", key.private_key.len())));
        }
        None => {}
    }
    SecretKey::from_sec1_der(der).map_err(|e| KeyError::malformed("P-256 SEC1 key")(e.to_string()))
}

/// Refuses every algorithm but ECDSA on P-256, naming the one found.
fn check_algorithm(oid: ObjectIdentifier, curve: Option<ObjectIdentifier>) -> Result<(), KeyError> {
    let kind = match oid.to_string().as_str() {
        EC_PUBLIC_KEY => None,
        "1.2.840.113549.1.1.1" | "1.2.840.113549.1.1.10" => Some("RSA"),
        "1.3.101.112" => Some("Ed25519"),
        "1.3.101.113" => Some("Ed448"),
        "1.3.101.110" | "1.3.101.111" => Some("X25519/X448 (key agreement)"),
        "1.2.840.10040.4.1" => Some("DSA"),
        other => return Err(KeyError::OtherKind(format!("algorithm {other}"))),
    };
    if let Some(kind) = kind {
        return Err(KeyError::OtherKind(kind.into()));
    }
    let curve = curve.map(|c| c.to_string()).unwrap_or_default();
    match curve.as_str() {
        P256 => Ok(()),
        "1.3.132.0.34" => Err(KeyError::OtherCurve("P-384".into())),
        "1.3.132.0.35" => Err(KeyError::OtherCurve("P-521".into())),
        "1.3.132.0.33" => Err(KeyError::OtherCurve("P-224".into())),
        "1.2.840.10045.3.1.1" => Err(KeyError::OtherCurve("P-192".into())),
        "1.3.132.0.10" => Err(KeyError::OtherCurve("secp256k1".into())),
        "" => Err(KeyError::OtherCurve("(not named)".into())),
        other => Err(KeyError::OtherCurve(other.into())),
    }
}
