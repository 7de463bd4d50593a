//! The verifiers clusters run, as outside checks of what the daemon signs: cosign v2.6.5 and
//! v3.1.3 and crane (go-containerregistry v0.22.1), built from the Go module proxy by
//! `scripts/go-tools` into `COSIGN2`, `COSIGN3` and `CRANE`. Key checks without a transparency
//! log, over plain HTTP on loopback; never the project's own verifier.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How cosign reads a digest's signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cosign {
    /// v2.6.5: the `.sig`/`.att` tags while the digest has no bundle, the bundles once it has one
    /// (offline it needs `--trusted-root`: a file with only the trusted-root media type).
    V2,
    /// v3.1.3 at its defaults: the bundle referrers.
    V3,
    /// v3.1.3 with `--new-bundle-format=false`: the tags only (Kyverno's default path).
    V3Tags,
}

pub const ALL: [Cosign; 3] = [Cosign::V2, Cosign::V3, Cosign::V3Tags];

fn tool(var: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the tests with scripts/test, which builds cosign and crane (scripts/go-tools prints the paths)")
    })
}

/// What one run said.
#[derive(Debug)]
pub struct Said {
    pub ok: bool,
    pub text: String,
}

fn run(mut command: Command, home: &Path) -> Said {
    // Its own HOME: no cached trust root or credentials from elsewhere, nothing left behind.
    let out = command
        .env("HOME", home)
        .env_remove("DOCKER_CONFIG")
        .env("SIGSTORE_NO_CACHE", "true")
        .env("TUF_ROOT", home.join("tuf"))
        .output()
        .expect("run a Go tool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Said { ok: out.status.success(), text: text.trim().to_string() }
}

/// cosign run against images: a scratch HOME with the v2 trusted-root file in it.
pub struct Verifier {
    home: tempfile::TempDir,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    pub fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        // What an air-gapped v2 user passes (docs/signing.md): a key check needs no more of it.
        std::fs::write(
            home.path().join("trusted-root.json"),
            r#"{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}"#,
        )
        .unwrap();
        Verifier { home }
    }

    fn cosign(&self, which: Cosign, subcommand: &str, key: &Path) -> Command {
        let mut command = Command::new(tool(if which == Cosign::V2 { "COSIGN2" } else { "COSIGN3" }));
        command.arg(subcommand).arg("--key").arg(key).args(["--insecure-ignore-tlog=true", "--allow-http-registry"]);
        match which {
            Cosign::V2 => {
                command.arg("--trusted-root").arg(self.home.path().join("trusted-root.json"));
            }
            Cosign::V3 => {}
            Cosign::V3Tags => {
                command.arg("--new-bundle-format=false");
            }
        }
        command
    }

    /// `cosign verify` of `reference` (`host/repo@sha256:…` or a tag) with the public key `key`.
    pub fn verify(&self, which: Cosign, reference: &str, key: &Path) -> Said {
        let mut command = self.cosign(which, "verify", key);
        command.arg(reference);
        run(command, self.home.path())
    }

    /// `cosign verify-attestation --type PREDICATE` of `reference` with `key`.
    pub fn verify_attestation(&self, which: Cosign, reference: &str, key: &Path, predicate: &str) -> Said {
        let mut command = self.cosign(which, "verify-attestation", key);
        command.args(["--type", predicate]).arg(reference);
        run(command, self.home.path())
    }

    /// `crane validate --remote REFERENCE` (`--fast`: the manifest and blob existence only, for
    /// cosign's `.sig`/`.att` form, which the full check refuses for cosign's own too).
    pub fn crane_validate(&self, reference: &str, fast: bool) -> Said {
        let mut command = Command::new(tool("CRANE"));
        command.args(["validate", "--insecure", "--remote", reference]);
        if fast {
            command.arg("--fast");
        }
        run(command, self.home.path())
    }
}
