//! Signing keys made by the `openssl` program (never by the project's own code), and a digest
//! signed with one through the crate's public `signing::sign`, as a trusted signer (kpack, a CI)
//! would have signed it before builder-monitor reads it.

use std::path::Path;
use std::process::Command;

use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{Descriptor, Signer};

fn openssl(dir: &Path, args: &[&str]) {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl (scripts/test installs it)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A P-256 key `dir/NAME` made by openssl, and its public key beside it (`NAME.pub`).
pub fn p256(dir: &Path, name: &str) -> Signer {
    openssl(dir, &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name]);
    openssl(dir, &["pkey", "-in", name, "-pubout", "-out", &format!("{name}.pub")]);
    Signer::from_pem(&std::fs::read(dir.join(name)).unwrap(), None).unwrap()
}

/// Signs `digest` of `image`'s repository with `signer` (the `.sig`, the bundle, no attestation).
pub async fn sign(registry: &Registry, image: &ImageRef, digest: &str, signer: &Signer) {
    let manifest = registry.get_manifest(image, digest).await.unwrap();
    let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
    assert_eq!(subject.digest, digest, "the manifest read back is the one to sign");
    builder_monitor::signing::sign(registry, image, &subject, signer, None, chrono::Utc::now()).await.unwrap();
}
