//! A `.sig` planted under the digest we are about to sign, in the real registry: one whose layer
//! blob was deleted, an index, one with 17 layers and one with 10,000 (over the 1 MiB we read), a
//! Docker v2 manifest. Each is replaced by a fresh OCI image manifest holding our layer and the
//! other signers' layers that still exist and a trusted key still verifies; each replacement is
//! reported with the planted manifest's digest; signing again changes nothing. And a signature
//! whose payload names another repository is no signature here.

use crate::support;

use bytes::Bytes;
use serde_json::{Value, json};

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::{Registry, sha256_digest};
use builder_monitor::signing::{Signed, Verdict, sign_keeping, verify};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::signing::{CONFIG_MEDIA_TYPE, Descriptor, Signer, signature_layer};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// An app digest in the real registry, our key, a trusted signer's (`ci`) and a stranger's.
struct Planted {
    test_registry: TestRegistry,
    registry: Registry,
    image: ImageRef,
    subject: Descriptor,
    repository: String,
    ours: Signer,
    ci: Signer,
    stranger: Signer,
    _keys: tempfile::TempDir,
}

impl Planted {
    async fn new() -> Self {
        let test_registry = TestRegistry::start();
        let host = test_registry.host.clone();
        let pushed = Pusher::new(&host).push_image("apps/web", Some("1"), &Image::new("amd64"), Format::Oci).await;
        builder_monitor::install_crypto_provider();
        let mut settings = RegistrySettings::defaults_for(&host);
        settings.requests_per_second = None;
        let registry = Registry::new([settings], Metrics::new());
        let keys = tempfile::tempdir().unwrap();
        let subject = Descriptor {
            media_type: pushed.media_type.clone(),
            size: pushed.size as u64,
            digest: pushed.digest.clone(),
            annotations: None,
            artifact_type: None,
        };
        Planted {
            image: ImageRef::parse(&format!("{host}/apps/web:1")).unwrap(),
            repository: format!("{host}/apps/web"),
            ours: support::keys::p256(keys.path(), "ours"),
            ci: support::keys::p256(keys.path(), "ci"),
            stranger: support::keys::p256(keys.path(), "stranger"),
            test_registry,
            registry,
            subject,
            _keys: keys,
        }
    }

    fn sig_tag(&self) -> String {
        format!("{}.sig", self.subject.digest.replace(':', "-"))
    }

    /// `signer`'s `.sig` layer for the subject, its payload pushed.
    async fn layer(&self, signer: &Signer) -> Value {
        self.layer_naming(signer, &self.repository).await
    }

    /// `signer`'s `.sig` layer for the subject whose payload names `repository`, pushed.
    async fn layer_naming(&self, signer: &Signer, repository: &str) -> Value {
        let (layer, payload) = signature_layer(signer, repository, &self.subject.digest).unwrap();
        self.registry.put_blob(&self.image, Bytes::from(payload)).await.unwrap();
        serde_json::to_value(layer).unwrap()
    }

    /// Puts `doc` under the `.sig` tag as `media_type`, its config `{}` pushed; answers its digest.
    async fn plant(&self, media_type: &str, mut doc: Value) -> String {
        self.registry.put_blob(&self.image, Bytes::from_static(b"{}")).await.unwrap();
        doc["schemaVersion"] = json!(2);
        doc["mediaType"] = json!(media_type);
        let bytes = Bytes::from(serde_json::to_vec(&doc).unwrap());
        self.registry.put_manifest(&self.image, &self.sig_tag(), media_type, bytes).await.unwrap()
    }

    fn config(media_type: &str) -> Value {
        json!({ "mediaType": media_type, "digest": sha256_digest(b"{}"), "size": 2 })
    }

    async fn sign(&self) -> Signed {
        let keep = [self.ours.verifier(), self.ci.verifier()];
        sign_keeping(&self.registry, &self.image, &self.subject, &self.ours, &keep, None, chrono::Utc::now())
            .await
            .expect("signed over the planted .sig")
    }

    /// The `.sig` as the registry serves it now.
    async fn sig(&self) -> (String, Value) {
        let manifest = self.registry.get_manifest(&self.image, &self.sig_tag()).await.unwrap();
        (manifest.media_type, serde_json::from_slice(&manifest.bytes).unwrap())
    }

    async fn signed_by(&self, signer: &Signer) -> bool {
        let key = builder_monitor::signing::TrustedKey { name: "k".into(), verifier: signer.verifier() };
        matches!(
            verify(&self.registry, &self.image, &self.subject.digest, &[key]).await.unwrap(),
            Verdict::Signed { .. }
        )
    }

    /// The fresh manifest: an OCI image manifest with an OCI config, `layers` layers, ours last;
    /// signing again replaces nothing and writes the same manifest.
    async fn assert_fresh(&self, signed: &Signed, planted: Option<&str>, why: &str, layers: usize) {
        assert_eq!(signed.replaced.len(), 1, "{signed:?}");
        let replaced = &signed.replaced[0];
        assert_eq!(replaced.tag, self.sig_tag());
        assert_eq!(replaced.digest.as_deref(), planted, "the planted object named: {replaced:?}");
        assert!(replaced.why.contains(why), "{replaced:?}");
        assert_eq!(replaced.carried, layers - 1, "{replaced:?}");
        let (media_type, sig) = self.sig().await;
        assert_eq!((media_type.as_str(), &sig["mediaType"]), (OCI_MANIFEST, &json!(OCI_MANIFEST)), "{sig}");
        assert_eq!(sig["config"]["mediaType"], CONFIG_MEDIA_TYPE, "{sig}");
        assert!(sig.get("manifests").is_none(), "{sig}");
        assert_eq!(sig["layers"].as_array().unwrap().len(), layers, "{sig}");
        assert!(self.signed_by(&self.ours).await, "our signature verifies");
        let again = self.sign().await;
        assert!(again.replaced.is_empty(), "{again:?}");
        assert_eq!(again.signature, signed.signature, "nothing written twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sig_whose_layer_blob_was_deleted_is_replaced_keeping_what_still_verifies() {
    let p = Planted::new().await;
    let (ci, stranger) = (p.layer(&p.ci).await, p.layer(&p.stranger).await);
    // A layer whose blob the planter deletes once the manifest is in.
    let ghost = json!({
        "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
        "digest": sha256_digest(b"gone"),
        "size": 4,
        "annotations": { "dev.cosignproject.cosign/signature": "MEUCIQDnotasignature" },
    });
    p.registry.put_blob(&p.image, Bytes::from_static(b"gone")).await.unwrap();
    let doc = json!({ "config": Planted::config(CONFIG_MEDIA_TYPE), "layers": [ci, stranger, ghost] });
    let planted = p.plant(OCI_MANIFEST, doc).await;
    let url = format!("{}/v2/apps/web/blobs/{}", p.test_registry.url(), sha256_digest(b"gone"));
    let deleted = support::http().delete(url).send().await.unwrap();
    assert_eq!(deleted.status(), 202, "the registry deletes the blob");

    let signed = p.sign().await;
    // The trusted signer's layer kept (first), the stranger's (no key we trust verifies it) and
    // the ghost dropped, ours added.
    p.assert_fresh(&signed, Some(&planted), "is not in the repository", 2).await;
    assert!(p.signed_by(&p.ci).await, "the trusted signer's signature still verifies");
    assert_eq!(p.sig().await.1["layers"][0], ci);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_under_the_sig_tag_is_replaced_by_an_image_manifest() {
    let p = Planted::new().await;
    let child = json!({ "mediaType": p.subject.media_type, "digest": p.subject.digest, "size": p.subject.size });
    let planted = p.plant(OCI_INDEX, json!({ "manifests": [child] })).await;
    let signed = p.sign().await;
    p.assert_fresh(&signed, Some(&planted), "image.index", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seventeen_or_ten_thousand_layers_are_replaced_within_bounds() {
    let p = Planted::new().await;
    let ci = p.layer(&p.ci).await;
    let planted = p
        .plant(OCI_MANIFEST, json!({ "config": Planted::config(CONFIG_MEDIA_TYPE), "layers": vec![ci.clone(); 17] }))
        .await;
    let signed = p.sign().await;
    // The 17 copies are one signature: carried once.
    p.assert_fresh(&signed, Some(&planted), "17 layers", 2).await;

    // 10,000 layers (about 1.6 MB): over what is read, so nothing of it is carried.
    let doc = json!({ "config": Planted::config(CONFIG_MEDIA_TYPE), "layers": vec![ci; 10_000] });
    assert!(serde_json::to_vec(&doc).unwrap().len() > 1 << 20);
    p.plant(OCI_MANIFEST, doc).await;
    let signed = p.sign().await;
    p.assert_fresh(&signed, None, "", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_v2_sig_gets_a_fresh_oci_manifest_not_our_layer_under_a_docker_type() {
    let p = Planted::new().await;
    let ci = p.layer(&p.ci).await;
    let doc = json!({ "config": Planted::config("application/vnd.docker.container.image.v1+json"), "layers": [ci] });
    let planted = p.plant(DOCKER_MANIFEST, doc).await;
    let signed = p.sign().await;
    p.assert_fresh(&signed, Some(&planted), "docker", 2).await;
    assert!(p.signed_by(&p.ci).await, "the trusted signer's signature carried over");
}

/// The digest is the same in every repository it was pushed to: a trusted key's signature made for
/// `apps/other` (its payload's `docker-reference`), copied under this repository's `.sig`, does not
/// make the digest signed here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_naming_another_repository_is_not_a_signature_here() {
    let p = Planted::new().await;
    let elsewhere = p.layer_naming(&p.ci, &p.repository.replace("apps/web", "apps/other")).await;
    p.plant(OCI_MANIFEST, json!({ "config": Planted::config(CONFIG_MEDIA_TYPE), "layers": [elsewhere] })).await;
    assert!(!p.signed_by(&p.ci).await, "signed for apps/other only");
    let here = p.layer(&p.ci).await;
    p.plant(OCI_MANIFEST, json!({ "config": Planted::config(CONFIG_MEDIA_TYPE), "layers": [here] })).await;
    assert!(p.signed_by(&p.ci).await, "the same key's signature for this repository counts");
}
