//! Stable ids: short hashes of their parts, the same in every process and every release (events,
//! actions and runner objects are named by them, so a retry or a restart finds what it made).

use sha2::{Digest, Sha256};

/// A short stable id: the first 128 bits of sha256 over the parts, hex.
pub fn stable_id(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex::encode(&hasher.finalize()[..16])
}
