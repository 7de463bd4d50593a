//! What the daemon signs, checked by the verifiers clusters run (issue 63): cosign v2.6.5, cosign
//! v3.1.3 at its defaults (the bundle referrers) and v3.1.3 with `--new-bundle-format=false` (the
//! `.sig`/`.att` tags, Kyverno's default path) each accept `verify` and `verify-attestation --type
//! slsaprovenance1` of every digest written by a registry rebase (one platform, and a multi-arch
//! index with each platform), a rollback and an exec runner's build, with the public key and no
//! transparency log; and refuse a digest we did not sign, another key, and the tag once it moved to
//! an unsigned digest. `crane validate` passes on every image, index, referrer manifest and
//! referrers index written (`--fast` on the `.sig`/`.att` manifests). All of it on both registries:
//! Distribution 2.8 (no referrers API: the tag schema) and one with the referrers API.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::signing::{KEY, PASSWORD, PASSWORD_ENV, PUBLIC_KEY, World, client, fixture};
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cosign::{ALL, Verifier};
use support::images::{Format, Image, Pusher};
use support::referrers_registry::{Kind, Served};

const SLSA: &str = "slsaprovenance1";

/// Every cosign way accepts `reference`'s signature and provenance with `key`.
pub(super) fn accepted(verifier: &Verifier, reference: &str, key: &Path) {
    for which in ALL {
        let said = verifier.verify(which, reference, key);
        assert!(said.ok, "cosign {which:?} verify {reference} refused it: {}", said.text);
        let said = verifier.verify_attestation(which, reference, key, SLSA);
        assert!(said.ok, "cosign {which:?} verify-attestation {reference} refused it: {}", said.text);
    }
}

/// Every cosign way refuses `reference` with `key`, both commands.
pub(super) fn refused(verifier: &Verifier, reference: &str, key: &Path, why: &str) {
    for which in ALL {
        let said = verifier.verify(which, reference, key);
        assert!(!said.ok, "cosign {which:?} verify accepted {reference} ({why}): {}", said.text);
        let said = verifier.verify_attestation(which, reference, key, SLSA);
        assert!(!said.ok, "cosign {which:?} verify-attestation accepted {reference} ({why}): {}", said.text);
    }
}

/// The referrer manifests of `digest` in `repository`: from the referrers API where the registry
/// has one, else from the referrers tag schema's index; and the index's tag when that was read.
pub(super) async fn referrers(host: &str, repository: &str, digest: &str) -> (Vec<Value>, Option<String>) {
    let http = support::http();
    let api = http.get(format!("http://{host}/v2/{repository}/referrers/{digest}")).send().await.unwrap();
    let (index, tag) = if api.status().is_success() {
        (api.json::<Value>().await.unwrap(), None)
    } else {
        let tag = digest.replace(':', "-");
        let index = client().get_manifest(&ImageRef::parse(&format!("{host}/{repository}")).unwrap(), &tag).await;
        (serde_json::from_slice(&index.unwrap().bytes).unwrap(), Some(tag))
    };
    (index["manifests"].as_array().cloned().unwrap_or_default(), tag)
}

/// Checks everything written for `digest` (signed and attested by our key) in `host/apps/web`:
/// cosign's three ways accept it; both bundles are listed once; crane validates the image, the
/// referrers, the referrers index and (fast) the `.sig`/`.att` manifests.
async fn written_and_verified(verifier: &Verifier, kind: Kind, host: &str, digest: &str) {
    let reference = format!("{host}/apps/web@{digest}");
    accepted(verifier, &reference, Path::new(&fixture(PUBLIC_KEY)));
    let (listed, index_tag) = referrers(host, "apps/web", digest).await;
    // By the bundle annotations: go-containerregistry's listing gives the config's media type as
    // `artifactType`, not the manifest's.
    // Sorted: the referrers API lists in no set order.
    let mut predicates: Vec<&str> = listed
        .iter()
        .filter(|m| m["annotations"]["dev.sigstore.bundle.content"] == "dsse-envelope")
        .filter_map(|m| m["annotations"]["dev.sigstore.bundle.predicateType"].as_str())
        .collect();
    predicates.sort_unstable();
    assert_eq!(
        predicates,
        ["https://sigstore.dev/cosign/sign/v1", "https://slsa.dev/provenance/v1"],
        "the signature's bundle and the attestation's, once each: {listed:?}"
    );
    assert_eq!(index_tag.is_some(), kind == Kind::Distribution, "the tag schema only without the referrers API");
    let mut full = vec![reference.clone()];
    full.extend(listed.iter().map(|m| format!("{host}/apps/web@{}", m["digest"].as_str().unwrap())));
    full.extend(index_tag.map(|tag| format!("{host}/apps/web:{tag}")));
    for target in &full {
        let said = verifier.crane_validate(target, false);
        assert!(said.ok, "crane validate {target}: {}", said.text);
    }
    for suffix in ["sig", "att"] {
        let target = format!("{host}/apps/web:{}.{suffix}", digest.replace(':', "-"));
        let said = verifier.crane_validate(&target, true);
        assert!(said.ok, "crane validate --fast {target}: {}", said.text);
    }
}

/// A key of our own making that signed nothing here.
pub(super) fn stranger(dir: &Path) -> PathBuf {
    support::keys::p256(dir, "stranger");
    dir.join("stranger.pub")
}

async fn a_rebase_and_a_rollback_verify_with_cosign(kind: Kind) {
    let verifier = Verifier::new();
    let world = World::on(kind, "[runner]\ntype = \"none\"\nrebase = \"registry\"\n", "").await;
    let host = world.host.clone();
    let tag = world.tag();
    let before = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let rebased = client().head_manifest(&tag).await.unwrap().digest;
    assert_ne!(rebased, before);
    written_and_verified(&verifier, kind, &host, &rebased).await;
    let key = PathBuf::from(fixture(PUBLIC_KEY));
    refused(&verifier, &format!("{host}/apps/web@{before}"), &key, "a digest we did not sign");
    let other = tempfile::tempdir().unwrap();
    refused(&verifier, &format!("{host}/apps/web@{rebased}"), &stranger(other.path()), "another key");
    accepted(&verifier, &format!("{host}/apps/web:latest"), &key);

    // Rolled back to the app as built: signed and attested before the tag goes back.
    let config = world.config.to_str().unwrap();
    let back = support::daemon::run_with_env(
        &["rollback", "web", "--config", config],
        &[(PASSWORD_ENV, PASSWORD)],
        world.ws.dir.path(),
    );
    assert_eq!(back.code, Some(0), "{}", back.stderr);
    assert_eq!(client().head_manifest(&tag).await.unwrap().digest, before);
    written_and_verified(&verifier, kind, &host, &before).await;

    // The tag moved (by someone else) to a digest no one signed: refused through the tag.
    Pusher::new(&host).push_image("apps/web", Some("latest"), &Image::new("amd64").salt("unsigned"), Format::Oci).await;
    refused(&verifier, &format!("{host}/apps/web:latest"), &key, "the tag moved to an unsigned digest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_and_a_rollback_verify_with_cosign_on_distribution() {
    a_rebase_and_a_rollback_verify_with_cosign(Kind::Distribution).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_and_a_rollback_verify_with_cosign_on_a_registry_with_the_referrers_api() {
    a_rebase_and_a_rollback_verify_with_cosign(Kind::Referrers).await;
}

async fn a_multi_arch_rebase_verifies_with_cosign(kind: Kind) {
    let verifier = Verifier::new();
    let registry = Served::start(kind);
    let host = registry.host().to_string();
    let pusher = Pusher::new(&host);
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
    let ws = support::daemon::Workspace::new();
    let config = ws.config(&format!(
        "[[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [signing]\nkey = \"{}\"\npassword_env = \"{PASSWORD_ENV}\"\n",
        fixture(KEY)
    ));
    let image = format!("{host}/apps/web:latest");
    let args = ["rebase", "--json", "--run-image", &run_tag, "--config", config.to_str().unwrap(), &image];
    let out = support::daemon::run_with_env(&args, &[(PASSWORD_ENV, PASSWORD)], ws.dir.path());
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let digests = report["signing"]["digests"].as_array().unwrap();
    assert_eq!(digests.len(), 3, "the index and its two platforms: {report}");
    for digest in digests {
        written_and_verified(&verifier, kind, &host, digest.as_str().unwrap()).await;
    }
    for app in &apps {
        let unsigned = format!("{host}/apps/web@{}", app.digest);
        refused(&verifier, &unsigned, Path::new(&fixture(PUBLIC_KEY)), "a platform as built");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_arch_rebase_verifies_with_cosign_on_distribution() {
    a_multi_arch_rebase_verifies_with_cosign(Kind::Distribution).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_arch_rebase_verifies_with_cosign_on_a_registry_with_the_referrers_api() {
    a_multi_arch_rebase_verifies_with_cosign(Kind::Referrers).await;
}

/// `[signing] builds = true`: what an exec runner's command pushed (here `builder-monitor rebase`
/// without a key, an unsigned new digest) is signed and attested by the daemon.
async fn a_build_verifies_with_cosign(kind: Kind) {
    let verifier = Verifier::new();
    let command =
        format!("[\"{}\", \"rebase\", \"{{image}}\", \"--run-image\", \"{{run_image}}\"]", support::daemon::BINARY);
    let runner = format!("[runner]\ntype = \"exec\"\n\n[runner.exec]\nrebuild = [\"false\"]\nrebase = {command}\n");
    let world = World::on(kind, &runner, "builds = true\n").await;
    let tag = world.tag();
    let before = client().head_manifest(&tag).await.unwrap().digest;
    world.move_run_image().await;
    let out = world.run_once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let built = client().head_manifest(&tag).await.unwrap().digest;
    assert_ne!(built, before, "the command pushed");
    written_and_verified(&verifier, kind, &world.host, &built).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_verifies_with_cosign_on_distribution() {
    a_build_verifies_with_cosign(Kind::Distribution).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_verifies_with_cosign_on_a_registry_with_the_referrers_api() {
    a_build_verifies_with_cosign(Kind::Referrers).await;
}
