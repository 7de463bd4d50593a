//! The registry writes a rebase is made of, one by one: push tokens, a mount within a registry,
//! manifest PUTs, and a copy between registries streamed, verified and refused at a wrong size.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_with_push_tokens_mount_within_a_registry_and_put_manifests() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: tokens.realm.clone() });
    let host = registry.host.clone();
    let pusher = Pusher::with_basic(&host, "testuser", "testpass");
    let run = RunImage::jammy("v1", 2);
    app::push_run(&pusher, "run", Some("v1"), &run, Format::Oci).await;

    let mut s = settings(&host);
    s.credentials = Credentials::Basic {
        username: "testuser".into(),
        password: Secret::new("testpass"),
        source: CredentialSource::Env("TEST".into()),
    };
    builder_monitor::install_crypto_provider();
    let writer = Registry::new([s], Metrics::new());
    let target = image(&format!("{host}/apps/web:1"));
    let source = image(&format!("{host}/run:v1"));
    let layer = &run.layers[0];

    assert!(!writer.blob_exists(&target, &layer.digest).await.unwrap());
    let size = layer.blob.len() as u64;
    assert_eq!(writer.ensure_blob(&target, &source, &layer.digest, size).await.unwrap(), BlobTransfer::Mounted);
    // Once mounted, known to be there: no request (one writer per blob and repository).
    assert_eq!(writer.ensure_blob(&target, &source, &layer.digest, size).await.unwrap(), BlobTransfer::Present);
    // Forgotten, it is mounted again with no HEAD before: the registry's 201 says "there" for a
    // blob it had as well.
    writer.forget_written(&target, &layer.digest).await;
    assert_eq!(writer.ensure_blob(&target, &source, &layer.digest, size).await.unwrap(), BlobTransfer::Mounted);
    assert!(writer.blob_exists(&target, &layer.digest).await.unwrap());

    let config =
        Bytes::from_static(br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#);
    let config_digest = sha256(&config);
    assert_eq!(
        writer.put_blob(&target, config.clone()).await.unwrap(),
        BlobTransfer::Copied { bytes: config.len() as u64 }
    );
    // Known to be there: not uploaded again.
    assert_eq!(writer.put_blob(&target, config.clone()).await.unwrap(), BlobTransfer::Present);
    // Forgotten, uploaded again with no HEAD first: the same bytes, harmlessly.
    writer.forget_written(&target, &config_digest).await;
    assert_eq!(
        writer.put_blob(&target, config.clone()).await.unwrap(),
        BlobTransfer::Copied { bytes: config.len() as u64 }
    );
    assert_eq!(writer.get_blob(&target, &config_digest, 1 << 20).await.unwrap(), config);

    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer.digest, "size": size}],
    }))
    .unwrap();
    let digest = sha256(&manifest);
    let media_type = "application/vnd.oci.image.manifest.v1+json";
    assert_eq!(writer.put_manifest(&target, &digest, media_type, manifest.clone().into()).await.unwrap(), digest);
    assert_eq!(writer.put_manifest(&target, "1", media_type, manifest.clone().into()).await.unwrap(), digest);
    assert_eq!(writer.head_manifest(&target).await.unwrap().digest, digest);
    // A digest that is not the bytes' is refused before anything is sent.
    let other = sha256(b"other");
    let err = writer.put_manifest(&target, &other, media_type, manifest.into()).await.unwrap_err();
    assert!(err.to_string().contains("cannot be put under"), "{err}");

    // Anonymous: the token server grants pull only, so every write is refused.
    let anonymous = client(&[&host]);
    let err = anonymous.put_blob(&image(&format!("{host}/apps/web:1")), Bytes::from_static(b"{}")).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_between_registries_stream_verified_and_refuse_a_wrong_size() {
    let a = TestRegistry::start();
    let b = TestRegistry::start();
    let run = RunImage::jammy("v1", 2);
    app::push_run(&Pusher::new(&a.host), "run", Some("v1"), &run, Format::Oci).await;
    let registry = client(&[&a.host, &b.host]);
    let target = image(&format!("{}/apps/web:1", b.host));
    let source = image(&format!("{}/run:v1", a.host));

    let layer = &run.layers[1];
    let err = registry.ensure_blob(&target, &source, &layer.digest, layer.blob.len() as u64 - 1).await.unwrap_err();
    assert!(err.to_string().contains("its manifest says"), "{err}");
    assert!(!registry.blob_exists(&target, &layer.digest).await.unwrap(), "nothing completed after a refused copy");

    let size = layer.blob.len() as u64;
    let copied = registry.ensure_blob(&target, &source, &layer.digest, size).await.unwrap();
    assert_eq!(copied, BlobTransfer::Copied { bytes: size });
    let fetched = registry.get_blob(&target, &layer.digest, 1 << 20).await.unwrap();
    assert_eq!(fetched.as_ref(), layer.blob.as_slice());
    assert_eq!(registry.ensure_blob(&target, &source, &layer.digest, size).await.unwrap(), BlobTransfer::Present);
}
