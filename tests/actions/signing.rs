//! What a signing daemon writes, read back from the real registry and checked by verifiers outside
//! the project's signing code (the `openssl` program): each rebased digest's `.sig` layer and
//! `.att` envelope verify with the public key and bind the new digest; they are written before
//! the tag moves; a daemon killed right before the tag PUT leaves one signature layer of ours
//! after the next run, beside another signer's; a multi-arch app gets its index and each platform
//! manifest signed.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::Descriptor;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::{Daemon, Output, Workspace};
use support::images::{Format, Pusher};
use support::proxy::{Proxy, Trap};
use support::referrers_registry::{Kind, Served};
use support::registry::TestRegistry;

/// cosign's encrypted key (scrypt N = 32768, as `cosign generate-key-pair` writes it), its public
/// key and password.
pub(crate) const KEY: &str = "tests/fixtures/signing/cosign-n32768.key";
pub(crate) const PUBLIC_KEY: &str = "tests/fixtures/signing/cosign-n32768.pub";
pub(crate) const PASSWORD: &str = "fixture password";
pub(crate) const PASSWORD_ENV: &str = "BM_TEST_SIGNING_PASSWORD";

pub(crate) fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path).display().to_string()
}

/// One app on run image v1 behind a recording proxy, pinned by one `run --once`, with `[signing]`.
pub(crate) struct World {
    pub(crate) registry: Served,
    pub(crate) proxy: Proxy,
    pub(crate) host: String,
    pub(crate) pusher: Pusher,
    pub(crate) ws: Workspace,
    pub(crate) config: PathBuf,
}

impl World {
    async fn new() -> Self {
        Self::with("[runner]\ntype = \"none\"\nrebase = \"registry\"\n", "").await
    }

    /// With `runner` (the `[runner]` tables) and `signing` (more `[signing]` lines).
    pub(crate) async fn with(runner: &str, signing: &str) -> Self {
        Self::on(Kind::Distribution, runner, signing).await
    }

    /// [`World::with`] on the `kind` of registry.
    pub(crate) async fn on(kind: Kind, runner: &str, signing: &str) -> Self {
        Self::on_run(kind, runner, signing, RunImage::jammy("1", 3)).await
    }

    /// [`World::on`] with the app built on `run_v1` (its labels: a package list, say).
    pub(crate) async fn on_run(kind: Kind, runner: &str, signing: &str, run_v1: RunImage) -> Self {
        let registry = Served::start(kind);
        let proxy = Proxy::start(registry.host()).await;
        let host = proxy.host.clone();
        let pusher = Pusher::new(&host);
        let run_tag = format!("{host}/demo/run:latest");
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
        app::push_app(&pusher, "apps/web", Some("latest"), &app, Format::Oci).await;
        let ws = Workspace::new();
        let config = ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
             [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"auto\"\n\n\
             {runner}\n\
             [signing]\nkey = \"{}\"\npassword_env = \"{PASSWORD_ENV}\"\n{signing}",
            fixture(KEY)
        ));
        let world = World { registry, proxy, host, pusher, ws, config };
        let first = world.run_once();
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world
    }

    pub(crate) fn run_once(&self) -> Output {
        let config = self.config.to_str().unwrap();
        support::daemon::run_with_env(
            &["run", "--once", "--config", config],
            &[(PASSWORD_ENV, PASSWORD)],
            self.ws.dir.path(),
        )
    }

    pub(crate) async fn move_run_image(&self) {
        app::push_run(&self.pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    }

    pub(crate) fn tag(&self) -> ImageRef {
        ImageRef::parse(&format!("{}/apps/web:latest", self.host)).unwrap()
    }
}

pub(crate) fn client() -> Registry {
    builder_monitor::install_crypto_provider();
    Registry::new([], Metrics::new())
}

/// The manifest under `digest`'s `.sig` or `.att` tag, as JSON.
async fn attached(image: &ImageRef, digest: &str, suffix: &str) -> Value {
    let tag = format!("{}.{suffix}", digest.replace(':', "-"));
    let manifest = client().get_manifest(image, &tag).await.unwrap_or_else(|e| panic!("{tag}: {e}"));
    serde_json::from_slice(&manifest.bytes).unwrap()
}

async fn blob(image: &ImageRef, digest: &str) -> Vec<u8> {
    client().get_blob(image, digest, 1 << 20).await.unwrap().to_vec()
}

/// Whether `openssl dgst -sha256 -verify` accepts `signature` (DER) over `data` with `public_key`.
fn openssl_verifies(public_key: &str, data: &[u8], signature: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data"), data).unwrap();
    std::fs::write(dir.path().join("sig"), signature).unwrap();
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify", public_key, "-signature", "sig", "data"])
        .current_dir(dir.path())
        .output()
        .expect("openssl runs (scripts/test installs it)");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Verified OK")
}

/// The `.sig` layers of `digest` that `public_key` verifies and whose payload binds `digest`.
pub(crate) async fn valid_signatures(image: &ImageRef, digest: &str, public_key: &str) -> usize {
    let sig = attached(image, digest, "sig").await;
    let mut valid = 0;
    for layer in sig["layers"].as_array().unwrap() {
        let payload = blob(image, layer["digest"].as_str().unwrap()).await;
        let signature = STANDARD.decode(layer["annotations"]["dev.cosignproject.cosign/signature"].as_str().unwrap());
        let binds: Value = serde_json::from_slice(&payload).unwrap();
        if openssl_verifies(public_key, &payload, &signature.unwrap())
            && binds["critical"]["image"]["docker-manifest-digest"] == digest
        {
            valid += 1;
        }
    }
    valid
}

/// The request index of the first `method` whose path ends with `suffix`.
fn position(proxy: &Proxy, method: &str, suffix: &str) -> usize {
    let seen = proxy.seen();
    seen.iter().position(|s| s.method == method && s.path.ends_with(suffix)).unwrap_or_else(|| {
        panic!("no {method} …{suffix} among {:?}", seen.iter().map(|s| (&s.method, &s.path)).collect::<Vec<_>>())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_is_signed_and_attested_before_its_tag_moves() {
    let world = World::new().await;
    let tag = world.tag();
    let before = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    world.proxy.clear();
    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let after = client().head_manifest(&tag).await.unwrap().digest;
    assert_ne!(after, before, "rebased");

    // The tag form: one simple-signing layer, verified by openssl, binding the new digest to the
    // repository.
    let public_key = fixture(PUBLIC_KEY);
    assert_eq!(valid_signatures(&tag, &after, &public_key).await, 1);
    let sig = attached(&tag, &after, "sig").await;
    assert_eq!(sig["layers"].as_array().unwrap().len(), 1);
    assert_eq!(sig["layers"][0]["mediaType"], "application/vnd.dev.cosign.simplesigning.v1+json");
    let payload: Value =
        serde_json::from_slice(&blob(&tag, sig["layers"][0]["digest"].as_str().unwrap()).await).unwrap();
    assert_eq!(payload["critical"]["identity"]["docker-reference"], format!("{}/apps/web", world.host));
    assert_eq!(payload["critical"]["type"], "cosign container image signature");

    // The attestation: a DSSE envelope whose PAE openssl verifies, around an in-toto Statement about
    // the new digest with SLSA provenance naming the app digest it came from.
    let att = attached(&tag, &after, "att").await;
    let layer = &att["layers"][0];
    assert_eq!(layer["mediaType"], "application/vnd.dsse.envelope.v1+json");
    assert_eq!(layer["annotations"]["predicateType"], "https://slsa.dev/provenance/v1");
    // cosign writes it empty on every attestation layer; the tag form's readers refuse a layer without it.
    assert_eq!(layer["annotations"]["dev.cosignproject.cosign/signature"], "", "{layer:#}");
    let envelope: Value = serde_json::from_slice(&blob(&tag, layer["digest"].as_str().unwrap()).await).unwrap();
    let payload_type = envelope["payloadType"].as_str().unwrap();
    let statement = STANDARD.decode(envelope["payload"].as_str().unwrap()).unwrap();
    let mut pae = format!("DSSEv1 {} {payload_type} {} ", payload_type.len(), statement.len()).into_bytes();
    pae.extend_from_slice(&statement);
    let signature = STANDARD.decode(envelope["signatures"][0]["sig"].as_str().unwrap()).unwrap();
    assert!(openssl_verifies(&public_key, &pae, &signature), "the envelope's signature over its PAE");
    assert!(!openssl_verifies(&public_key, &statement, &signature), "over the PAE, not the bare payload");
    let statement: Value = serde_json::from_slice(&statement).unwrap();
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(statement["subject"][0]["digest"]["sha256"], after.trim_start_matches("sha256:"));
    let definition = &statement["predicate"]["buildDefinition"];
    assert_eq!(definition["buildType"], "urn:builder-monitor:rebase:v1");
    let dependencies = definition["resolvedDependencies"].as_array().unwrap();
    assert!(
        dependencies
            .iter()
            .any(|d| d["name"] == "app" && d["digest"]["sha256"] == before.trim_start_matches("sha256:")),
        "{dependencies:?}"
    );
    assert!(dependencies.iter().any(|d| d["name"] == "runImage"), "{dependencies:?}");

    // The bundle form, as Sigstore's own verifier reads it from the registry with the public key.
    let (verified, said) = support::sigstore::verify(
        &format!("http://{}", world.host),
        "apps/web",
        &after,
        Path::new(&public_key),
        &after,
        false,
    );
    assert!(verified && said.contains("\"verified\":2"), "the signature's bundle and the attestation's: {said}");

    // Written before the tag moved.
    let referrers = format!("/manifests/sha256-{}", after.trim_start_matches("sha256:"));
    assert!(position(&world.proxy, "PUT", &referrers) < position(&world.proxy, "PUT", "/v2/apps/web/manifests/latest"));
    let hex = after.trim_start_matches("sha256:");
    let tag_put = position(&world.proxy, "PUT", "/v2/apps/web/manifests/latest");
    assert!(position(&world.proxy, "PUT", &format!("/manifests/sha256-{hex}.sig")) < tag_put);
    assert!(position(&world.proxy, "PUT", &format!("/manifests/sha256-{hex}.att")) < tag_put);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_before_the_tag_moves_leaves_one_signature_and_moves_the_tag_once() {
    let world = World::new().await;
    let tag = world.tag();
    world.move_run_image().await;
    // What the rebase will write, learnt by a dry run; another signer signs it first.
    let config = world.config.to_str().unwrap();
    let dry = support::daemon::run_with_env(
        &[
            "rebase",
            &tag.to_string(),
            "--run-image",
            &format!("{}/demo/run:latest", world.host),
            "--dry-run",
            "--json",
            "--config",
            config,
        ],
        &[(PASSWORD_ENV, PASSWORD)],
        world.ws.dir.path(),
    );
    assert_eq!(dry.code, Some(0), "{}", dry.stderr);
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    let new = dry["signing"]["digests"][0].as_str().unwrap().to_string();
    assert!(dry["signing"].get("written").is_none(), "a dry run writes no signature: {dry}");
    let other = support::keys::p256(world.ws.dir.path(), "other");
    // Only the tag form's payload names the digest; the bundle's subject size is not checked here.
    let subject = Descriptor {
        media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        size: 1,
        digest: new.clone(),
        annotations: None,
        artifact_type: None,
    };
    builder_monitor::signing::sign(&client(), &tag, &subject, &other, None, chrono::Utc::now()).await.unwrap();

    // Held at the tag PUT: the signature is there already; the daemon dies.
    let (trap, held, _release) = Trap::hold("PUT", "/v2/apps/web/manifests/latest");
    world.proxy.trap(trap);
    let daemon = Daemon::start_with_env(&world.config, &[(PASSWORD_ENV, PASSWORD)]);
    tokio::time::timeout(support::PATIENCE, held.notified()).await.expect("the daemon reaches the tag PUT");
    let public_key = fixture(PUBLIC_KEY);
    assert_eq!(valid_signatures(&tag, &new, &public_key).await, 1, "signed before the tag PUT");
    let index = client().get_manifest(&tag, &new.replace(':', "-")).await.unwrap();
    let index: Value = serde_json::from_slice(&index.bytes).unwrap();
    assert_eq!(index["manifests"].as_array().unwrap().len(), 3, "both our bundles before the tag PUT: {index}");
    daemon.kill();
    assert_ne!(client().head_manifest(&tag).await.unwrap().digest, new, "the tag did not move");

    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(client().head_manifest(&tag).await.unwrap().digest, new, "the tag moved");
    let sig = attached(&tag, &new, "sig").await;
    assert_eq!(sig["layers"].as_array().unwrap().len(), 2, "the other signer's and one of ours: {sig}");
    assert_eq!(valid_signatures(&tag, &new, &public_key).await, 1, "ours");
    let other_pub = world.ws.path("other.pub").display().to_string();
    assert_eq!(valid_signatures(&tag, &new, &other_pub).await, 1, "the other signer's, kept");
    assert_eq!(attached(&tag, &new, "att").await["layers"].as_array().unwrap().len(), 1, "one attestation");
    // The bundle referrers: the other signer's, and our signature's and attestation's once each,
    // dated by the action, not the attempt.
    let index = client().get_manifest(&tag, &new.replace(':', "-")).await.unwrap();
    let index: Value = serde_json::from_slice(&index.bytes).unwrap();
    let predicates: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["annotations"]["dev.sigstore.bundle.predicateType"].as_str().unwrap())
        .collect();
    assert_eq!(
        predicates,
        [
            "https://sigstore.dev/cosign/sign/v1",
            "https://sigstore.dev/cosign/sign/v1",
            "https://slsa.dev/provenance/v1"
        ],
        "{index}"
    );
    let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
    let moves = ledger.tag_moves(None, 100).await.unwrap();
    let ours: Vec<_> = moves.iter().filter(|m| m.after.as_deref() == Some(new.as_str())).collect();
    assert_eq!(ours.len(), 1, "the tag moved once: {moves:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_arch_rebase_by_hand_signs_the_index_and_each_platform() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = registry.host.clone();
    let runs = |version: &str| app::two_platform_runs(version, 3);
    let run_tag = format!("{host}/demo/run:latest");
    let (v1, v2) = (runs("1"), runs("2"));
    let v1_children = app::push_run_index(&pusher, "demo/run", "latest", &v1).await;
    let mut apps = Vec::new();
    for (run, child) in v1.iter().zip(&v1_children) {
        let app = App::on(run, &run_tag, &format!("{host}/demo/run@{}", child.digest));
        apps.push(app::push_app(&pusher, "apps/web", None, &app, Format::Oci).await);
    }
    let pairs: Vec<(&app::PushedImage, &RunImage)> = apps.iter().zip(v1.iter()).collect();
    app::push_index(&pusher, "apps/web", "latest", &pairs, None, Format::Oci).await;
    app::push_run_index(&pusher, "demo/run", "latest", &v2).await;

    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [signing]\nkey = \"{}\"\npassword_env = \"{PASSWORD_ENV}\"\nattest = false\n",
        fixture(KEY)
    ));
    let rebase = |dry: bool| {
        let mut args = vec!["rebase", "--json", "--run-image", &run_tag, "--config", config.to_str().unwrap()];
        let image = format!("{host}/apps/web:latest");
        args.push(&image);
        if dry {
            args.push("--dry-run");
        }
        let out = support::daemon::run_with_env(&args, &[(PASSWORD_ENV, PASSWORD)], ws.dir.path());
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()
    };
    let text = support::daemon::run_with_env(
        &[
            "rebase",
            &format!("{host}/apps/web:latest"),
            "--run-image",
            &run_tag,
            "--dry-run",
            "--config",
            config.to_str().unwrap(),
        ],
        &[(PASSWORD_ENV, PASSWORD)],
        ws.dir.path(),
    );
    assert!(text.stdout.contains("would sign with key "), "{}", text.stdout);
    let dry = rebase(true);
    let report = rebase(false);
    let tag = ImageRef::parse(&format!("{host}/apps/web:latest")).unwrap();
    let index = client().head_manifest(&tag).await.unwrap().digest;
    assert_eq!(report["digest"], index.as_str());
    let platforms: Vec<String> =
        report["platforms"].as_array().unwrap().iter().map(|p| p["digest"].as_str().unwrap().to_string()).collect();
    let mut expected = vec![index.clone()];
    expected.extend(platforms.iter().cloned());
    assert_eq!(platforms.len(), 2);
    assert_eq!(report["signing"]["digests"], serde_json::json!(expected), "the index first, then each platform");
    assert_eq!(dry["signing"]["digests"], report["signing"]["digests"], "the dry run named what the rebase signed");
    for digest in report["signing"]["digests"].as_array().unwrap() {
        assert!(text.stdout.contains(digest.as_str().unwrap()), "the text names {digest}: {}", text.stdout);
    }
    let public_key = fixture(PUBLIC_KEY);
    for digest in &expected {
        assert_eq!(valid_signatures(&tag, digest, &public_key).await, 1, "{digest} signed");
        let att = format!("{}.att", digest.replace(':', "-"));
        assert!(client().get_manifest(&tag, &att).await.is_err(), "attest = false writes no {att}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_signs_the_digest_it_restores_when_our_key_has_not() {
    let world = World::new().await;
    let tag = world.tag();
    let before = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    assert_eq!(world.run_once().code, Some(0));
    let rebased = client().head_manifest(&tag).await.unwrap().digest;
    let unsigned = format!("{}.sig", before.replace(':', "-"));
    assert!(client().get_manifest(&tag, &unsigned).await.is_err(), "the app as built carries no signature");

    let config = world.config.to_str().unwrap();
    let env = [(PASSWORD_ENV, PASSWORD)];
    let back = support::daemon::run_with_env(&["rollback", "web", "--config", config], &env, world.ws.dir.path());
    assert_eq!(back.code, Some(0), "{}", back.stderr);
    assert!(back.stdout.contains(&format!("signed {}…", &before[.."sha256:".len() + 12])), "{}", back.stdout);
    assert_eq!(client().head_manifest(&tag).await.unwrap().digest, before);
    let public_key = fixture(PUBLIC_KEY);
    assert_eq!(valid_signatures(&tag, &before, &public_key).await, 1, "signed before the tag went back");
    let att = attached(&tag, &before, "att").await;
    let envelope: Value =
        serde_json::from_slice(&blob(&tag, att["layers"][0]["digest"].as_str().unwrap()).await).unwrap();
    let statement: Value =
        serde_json::from_slice(&STANDARD.decode(envelope["payload"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(statement["predicate"]["buildDefinition"]["buildType"], "urn:builder-monitor:rollback:v1");

    // Forward again to the digest we signed when rebasing: nothing more is signed.
    let args = ["rollback", "web", "--to", &rebased, "--config", config];
    let forward = support::daemon::run_with_env(&args, &env, world.ws.dir.path());
    assert_eq!(forward.code, Some(0), "{}", forward.stderr);
    assert!(!forward.stdout.contains("signed"), "{}", forward.stdout);
    assert_eq!(attached(&tag, &rebased, "sig").await["layers"].as_array().unwrap().len(), 1);
}

/// `[signing] builds`: what an exec runner's command pushed is signed by our key, unless a trusted
/// key signed it already (as kpack signs its builds). The command is `builder-monitor rebase`
/// itself, pushing a new digest: unsigned without a config, signed by another key with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_are_signed_unless_a_trusted_key_signed_them() {
    let dir = tempfile::tempdir().unwrap();
    support::keys::p256(dir.path(), "other.key");
    let other_pub = dir.path().join("other.key.pub");
    let builder_config = dir.path().join("builder.toml");
    std::fs::write(
        &builder_config,
        format!(
            "[[builders]]\nname = \"b\"\nimage = \"registry.example/b:1\"\n\n[signing]\nkey = \"{}\"\n",
            dir.path().join("other.key").display()
        ),
    )
    .unwrap();
    let public_key = fixture(PUBLIC_KEY);
    for signed_by_builder in [false, true] {
        let mut command =
            format!("[\"{}\", \"rebase\", \"{{image}}\", \"--run-image\", \"{{run_image}}\"", support::daemon::BINARY);
        if signed_by_builder {
            command.push_str(&format!(", \"--config\", \"{}\"", builder_config.display()));
        }
        let runner =
            format!("[runner]\ntype = \"exec\"\n\n[runner.exec]\nrebuild = [\"false\"]\nrebase = {command}]\n");
        let trusted = format!("builds = true\ntrusted_keys = [\"{}\"]\n", other_pub.display());
        let world = World::with(&runner, &trusted).await;
        let tag = world.tag();
        let before = client().head_manifest(&tag).await.unwrap().digest;
        world.move_run_image().await;
        let out = world.run_once();
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let built = client().head_manifest(&tag).await.unwrap().digest;
        assert_ne!(built, before, "the command pushed (signed by the builder: {signed_by_builder})");
        let layers = attached(&tag, &built, "sig").await["layers"].as_array().unwrap().len();
        let ours = valid_signatures(&tag, &built, &public_key).await;
        if signed_by_builder {
            assert_eq!((layers, ours), (1, 0), "a trusted key signed it: not signed twice");
        } else {
            assert_eq!((layers, ours), (1, 1), "signed by our key");
            let att = attached(&tag, &built, "att").await;
            assert_eq!(att["layers"].as_array().unwrap().len(), 1);
        }
        let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
        let actions = ledger.actions(10).await.unwrap();
        assert!(actions.iter().all(|a| a.state.as_str() == "succeeded"), "{actions:?}");
    }
}

/// A command that prints the signing key's file and the password (passed to it by `pass_env`) has
/// both scrubbed from what the ledger and `status` keep of its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_signing_key_and_password_never_reach_the_ledger_through_a_commands_output() {
    let key = fixture(KEY);
    let runner = format!(
        "[runner]\ntype = \"exec\"\nmax_attempts = 1\n\n[runner.exec]\nrebuild = [\"false\"]\n\
         rebase = [\"sh\", \"-c\", \"cat {key}; echo password: ${PASSWORD_ENV}; exit 1\"]\npass_env = [\"{PASSWORD_ENV}\"]\n"
    );
    let world = World::with(&runner, "").await;
    world.move_run_image().await;
    let out = world.run_once();
    assert_eq!(out.code, Some(1), "the action failed: {}", out.stderr);
    let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
    let actions = ledger.actions(10).await.unwrap();
    let tail = actions[0].output_tail.clone().unwrap_or_default();
    assert!(tail.contains("password: ***"), "the command ran and printed: {tail}");
    let status = support::daemon::run_with_env(
        &["status", "--json", "--config", world.config.to_str().unwrap()],
        &[],
        world.ws.dir.path(),
    );
    let pem = std::fs::read_to_string(&key).unwrap();
    let body_lines: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----") && l.len() >= 16).collect();
    assert!(!body_lines.is_empty());
    for text in [&tail, &status.stdout, &format!("{actions:?}")] {
        assert!(!text.contains(PASSWORD), "the password in {text}");
        for line in &body_lines {
            assert!(!text.contains(line), "a line of the key in {text}");
        }
    }
}

/// A registry that refuses the signature's write: the tag does not move, and the action fails
/// naming the registry's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_signature_write_leaves_the_tag_and_names_the_registrys_answer() {
    let runner = "[runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n";
    let world = World::with(runner, "").await;
    let tag = world.tag();
    let before = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    world.proxy.inject(support::proxy::Fault::status(403).on("PUT").at(".sig").code("DENIED"));
    let out = world.run_once();
    assert_eq!(out.code, Some(1), "the action failed: {}", out.stderr);
    assert_eq!(client().head_manifest(&tag).await.unwrap().digest, before, "the tag stayed");
    let ledger = Ledger::open_read_only(&world.ws.path("state.db")).unwrap();
    let action = &ledger.actions(10).await.unwrap()[0];
    let detail = action.detail.clone().unwrap_or_default();
    assert!(detail.contains("cannot sign") && detail.contains(".sig answered HTTP 403"), "{detail}");
    assert!(detail.contains("the tag was left alone"), "{detail}");
    assert!(ledger.tag_moves(None, 10).await.unwrap().is_empty(), "no move recorded");
}
