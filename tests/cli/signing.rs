//! The signing key as users bring it: keys made by the `openssl` program (P-256 PKCS#8 and SEC1,
//! P-384, RSA, Ed25519) and cosign's encrypted format, loaded by `check` and `signing
//! public-key`; our signatures verified by `openssl dgst`, and openssl's by our verifier. No
//! secret in any output.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use builder_monitor_core::signing::{
    DSSE_PAYLOAD_TYPE, Envelope, Signer, Statement, Verifier, pae, simple_signing_payload,
};
use crypto_secretbox::aead::Aead;
use crypto_secretbox::{KeyInit, XSalsa20Poly1305};
use p256::pkcs8::der::pem::{LineEnding, decode_vec, encode_string};

use crate::support::daemon::{Output, Workspace, run_with_env};

const DIGEST: &str = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945";
const PASSWORD: &str = "correct horse battery staple";

/// The committed key cosign's way: N = 32768, r = 8, p = 1 (`write_the_cosign_fixture`).
const FIXTURE: &str = "tests/fixtures/signing/cosign-n32768.key";
const FIXTURE_PUB: &str = "tests/fixtures/signing/cosign-n32768.pub";
const FIXTURE_PASSWORD: &str = "fixture password";

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out =
        Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl (scripts/test installs it)");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A key made by openssl: `genpkey` (PKCS#8) with `args`, or SEC1 with `ecparam`.
fn key(ws: &Workspace, name: &str, args: &[&str]) -> PathBuf {
    let path = ws.path(name);
    let mut all = args.to_vec();
    all.extend(["-out", path.to_str().unwrap()]);
    openssl(ws.dir.path(), &all);
    path
}

fn p256_pkcs8(ws: &Workspace) -> PathBuf {
    key(ws, "p256.pem", &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
}

fn public_of(ws: &Workspace, key: &Path) -> String {
    openssl(ws.dir.path(), &["pkey", "-in", key.to_str().unwrap(), "-pubout"])
}

/// cosign's encrypted key around `key`'s PKCS#8 DER, written with the crates' encrypting side.
fn cosign_encrypt(key_pem: &str, password: &str, n: u64, label: &str) -> String {
    let (found, der) = decode_vec(key_pem.as_bytes()).unwrap();
    assert_eq!(found, "PRIVATE KEY");
    let salt: [u8; 32] = rand::random();
    let nonce: [u8; 24] = rand::random();
    let params = scrypt::Params::new(n.trailing_zeros() as u8, 8, 1).unwrap();
    let mut box_key = [0u8; 32];
    scrypt::scrypt(password.as_bytes(), &salt, &params, &mut box_key).unwrap();
    let ciphertext = XSalsa20Poly1305::new(&box_key.into()).encrypt(&nonce.into(), der.as_slice()).unwrap();
    let json = format!(
        r#"{{"kdf":{{"name":"scrypt","params":{{"N":{n},"r":8,"p":1}},"salt":"{}"}},"cipher":{{"name":"nacl/secretbox","nonce":"{}"}},"ciphertext":"{}"}}"#,
        STANDARD.encode(salt),
        STANDARD.encode(nonce),
        STANDARD.encode(ciphertext)
    );
    encode_string(label, LineEnding::LF, json.as_bytes()).unwrap()
}

fn config(ws: &Workspace, signing: &str) -> PathBuf {
    ws.config(&format!("[[builders]]\nname = \"b\"\nimage = \"registry.example/b:1\"\n\n[signing]\n{signing}\n"))
}

fn run(ws: &Workspace, args: &[&str], config: &Path, env: &[(&str, &str)]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--config", config.to_str().unwrap()]);
    run_with_env(&all, env, ws.dir.path())
}

/// No line of the key's PEM body (nor the password) in what the command printed.
fn assert_no_secret(out: &Output, key_pem: &str, password: &str) {
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(!printed.contains(password), "the password leaked: {printed}");
    for line in key_pem.lines().filter(|l| !l.starts_with("-----") && l.len() >= 16) {
        assert!(!printed.contains(line), "a line of the key leaked: {printed}");
    }
}

#[test]
fn openssl_verifies_our_signatures_and_we_verify_openssls() {
    let ws = Workspace::new();
    let pkcs8 = p256_pkcs8(&ws);
    let sec1 = key(&ws, "sec1.pem", &["ecparam", "-name", "prime256v1", "-genkey", "-noout"]);
    assert!(std::fs::read_to_string(&sec1).unwrap().starts_with("-----BEGIN EC PRIVATE KEY-----"));
    for key in [&pkcs8, &sec1] {
        let public = public_of(&ws, key);
        std::fs::write(ws.path("pub.pem"), &public).unwrap();
        let signer = Signer::from_pem(&std::fs::read(key).unwrap(), None).unwrap();
        assert_eq!(signer.public_key_pem(), public);

        let payload = simple_signing_payload("registry.example/team/app", DIGEST).unwrap();
        std::fs::write(ws.path("payload"), &payload).unwrap();
        std::fs::write(ws.path("sig.der"), signer.sign(&payload)).unwrap();
        let verified =
            openssl(ws.dir.path(), &["dgst", "-sha256", "-verify", "pub.pem", "-signature", "sig.der", "payload"]);
        assert_eq!(verified.trim(), "Verified OK");

        // An attestation: the envelope's signature is over DSSE's PAE.
        let statement = Statement::new(
            "registry.example/team/app",
            DIGEST,
            "https://slsa.dev/provenance/v1",
            serde_json::json!({}),
        )
        .unwrap();
        let envelope = Envelope::statement(&signer, &statement);
        std::fs::write(ws.path("pae"), pae(DSSE_PAYLOAD_TYPE, &envelope.payload_bytes().unwrap())).unwrap();
        std::fs::write(ws.path("att.der"), STANDARD.decode(&envelope.signatures[0].sig).unwrap()).unwrap();
        let verified =
            openssl(ws.dir.path(), &["dgst", "-sha256", "-verify", "pub.pem", "-signature", "att.der", "pae"]);
        assert_eq!(verified.trim(), "Verified OK");

        // And openssl's signature, checked by our verifier.
        openssl(ws.dir.path(), &["dgst", "-sha256", "-sign", key.to_str().unwrap(), "-out", "theirs.der", "payload"]);
        let verifier = Verifier::from_pem(public.as_bytes()).unwrap();
        let theirs = std::fs::read(ws.path("theirs.der")).unwrap();
        assert!(verifier.verify(&payload, &theirs));
        assert!(!verifier.verify(b"another payload", &theirs));
        assert_eq!(verifier.key_id(), signer.key_id());
    }
}

#[test]
fn check_and_public_key_load_cosigns_encrypted_key() {
    let ws = Workspace::new();
    let plain = std::fs::read_to_string(p256_pkcs8(&ws)).unwrap();
    let public = public_of(&ws, &ws.path("p256.pem"));
    for label in ["ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY"] {
        let encrypted = cosign_encrypt(&plain, PASSWORD, 1 << 10, label);
        std::fs::write(ws.path("cosign.key"), &encrypted).unwrap();
        let config = config(&ws, "key = \"cosign.key\"\npassword_env = \"BM_TEST_COSIGN_PASSWORD\"");
        let env = [("BM_TEST_COSIGN_PASSWORD", PASSWORD)];
        let out = run(&ws, &["check"], &config, &env);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let out = run(&ws, &["signing", "public-key"], &config, &env);
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), public.as_str()), "{}", out.stderr);
        assert_no_secret(&out, &plain, PASSWORD);

        // The PEM itself in a variable, as a Kubernetes Secret gives it.
        let config = config_env(&ws);
        let env = [("BM_TEST_COSIGN_KEY", encrypted.as_str()), ("BM_TEST_COSIGN_PASSWORD", PASSWORD)];
        let out = run(&ws, &["signing", "public-key"], &config, &env);
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), public.as_str()), "{}", out.stderr);
    }

    // cosign's own parameters (N = 32768), from the committed fixture.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        config(&ws, &format!("key = \"{}\"\npassword_env = \"BM_TEST_COSIGN_PASSWORD\"", root.join(FIXTURE).display()));
    let out = run(&ws, &["signing", "public-key"], &config, &[("BM_TEST_COSIGN_PASSWORD", FIXTURE_PASSWORD)]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, std::fs::read_to_string(root.join(FIXTURE_PUB)).unwrap());
}

fn config_env(ws: &Workspace) -> PathBuf {
    config(ws, "key_env = \"BM_TEST_COSIGN_KEY\"\npassword_env = \"BM_TEST_COSIGN_PASSWORD\"")
}

/// A `[signing]` table, the variables set, and what the error must say.
type Case<'a> = (String, Vec<(&'a str, &'a str)>, Vec<String>);

#[test]
fn check_refuses_each_bad_key_naming_it_and_the_fix_without_a_secret() {
    let ws = Workspace::new();
    let plain = std::fs::read_to_string(p256_pkcs8(&ws)).unwrap();
    let encrypted = cosign_encrypt(&plain, PASSWORD, 1 << 10, "ENCRYPTED SIGSTORE PRIVATE KEY");
    std::fs::write(ws.path("cosign.key"), &encrypted).unwrap();
    let p384 = key(&ws, "p384.pem", &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"]);
    let p384_sec1 = key(&ws, "p384-sec1.pem", &["ecparam", "-name", "secp384r1", "-genkey", "-noout"]);
    let rsa = key(&ws, "rsa.pem", &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]);
    let rsa_pkcs1 = ws.path("rsa-pkcs1.pem");
    openssl(ws.dir.path(), &["pkey", "-in", "rsa.pem", "-traditional", "-out", rsa_pkcs1.to_str().unwrap()]);
    let ed25519 = key(&ws, "ed25519.pem", &["genpkey", "-algorithm", "ED25519"]);
    std::fs::write(ws.path("cosign.pub"), public_of(&ws, &ws.path("p256.pem"))).unwrap();
    std::fs::write(
        ws.path("unknown.pem"),
        encode_string("OPENSSH PRIVATE KEY", LineEnding::LF, b"0123456789abcdef0123").unwrap(),
    )
    .unwrap();

    let file = |p: &Path| p.display().to_string();
    let with_password = |k: &str| format!("key = \"{k}\"\npassword_env = \"BM_TEST_COSIGN_PASSWORD\"");
    let cases: Vec<Case> = vec![
        (
            with_password("cosign.key"),
            vec![("BM_TEST_COSIGN_PASSWORD", "not the password")],
            vec![file(&ws.path("cosign.key")), "BM_TEST_COSIGN_PASSWORD".into(), "password does not decrypt it".into()],
        ),
        (
            with_password("cosign.key"),
            vec![],
            vec!["BM_TEST_COSIGN_PASSWORD is not set".into(), "set it to the key's password".into()],
        ),
        (
            "key = \"cosign.key\"".into(),
            vec![],
            vec![file(&ws.path("cosign.key")), "it is encrypted: set password_env".into()],
        ),
        (
            "key = \"missing.key\"".into(),
            vec![],
            vec![
                file(&ws.path("missing.key")),
                "cannot read the signing key".into(),
                "give a readable key file".into(),
            ],
        ),
        (
            "key_env = \"BM_TEST_COSIGN_KEY\"".into(),
            vec![],
            vec!["BM_TEST_COSIGN_KEY is not set".into(), "key_env".into()],
        ),
        ("key = \"p384.pem\"".into(), vec![], vec![file(&p384), "the curve P-384".into(), "make a P-256 key".into()]),
        ("key = \"p384-sec1.pem\"".into(), vec![], vec![file(&p384_sec1), "the curve P-384".into()]),
        ("key = \"rsa.pem\"".into(), vec![], vec![file(&rsa), "an RSA key".into(), "only ECDSA P-256".into()]),
        ("key = \"rsa-pkcs1.pem\"".into(), vec![], vec![file(&rsa_pkcs1), "an RSA key".into()]),
        ("key = \"ed25519.pem\"".into(), vec![], vec![file(&ed25519), "an Ed25519 key".into()]),
        (
            "key = \"unknown.pem\"".into(),
            vec![],
            vec!["PEM type \"OPENSSH PRIVATE KEY\"".into(), "ENCRYPTED SIGSTORE PRIVATE KEY".into()],
        ),
        ("key = \"cosign.pub\"".into(), vec![], vec!["is a public key".into(), "trusted_keys".into()]),
        ("trusted_keys = [\"p256.pem\"]".into(), vec![], vec!["trusted key".into(), "is not a public key".into()]),
        ("require_signed = true".into(), vec![], vec!["require_signed = true trusts no key".into()]),
    ];
    for (signing, env, wanted) in cases {
        let config = config(&ws, &signing);
        for command in [&["check"][..], &["signing", "public-key"]] {
            let out = run(&ws, command, &config, &env);
            assert_eq!(out.code, Some(2), "{command:?} with {signing}: {}{}", out.stdout, out.stderr);
            for want in &wanted {
                assert!(
                    out.stderr.contains(want.as_str()),
                    "{command:?} with {signing}: wanted {want:?} in {}",
                    out.stderr
                );
            }
            assert_no_secret(&out, &plain, PASSWORD);
            for key in [&p384, &rsa, &ed25519] {
                assert_no_secret(&out, &std::fs::read_to_string(key).unwrap(), PASSWORD);
            }
        }
    }
}

/// `pem` with its body's base64 wrapped at `width` characters (all on one line with `usize::MAX`),
/// its lines ended by `eol`.
fn rewrap(pem: &str, width: usize, eol: &str) -> String {
    let lines: Vec<&str> = pem.lines().collect();
    let (begin, end) = (lines[0], lines[lines.len() - 1]);
    let body: String = lines[1..lines.len() - 1].concat();
    let chunks: Vec<String> =
        body.as_bytes().chunks(width.min(body.len())).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
    format!("{begin}{eol}{}{eol}{end}{eol}", chunks.join(eol))
}

/// cosign's encrypted key read as Go's and OpenSSL's PEM readers read it: its body wrapped at 76
/// characters, on one line, or with CRLF line ends; a key file others can read is used with one
/// warning; the encrypted wrapper's text is in no error.
#[test]
fn a_cosign_key_rewrapped_is_read_a_shared_one_warned_of_once_and_no_error_repeats_its_text() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let plain = std::fs::read_to_string(p256_pkcs8(&ws)).unwrap();
    let public = public_of(&ws, &ws.path("p256.pem"));
    let encrypted = cosign_encrypt(&plain, PASSWORD, 1 << 10, "ENCRYPTED SIGSTORE PRIVATE KEY");
    let config = config(&ws, "key = \"cosign.key\"\npassword_env = \"BM_TEST_COSIGN_PASSWORD\"");
    let env = [("BM_TEST_COSIGN_PASSWORD", PASSWORD)];
    let write = |text: &str, mode: u32| {
        std::fs::write(ws.path("cosign.key"), text).unwrap();
        std::fs::set_permissions(ws.path("cosign.key"), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    for (width, eol) in [(76, "\n"), (usize::MAX, "\n"), (64, "\r\n"), (76, "\r\n"), (usize::MAX, "\r\n")] {
        let text = rewrap(&encrypted, width, eol);
        write(&text, 0o600);
        let out = run(&ws, &["signing", "public-key"], &config, &env);
        assert_eq!((out.code, out.stdout.as_str()), (Some(0), public.as_str()), "{width} {eol:?}: {}", out.stderr);
        assert!(!out.stderr.contains("readable by its group or others"), "{}", out.stderr);
    }

    // Readable by others: used, with one warning naming the file and the fix.
    write(&encrypted, 0o644);
    let out = run(&ws, &["check"], &config, &env);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let warned = out.stderr.matches("readable by its group or others").count();
    assert_eq!(warned, 1, "{}", out.stderr);
    assert!(out.stderr.contains("cosign.key") && out.stderr.contains("chmod 600"), "{}", out.stderr);

    // A wrapper whose fields are not what cosign writes: the errors name the field, not its text.
    let marker = "SECRETWRAPPERTEXT";
    for json in [
        format!(
            r#"{{"kdf":{{"name":"{marker}","params":{{"N":1024,"r":8,"p":1}},"salt":""}},"cipher":{{"name":"nacl/secretbox","nonce":""}},"ciphertext":""}}"#
        ),
        format!(r#"{{"kdf":{{"name":"scrypt","params":{{"N":"{marker}","r":8,"p":1}},"salt":""}}}}"#),
        format!(
            r#"{{"kdf":{{"name":"scrypt","params":{{"N":1024,"r":8,"p":1}},"salt":""}},"cipher":{{"name":"{marker}","nonce":""}},"ciphertext":""}}"#
        ),
    ] {
        write(&encode_string("ENCRYPTED SIGSTORE PRIVATE KEY", LineEnding::LF, json.as_bytes()).unwrap(), 0o600);
        let out = run(&ws, &["check"], &config, &env);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stderr.contains("not a valid cosign encrypted key"), "{}", out.stderr);
        assert!(!out.stderr.contains(marker), "the wrapper's text in: {}", out.stderr);
    }
}

/// Writes the N = 32768 fixture (cosign's parameters) and its public key; run by hand when it must
/// change: `cargo test --test cli signing::write_the_cosign_fixture -- --ignored`.
#[test]
#[ignore]
fn write_the_cosign_fixture() {
    let ws = Workspace::new();
    let plain = std::fs::read_to_string(p256_pkcs8(&ws)).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::write(
        root.join(FIXTURE),
        cosign_encrypt(&plain, FIXTURE_PASSWORD, 32768, "ENCRYPTED SIGSTORE PRIVATE KEY"),
    )
    .unwrap();
    std::fs::write(root.join(FIXTURE_PUB), public_of(&ws, &ws.path("p256.pem"))).unwrap();
}
