//! Sigstore's own JavaScript verifier (@sigstore/verify, installed by `scripts/test` into
//! `SIGSTORE_VERIFY`), run by node over a digest's bundle referrers as a registry serves them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/test` installed the verifier's npm packages.
pub fn installed() -> PathBuf {
    std::env::var_os("SIGSTORE_VERIFY").map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "SIGSTORE_VERIFY is not set: run the tests with scripts/test, which installs Sigstore's verifier (@sigstore/verify), or set SIGSTORE_VERIFY to a folder whose node_modules has @sigstore/verify and @sigstore/bundle"
        )
    })
}

/// Verifies every bundle referrer of `subject` in `base_url`'s `repository` with the public key
/// `key` (a PEM file), expecting its Statement to name `expected` (`forge`: with the payload swapped
/// for one naming `expected`, which must fail). Its one line of output, and whether it passed.
pub fn verify(
    base_url: &str,
    repository: &str,
    subject: &str,
    key: &Path,
    expected: &str,
    forge: bool,
) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/sigstore/verify-bundle.js");
    let mut command = Command::new("node");
    command.arg(script).arg(base_url).arg(repository).arg(subject).arg(key).arg(expected);
    if forge {
        command.arg("forge");
    }
    let out = command.env("NODE_PATH", installed().join("node_modules")).output().expect("run node");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said.trim().to_string())
}
