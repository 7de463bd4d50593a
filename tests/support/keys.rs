//! Signing keys made by the `openssl` program (never by the project's own code), and a digest
//! signed with one through the crate's public `signing::sign`, as a trusted signer (kpack, a CI)
//! would have signed it before builder-monitor reads it.

use std::path::{Path, PathBuf};
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

/// A test CA (`dir/ca.pem`) and a server certificate for 127.0.0.1 it signed (`dir/tls.pem`,
/// key `dir/tls.key`), as a team's internal CA would issue its registry's.
pub fn tls(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=builder-monitor test CA"],
        ]
        .concat(),
    );
    openssl(dir, &[&["req"][..], &ec, &["-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1"]].concat());
    std::fs::write(
        dir.join("tls.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let sign = ["x509", "-req", "-in", "tls.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"];
    openssl(dir, &[&sign[..], &["-out", "tls.pem", "-days", "2", "-extfile", "tls.ext"]].concat());
    (dir.join("ca.pem"), dir.join("tls.pem"), dir.join("tls.key"))
}

/// Signs `digest` of `image`'s repository with `signer` (the `.sig`, the bundle, no attestation).
pub async fn sign(registry: &Registry, image: &ImageRef, digest: &str, signer: &Signer) {
    let manifest = registry.get_manifest(image, digest).await.unwrap();
    let subject = Descriptor::of(&manifest.media_type, &manifest.bytes);
    assert_eq!(subject.digest, digest, "the manifest read back is the one to sign");
    builder_monitor::signing::sign(registry, image, &subject, signer, None, chrono::Utc::now()).await.unwrap();
}
