//! The Sigstore bundle form of a signature, written to the real registry as an OCI 1.1 referrer
//! (Distribution 2.8 has no referrers API: the `sha256-<hex>` tag index) and read back and
//! verified by Sigstore's own JavaScript verifier (`@sigstore/verify`, installed by `scripts/test`
//! into `SIGSTORE_VERIFY`) with the public key and no transparency log; a retry lists nothing
//! twice; other referrers are kept; a hostile index is refused within bounds.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor::signing::bundle::{BundleError, write_bundle_referrer};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{BUNDLE_MEDIA_TYPE, Descriptor, IndexError, MAX_REFERRERS, Signer};
use support::images::{Format, Image, Pushed, Pusher};
use support::registry::TestRegistry;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A fresh P-256 key made by openssl: the signer and the public key's PEM file.
fn key(dir: &Path) -> (Signer, PathBuf) {
    let private = dir.join("cosign.key");
    let public = dir.join("cosign.pub");
    let made = Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&private)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let signer = Signer::from_pem(&std::fs::read(&private).unwrap(), None).unwrap();
    std::fs::write(&public, signer.public_key_pem()).unwrap();
    (signer, public)
}

fn client(host: &str) -> Registry {
    builder_monitor::install_crypto_provider();
    let mut settings = RegistrySettings::defaults_for(host);
    settings.requests_per_second = None;
    Registry::new([settings], Metrics::new())
}

fn subject(pushed: &Pushed) -> Descriptor {
    Descriptor {
        media_type: pushed.media_type.clone(),
        size: pushed.size as u64,
        digest: pushed.digest.clone(),
        annotations: None,
        artifact_type: None,
    }
}

/// Runs the verifier script against the registry: its one line of output, and whether it passed.
fn verify(registry: &TestRegistry, subject: &str, key: &Path, expected: &str, forge: bool) -> (bool, String) {
    support::sigstore::verify(&registry.url(), "apps/web", subject, key, expected, forge)
}

async fn index(registry: &Registry, image: &ImageRef, digest: &str) -> Value {
    let tag = digest.replace(':', "-");
    serde_json::from_slice(&registry.get_manifest(image, &tag).await.unwrap().bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundle_referrer_is_found_through_the_tag_index_and_sigstores_verifier_accepts_it() {
    let verifier = support::sigstore::installed();
    let test_registry = TestRegistry::start();
    let host = test_registry.host.clone();
    let pushed = Pusher::new(&host).push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
    let other = Pusher::new(&host).push_image("apps/web", Some("2"), &Image::new("amd64").salt("b"), Format::Oci).await;
    let dir = tempfile::tempdir().unwrap();
    let (signer, public) = key(dir.path());
    let registry = client(&host);
    let image = ImageRef::parse(&format!("{host}/apps/web")).unwrap();
    let created = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();

    let digest = write_bundle_referrer(&registry, &image, &subject(&pushed), &signer, created).await.unwrap();

    let listed = index(&registry, &image, &pushed.digest).await;
    assert_eq!(listed["mediaType"], OCI_INDEX);
    assert_eq!(listed["manifests"][0]["digest"], digest.as_str());
    assert_eq!(listed["manifests"][0]["artifactType"], BUNDLE_MEDIA_TYPE);
    assert_eq!(
        listed["manifests"][0]["annotations"]["dev.sigstore.bundle.predicateType"],
        "https://sigstore.dev/cosign/sign/v1"
    );

    let (ok, said) = verify(&test_registry, &pushed.digest, &public, &pushed.digest, false);
    assert!(ok, "Sigstore's verifier (from {}) refused our bundle: {said}", verifier.display());
    assert_eq!(serde_json::from_str::<Value>(&said).unwrap(), json!({"referrers": 1, "verified": 1, "entries": 1}));

    // The signature binds this digest: for another image it is no signature...
    let (ok, said) = verify(&test_registry, &pushed.digest, &public, &other.digest, false);
    assert!(!ok, "{said}");
    assert!(said.contains(&format!("not {}", other.digest)), "{said}");
    // ...and a statement rewritten to name the other digest fails the signature check itself.
    let (ok, said) = verify(&test_registry, &pushed.digest, &public, &other.digest, true);
    assert!(!ok, "{said}");
    assert!(said.contains("signature verification failed"), "{said}");
    // Another key does not verify it.
    let other_dir = tempfile::tempdir().unwrap();
    let (_, stranger) = key(other_dir.path());
    let (ok, said) = verify(&test_registry, &pushed.digest, &stranger, &pushed.digest, false);
    assert!(!ok, "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_lists_no_second_referrer_and_other_referrers_are_kept() {
    let test_registry = TestRegistry::start();
    let host = test_registry.host.clone();
    let pusher = Pusher::new(&host);
    let pushed = pusher.push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
    let dir = tempfile::tempdir().unwrap();
    let (signer, public) = key(dir.path());
    let registry = client(&host);
    let image = ImageRef::parse(&format!("{host}/apps/web")).unwrap();
    let created = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();

    // Another tool's referrer (an SBOM) is listed already.
    let empty = b"{}".to_vec();
    let sbom = b"{\"spdxVersion\":\"SPDX-2.3\"}".to_vec();
    let foreign = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": "application/spdx+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": support::images::sha256(&empty), "size": 2},
        "layers": [{"mediaType": "application/spdx+json", "digest": support::images::sha256(&sbom), "size": sbom.len()}],
        "subject": {"mediaType": pushed.media_type, "digest": pushed.digest, "size": pushed.size},
    }))
    .unwrap();
    let foreign_digest = support::images::sha256(&foreign);
    pusher.push_raw("apps/web", &foreign_digest, vec![empty, sbom], foreign.clone(), OCI_MANIFEST).await;
    let foreign_entry = json!({
        "mediaType": OCI_MANIFEST, "digest": foreign_digest, "size": foreign.len(), "artifactType": "application/spdx+json",
    });
    let tag = pushed.digest.replace(':', "-");
    let listing = json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [foreign_entry]});
    registry.put_manifest(&image, &tag, OCI_INDEX, Bytes::from(serde_json::to_vec(&listing).unwrap())).await.unwrap();

    let first = write_bundle_referrer(&registry, &image, &subject(&pushed), &signer, created).await.unwrap();
    // A retry (a fresh client, as after a restart) writes the same manifest and lists nothing new.
    let again = write_bundle_referrer(&client(&host), &image, &subject(&pushed), &signer, created).await.unwrap();
    assert_eq!(first, again);

    let listed = index(&registry, &image, &pushed.digest).await;
    let manifests = listed["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2, "{listed}");
    assert_eq!(manifests[0], foreign_entry);
    assert_eq!(manifests[1]["digest"], first.as_str());
    let (ok, said) = verify(&test_registry, &pushed.digest, &public, &pushed.digest, false);
    assert!(ok, "{said}");
    assert_eq!(serde_json::from_str::<Value>(&said).unwrap(), json!({"referrers": 1, "verified": 1, "entries": 2}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_referrers_index_is_refused_within_bounds_and_left_alone() {
    let test_registry = TestRegistry::start();
    let host = test_registry.host.clone();
    let pushed = Pusher::new(&host).push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
    let dir = tempfile::tempdir().unwrap();
    let (signer, _) = key(dir.path());
    let registry = client(&host);
    let image = ImageRef::parse(&format!("{host}/apps/web")).unwrap();
    let created = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
    let tag = pushed.digest.replace(':', "-");
    let entry = json!({"mediaType": OCI_MANIFEST, "digest": pushed.digest, "size": 1, "artifactType": "x/y"});

    let crowded =
        json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": vec![entry.clone(); MAX_REFERRERS + 1]});
    registry.put_manifest(&image, &tag, OCI_INDEX, Bytes::from(serde_json::to_vec(&crowded).unwrap())).await.unwrap();
    let error = write_bundle_referrer(&registry, &image, &subject(&pushed), &signer, created).await.unwrap_err();
    assert!(matches!(error, BundleError::Index { source: IndexError::TooMany(_), .. }), "{error}");
    assert!(error.to_string().contains("delete stale referrers"), "{error}");

    let padding = "x".repeat(1 << 20);
    let huge =
        json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry], "annotations": {"pad": padding}});
    registry.put_manifest(&image, &tag, OCI_INDEX, Bytes::from(serde_json::to_vec(&huge).unwrap())).await.unwrap();
    let error = write_bundle_referrer(&registry, &image, &subject(&pushed), &signer, created).await.unwrap_err();
    assert!(error.to_string().contains("1048576-byte limit"), "{error}");
    assert!(error.to_string().contains("read the referrers tag index"), "{error}");
    // Left as it was: still the huge index, not ours.
    let kept = registry.get_manifest(&image, &tag).await.unwrap();
    assert!(kept.bytes.len() > 1 << 20);
}

/// On a registry with the referrers API, the bundle is listed by the registry itself: no
/// referrers tag is written, and the registry is asked whether it has the API once, not once per
/// signature (a fleet's signatures would pay a request each). On Distribution 2.8 the answer is
/// "no", remembered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_referrers_api_is_asked_for_once_per_registry_and_used_where_served() {
    let served = support::referrers_registry::ReferrersRegistry::start();
    // Relative upload locations: uploads through the proxy stay on it.
    let distribution = TestRegistry::start_relative(support::registry::Auth::Anonymous);
    let dir = tempfile::tempdir().unwrap();
    let (signer, _) = key(dir.path());
    let created = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
    for (upstream, has_api) in [(&served.host, true), (&distribution.host, false)] {
        let proxy = support::proxy::Proxy::start(upstream).await;
        let pusher = Pusher::new(&proxy.host);
        let one = pusher.push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
        let two = pusher.push_image("apps/web", Some("2"), &Image::new("amd64").salt("b"), Format::Oci).await;
        let registry = client(&proxy.host);
        assert_eq!(registry.referrers_api(&proxy.host), None, "not asked yet");
        let image = ImageRef::parse(&format!("{}/apps/web", proxy.host)).unwrap();
        proxy.clear();
        for pushed in [&one, &two] {
            write_bundle_referrer(&registry, &image, &subject(pushed), &signer, created).await.unwrap();
        }
        let seen = proxy.seen();
        let asked = seen.iter().filter(|s| s.method == "GET" && s.path.contains("/referrers/")).count();
        assert_eq!(asked, 1, "asked once for two signatures on {upstream}");
        let tags = seen.iter().filter(|s| s.method == "PUT" && s.path.contains("/manifests/sha256-")).count();
        assert_eq!(tags, if has_api { 0 } else { 2 }, "the referrers tag only without the API");
        assert_eq!(registry.referrers_api(&proxy.host), Some(has_api));
    }
}
