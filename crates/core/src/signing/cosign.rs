//! cosign's encrypted private key: a PEM whose body is JSON naming scrypt's parameters and salt
//! and nacl/secretbox's nonce, around the key's PKCS#8 DER. Decrypting is the kept crates' work
//! (`scrypt`, `crypto_secretbox`); this file only reads the JSON and bounds what it may ask for.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use crypto_secretbox::aead::Aead;
use crypto_secretbox::{KeyInit, XSalsa20Poly1305};
use serde::Deserialize;
use zeroize::Zeroizing;

use super::error::KeyError;

/// The PEM type cosign writes today, and the one older cosign versions wrote.
pub const ENCRYPTED_SIGSTORE: &str = "ENCRYPTED SIGSTORE PRIVATE KEY";
pub const ENCRYPTED_COSIGN: &str = "ENCRYPTED COSIGN PRIVATE KEY";

/// The most memory a key's scrypt parameters may ask for (128·r·N bytes). cosign asks 32 MiB
/// (N = 32768, r = 8); a file asking for more than this is refused before any is allocated, so a
/// wrong or hostile file cannot take the daemon's memory.
pub const MAX_SCRYPT_MEMORY: u64 = 256 << 20;
/// scrypt's parallelism: cosign uses 1; each unit is another pass over the same memory.
const MAX_SCRYPT_P: u32 = 16;

#[derive(Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: KdfParams,
    salt: String,
}

#[derive(Deserialize)]
struct KdfParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

const WHAT: &str = "cosign encrypted key";

fn bytes(field: &str, text: &str) -> Result<Vec<u8>, KeyError> {
    STANDARD.decode(text).map_err(|e| KeyError::Malformed { what: WHAT, why: format!("{field} is not base64 ({e})") })
}

/// Why the encrypted key's JSON could not be read, by position and kind only: serde's own
/// messages quote the values they met, and those are the key file's text.
fn json_error(e: &serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Data => "does not have the fields cosign writes",
        _ => "is not JSON",
    };
    format!("its body {kind} (line {}, column {})", e.line(), e.column())
}

/// The PKCS#8 DER inside an encrypted key's PEM body (`json`), zeroised when dropped. No error
/// repeats the body's text.
pub(super) fn decrypt(json: &[u8], password: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
    let bad = |why: String| KeyError::Malformed { what: WHAT, why };
    let encrypted: Encrypted = serde_json::from_slice(json).map_err(|e| bad(json_error(&e)))?;
    if encrypted.kdf.name != "scrypt" {
        return Err(bad("its kdf is not scrypt".into()));
    }
    if encrypted.cipher.name != "nacl/secretbox" {
        return Err(bad("its cipher is not nacl/secretbox".into()));
    }
    let KdfParams { n, r, p } = encrypted.kdf.params;
    if n < 2 || !n.is_power_of_two() {
        return Err(bad(format!("scrypt's N = {n} is not a power of two above 1")));
    }
    let memory = 128u64.saturating_mul(u64::from(r)).saturating_mul(n);
    if r == 0 || p == 0 || p > MAX_SCRYPT_P || memory > MAX_SCRYPT_MEMORY {
        return Err(bad(format!(
            "scrypt's N = {n}, r = {r}, p = {p} ask for more than this reads (128·r·N up to {} MiB, p from 1 to {MAX_SCRYPT_P})",
            MAX_SCRYPT_MEMORY >> 20
        )));
    }
    let params = scrypt::Params::new(n.trailing_zeros() as u8, r, p).map_err(|e| bad(format!("scrypt: {e}")))?;
    let salt = bytes("kdf.salt", &encrypted.kdf.salt)?;
    let nonce = bytes("cipher.nonce", &encrypted.cipher.nonce)?;
    let Ok(nonce) = <[u8; 24]>::try_from(nonce.as_slice()) else {
        return Err(bad(format!("cipher.nonce has {} bytes, not 24", nonce.len())));
    };
    let ciphertext = bytes("ciphertext", &encrypted.ciphertext)?;

    let mut box_key = Zeroizing::new([0u8; 32]);
    scrypt::scrypt(password, &salt, &params, box_key.as_mut()).map_err(|e| bad(format!("scrypt: {e}")))?;
    let cipher = XSalsa20Poly1305::new(box_key.as_ref().into());
    // secretbox's tag authenticates the key box: it fails to open only with another password (or
    // a changed file), which is what users meet.
    let plain = cipher.decrypt(&nonce.into(), ciphertext.as_slice()).map_err(|_| KeyError::WrongPassword)?;
    Ok(Zeroizing::new(plain))
}
