//! Registry rebases against the real registry: the writes (HEAD, mount, streamed copy, uploads,
//! manifest PUTs with push tokens), then whole rebases of layered CNB app images: the result layer
//! by layer and label by label, an index, every refusal, two registries, an injected failure.

use crate::support;

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use builder_monitor::config::{CredentialSource, Credentials, RegistrySettings, Secret};
use builder_monitor::metrics::Metrics;
use builder_monitor::rebase::{RebaseError, RebaseReport, RebaseRequest, Unguarded, rebase};
use builder_monitor::registry::{BlobTransfer, Registry, RegistryError};
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, PushedImage, RunImage};
use support::daemon::{Workspace, run_with_env};
use support::images::{Format, Pusher, sha256};
use support::proxy::{Fault, Proxy};
use support::registry::{Auth, TestRegistry};
use support::token::TokenServer;

mod writes;

fn settings(host: &str) -> RegistrySettings {
    let mut s = RegistrySettings::defaults_for(host);
    s.requests_per_second = None;
    s.max_attempts = 2;
    s.backoff = Duration::from_millis(20);
    s
}

fn client(hosts: &[&str]) -> Registry {
    builder_monitor::install_crypto_provider();
    Registry::new(hosts.iter().map(|h| settings(h)), Metrics::new())
}

fn image(text: &str) -> ImageRef {
    ImageRef::parse(text).unwrap()
}

async fn tag_digest(registry: &Registry, reference: &str) -> String {
    registry.head_manifest(&image(reference)).await.unwrap().digest
}

/// The manifest and config (as JSON) a reference points at; the config fetched digest-verified.
async fn manifest_and_config(registry: &Registry, reference: &str) -> (Value, Value) {
    let image = image(reference);
    let manifest = registry.get_manifest(&image, image.manifest_reference()).await.unwrap();
    let manifest: Value = serde_json::from_slice(&manifest.bytes).unwrap();
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let config = registry.get_blob(&image, config_digest, 8 << 20).await.unwrap();
    (manifest, serde_json::from_slice(&config).unwrap())
}

fn layer_digests(manifest: &Value) -> Vec<String> {
    manifest["layers"].as_array().unwrap().iter().map(|l| l["digest"].as_str().unwrap().to_string()).collect()
}

/// Requests that write (anything but GET and HEAD) seen by the proxy.
fn writes(proxy: &Proxy) -> Vec<String> {
    proxy
        .seen()
        .into_iter()
        .filter(|s| s.method != "GET" && s.method != "HEAD")
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

fn request(app: &str, run: &str) -> RebaseRequest {
    RebaseRequest {
        image: image(app),
        run_image: image(run),
        force: false,
        dry_run: false,
        known_run_images: Vec::new(),
        sign: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Whole rebases

/// A registry behind a counting proxy, run image v1 under `run:latest` and an app built on it under
/// `apps/web:1`; everything named through the proxy.
struct Scene {
    _registry: TestRegistry,
    proxy: Proxy,
    host: String,
    registry: Registry,
    app: App,
    app_pushed: PushedImage,
}

impl Scene {
    async fn new(app: impl FnOnce(App) -> App) -> Self {
        let registry = TestRegistry::start_relative(Auth::Anonymous);
        let proxy = Proxy::start(&registry.host).await;
        let host = proxy.host.clone();
        let pusher = Pusher::new(&host);
        let v1 = RunImage::jammy("v1", 2);
        let v1_pushed = app::push_run(&pusher, "run", Some("latest"), &v1, Format::Oci).await;
        let built = app(App::on(&v1, &format!("{host}/run:latest"), &format!("{host}/run@{}", v1_pushed.digest)));
        let app_pushed = app::push_app(&pusher, "apps/web", Some("1"), &built, Format::Oci).await;
        let client = client(&[&host]);
        Scene { _registry: registry, proxy, host, registry: client, app: built, app_pushed }
    }

    async fn push_run(&self, repo_tag: &str, run: &RunImage) -> PushedImage {
        let (repo, tag) = repo_tag.split_once(':').unwrap();
        app::push_run(&Pusher::new(&self.host), repo, Some(tag), run, Format::Oci).await
    }

    fn app_ref(&self) -> String {
        format!("{}/apps/web:1", self.host)
    }

    async fn rebase(&self, run: &str, force: bool, dry_run: bool) -> Result<RebaseReport, RebaseError> {
        let mut request = request(&self.app_ref(), &format!("{}/{run}", self.host));
        request.force = force;
        request.dry_run = dry_run;
        rebase(&self.registry, &request, &Unguarded).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebase_replaces_the_run_image_layers_keeps_the_rest_and_moves_the_tag_last() {
    let scene = Scene::new(|a| a).await;
    let host = &scene.host;
    let v2 = RunImage::jammy("v2", 3);
    let v2_pushed = scene.push_run("run:latest", &v2).await;
    let (old_manifest, old_config) = manifest_and_config(&scene.registry, &scene.app_ref()).await;

    // A dry run decides and counts, and writes nothing.
    scene.proxy.clear();
    let dry = scene.rebase("run:latest", false, true).await.unwrap();
    assert_eq!(writes(&scene.proxy), Vec::<String>::new());
    assert_eq!(dry.digest, None);
    assert_eq!((dry.blobs.present, dry.blobs.mounted, dry.blobs.copied), (0, 3, 0));
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, scene.app_pushed.digest);

    scene.proxy.clear();
    let report = scene.rebase("run:latest", false, false).await.unwrap();
    let new_digest = tag_digest(&scene.registry, &scene.app_ref()).await;
    assert_eq!(report.previous, scene.app_pushed.digest);
    assert_eq!(report.digest.as_deref(), Some(new_digest.as_str()));
    assert_ne!(new_digest, scene.app_pushed.digest);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json,
        json!({
            "image": scene.app_ref(), "previous": scene.app_pushed.digest, "digest": new_digest,
            "reference": format!("{host}/run@{}", v2_pushed.digest),
            "platforms": [{"platform": "linux/amd64", "previous": scene.app_pushed.digest, "digest": new_digest,
                           "base_layers": {"from": 2, "to": 3}, "app_layers": 4}],
            "blobs": {"present": 0, "mounted": 3, "copied": 0, "bytes_copied": 0},
        })
    );

    // No layer byte moved: three mounts, one config upload, then the tag's PUT, which stores the
    // manifest (nothing signed names it by digest first).
    let log = writes(&scene.proxy);
    assert_eq!(log.iter().filter(|w| w.starts_with("POST") && w.contains("mount=")).count(), 3, "{log:#?}");
    assert_eq!(log.iter().filter(|w| w.starts_with("PATCH")).count(), 0, "{log:#?}");
    let puts: Vec<&String> = log.iter().filter(|w| w.starts_with("PUT")).collect();
    assert_eq!(puts.len(), 2, "{log:#?}");
    assert!(puts[0].contains("/blobs/uploads/"), "{puts:?}");
    assert!(puts[1].ends_with("/manifests/1"), "the tag moves last: {puts:?}");
    assert_eq!(
        tag_digest(&scene.registry, &format!("{host}/apps/web@{new_digest}")).await,
        new_digest,
        "stored by the tag's PUT"
    );

    // The layers: v2's, then the app's, media types kept; every blob fetchable from the app repo.
    let (manifest, config) = manifest_and_config(&scene.registry, &scene.app_ref()).await;
    let expected_layers: Vec<String> = v2.layers.iter().chain(&scene.app.layers).map(|l| l.digest.clone()).collect();
    assert_eq!(layer_digests(&manifest), expected_layers);
    assert_eq!(manifest["mediaType"], old_manifest["mediaType"]);
    assert_eq!(manifest["annotations"], old_manifest["annotations"]);
    for layer in manifest["layers"].as_array().unwrap() {
        assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
        let digest = layer["digest"].as_str().unwrap();
        scene.registry.get_blob(&image(&scene.app_ref()), digest, 1 << 20).await.unwrap();
    }

    // The config, expected by hand from the rules: v2's diffIDs and history, then the app's upper
    // ones; stack.* and base.* labels from v2; topLayer and reference to v2; nothing else changed.
    let mut expected = old_config.clone();
    let app_diff_ids: Vec<String> = scene.app.layers.iter().map(|l| l.diff_id.clone()).collect();
    expected["rootfs"]["diff_ids"] =
        json!(v2.layers.iter().map(|l| &l.diff_id).chain(&app_diff_ids).collect::<Vec<_>>());
    let v2_history = v2.config()["history"].as_array().unwrap().clone();
    let app_history: Vec<Value> = old_config["history"].as_array().unwrap()[2..].to_vec();
    assert_eq!(app_history.len(), 5, "four app layers and one empty_layer entry");
    expected["history"] = json!(v2_history.into_iter().chain(app_history).collect::<Vec<_>>());
    let labels = expected["config"]["Labels"].as_object_mut().unwrap();
    labels.insert("io.buildpacks.stack.maintainer".into(), json!("run image team v2"));
    let mut metadata: Value =
        serde_json::from_str(labels["io.buildpacks.lifecycle.metadata"].as_str().unwrap()).unwrap();
    metadata["runImage"]["topLayer"] = json!(v2.top_diff_id());
    metadata["runImage"]["reference"] = json!(format!("{host}/run@{}", v2_pushed.digest));
    let new_labels = config["config"]["Labels"].as_object().unwrap();
    let new_metadata: Value =
        serde_json::from_str(new_labels["io.buildpacks.lifecycle.metadata"].as_str().unwrap()).unwrap();
    assert_eq!(new_metadata, metadata);
    labels.insert("io.buildpacks.lifecycle.metadata".into(), new_labels["io.buildpacks.lifecycle.metadata"].clone());
    assert_eq!(config, expected);
    assert_eq!(config["created"], "1980-01-01T00:00:01Z");

    // Again: already on v2, nothing written, the same digest.
    scene.proxy.clear();
    let again = scene.rebase("run:latest", false, false).await.unwrap();
    assert_eq!(again.digest.as_deref(), Some(new_digest.as_str()));
    assert_eq!(again.previous, new_digest);
    assert_eq!(writes(&scene.proxy), Vec::<String>::new());
}

/// Within one registry each layer is mounted with no HEAD before it; a mount the registry refuses
/// with `202` and an upload session falls back to a HEAD and a copy into that session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_needs_no_head_and_a_refused_one_is_copied_into_its_session() {
    let scene = Scene::new(|a| a).await;
    let v2 = RunImage::jammy("v2", 3);
    scene.push_run("run:latest", &v2).await;
    // A real upload session of the app's repository, opened here, is what the refusal hands over
    // (as Distribution does when it cannot mount).
    let opened = reqwest::Client::new()
        .post(format!("http://{}/v2/apps/web/blobs/uploads/", scene._registry.host))
        .send()
        .await
        .unwrap();
    assert_eq!(opened.status(), 202);
    let location = opened.headers()["location"].to_str().unwrap().to_string();
    let session = reqwest::Url::parse(&format!("http://{}", scene._registry.host)).unwrap().join(&location).unwrap();
    let session = format!("{}?{}", session.path(), session.query().unwrap_or_default());
    scene.proxy.inject(Fault::status(202).on("POST").header("Location", &session));
    scene.proxy.clear();

    let report = scene.rebase("run:latest", false, false).await.unwrap();
    let copied = scene.proxy.seen().into_iter().find(|s| s.method == "PATCH").expect("one layer copied");
    let layer =
        v2.layers.iter().find(|l| scene.proxy.seen().iter().any(|s| s.method == "GET" && s.path.ends_with(&l.digest)));
    let layer = layer.expect("the refused layer read from the run image");
    assert_eq!(
        (report.blobs.present, report.blobs.mounted, report.blobs.copied, report.blobs.bytes_copied),
        (0, 2, 1, layer.blob.len() as u64)
    );
    assert!(
        copied.path.starts_with(session.split('?').next().unwrap()),
        "into the session handed over: {}",
        copied.path
    );
    let heads: Vec<String> = scene
        .proxy
        .seen()
        .into_iter()
        .filter(|s| s.method == "HEAD" && v2.layers.iter().any(|l| s.path.ends_with(&l.digest)))
        .map(|s| s.path)
        .collect();
    assert_eq!(heads, [format!("/v2/apps/web/blobs/{}", layer.digest)], "a HEAD only before the copy");
    for l in &v2.layers {
        scene.registry.get_blob(&image(&scene.app_ref()), &l.digest, 1 << 20).await.unwrap();
    }
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, report.digest.unwrap());
}

/// Each refusal: the reason, no write, the tag where it was.
async fn assert_refused(scene: &Scene, run: &str, reason: &str) {
    scene.proxy.clear();
    let err = scene.rebase(run, false, false).await.unwrap_err();
    assert!(matches!(err, RebaseError::Refused(_)), "{err:?}");
    assert!(err.to_string().contains(reason), "{err} should say {reason}");
    assert_eq!(writes(&scene.proxy), Vec::<String>::new(), "a refusal writes nothing");
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, scene.app_pushed.digest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_write_nothing_and_leave_the_tag() {
    // Old platform API: the stack id must be equal.
    let scene = Scene::new(|a| a.platform_api(Some("0.9"))).await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2).label("io.buildpacks.stack.id", "io.example.other")).await;
    assert_refused(&scene, "run:latest", "stack id io.buildpacks.stacks.jammy differs from io.example.other").await;

    // New platform API: os/architecture must match.
    let scene = Scene::new(|a| a).await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2).arch("arm64", None)).await;
    assert_refused(&scene, "run:latest", "does not match the run image's linux/arm64").await;

    // io.buildpacks.rebasable=false, unless forced.
    let scene = Scene::new(|a| a.label("io.buildpacks.rebasable", "false")).await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2)).await;
    assert_refused(&scene, "run:latest", "io.buildpacks.rebasable is false").await;
    scene.rebase("run:latest", true, false).await.unwrap();
    assert_ne!(tag_digest(&scene.registry, &scene.app_ref()).await, scene.app_pushed.digest);

    // A top layer that is not among the app's diffIDs: never forced.
    let missing = format!("sha256:{}", "0".repeat(64));
    let scene = Scene::new(|mut a| {
        a.top_layer = Some(missing.clone());
        a
    })
    .await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2)).await;
    assert_refused(&scene, "run:latest", &format!("top layer {missing} not in the image")).await;
    let err = scene.rebase("run:latest", true, false).await.unwrap_err();
    assert!(matches!(err, RebaseError::Refused(_)), "--force does not override a missing top layer: {err}");

    // No lifecycle metadata.
    let scene = Scene::new(|mut a| {
        a.no_metadata = true;
        a
    })
    .await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2)).await;
    assert_refused(&scene, "run:latest", "no io.buildpacks.lifecycle.metadata label").await;

    // Platform API 0.12: a run image not named by runImage.image or its mirrors, unless forced.
    let scene = Scene::new(|a| a).await;
    scene.push_run("elsewhere/run:v2", &RunImage::jammy("v2", 2)).await;
    assert_refused(&scene, "elsewhere/run:v2", "is not io.buildpacks.lifecycle.metadata's runImage.image").await;
    scene.rebase("elsewhere/run:v2", true, false).await.unwrap();
    let (_, config) = manifest_and_config(&scene.registry, &scene.app_ref()).await;
    let metadata: Value =
        serde_json::from_str(config["config"]["Labels"]["io.buildpacks.lifecycle.metadata"].as_str().unwrap()).unwrap();
    assert_eq!(metadata["runImage"]["image"], format!("{}/elsewhere/run:v2", scene.host));
    assert_eq!(metadata["runImage"]["mirrors"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_manifest_put_leaves_the_tag_and_a_retry_completes() {
    let scene = Scene::new(|a| a).await;
    scene.push_run("run:latest", &RunImage::jammy("v2", 2)).await;
    // The first PUT (the config upload) passes; the second, the tag's, is refused: it did not land.
    scene.proxy.inject(Fault::decorate().on("PUT"));
    scene.proxy.inject(Fault::status(400).on("PUT"));
    let err = scene.rebase("run:latest", false, false).await.unwrap_err();
    assert!(matches!(err, RebaseError::Registry(RegistryError::Rejected { .. })), "{err:?}");
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, scene.app_pushed.digest);

    scene.proxy.clear();
    let report = scene.rebase("run:latest", false, false).await.unwrap();
    assert_eq!(
        (report.blobs.present, report.blobs.mounted),
        (2, 0),
        "the blobs the failed run mounted are known to be there: not written again"
    );
    let log = writes(&scene.proxy);
    assert_eq!(log.iter().filter(|w| w.contains("/blobs/")).count(), 0, "nor the config: {log:#?}");
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, report.digest.unwrap());
}

/// A manifest PUT refused while blobs it names are being written (`400 DIGEST_INVALID`: a link file
/// read half-rewritten) is tried again within the rebase; `BLOB_UNKNOWN` also makes the rebase
/// write its blobs again (what the process knew was there, the registry says it is not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_put_refused_while_its_blobs_are_written_is_tried_again_within_the_rebase() {
    let scene = Scene::new(|a| a).await;
    let v2 = RunImage::jammy("v2", 2);
    scene.push_run("run:latest", &v2).await;
    // The config upload passes; the tag's PUT (the first manifest PUT: nothing signed names the
    // manifest by digest first) is refused twice, then passes.
    scene.proxy.inject(Fault::decorate().on("PUT"));
    scene.proxy.inject(Fault::status(400).code("DIGEST_INVALID").on("PUT"));
    scene.proxy.inject(Fault::status(404).code("BLOB_UNKNOWN").on("PUT"));
    scene.proxy.clear();
    let report = scene.rebase("run:latest", false, false).await.unwrap();
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, report.digest.clone().unwrap());
    let log = writes(&scene.proxy);
    let mounts = log.iter().filter(|w| w.starts_with("POST") && w.contains("mount=")).count();
    assert_eq!(mounts, 2 * v2.layers.len(), "mounted once, and again after BLOB_UNKNOWN: {log:#?}");
    let config_puts = log.iter().filter(|w| w.starts_with("PUT") && w.contains("/blobs/uploads/")).count();
    assert_eq!(config_puts, 2, "the config uploaded once, and again after BLOB_UNKNOWN: {log:#?}");
    let manifest_puts = log.iter().filter(|w| w.starts_with("PUT") && w.ends_with("/manifests/1")).count();
    assert_eq!(manifest_puts, 3, "two refusals and the PUT that passed: {log:#?}");
    assert_eq!(report.blobs.mounted, v2.layers.len(), "each layer counted once");

    // Once more: refused, it did not land; HEAD and PUT again.
    let v3 = RunImage::jammy("v3", 2);
    scene.push_run("run:latest", &v3).await;
    scene.proxy.inject(Fault::decorate().on("PUT"));
    scene.proxy.inject(Fault::status(400).code("DIGEST_INVALID").on("PUT"));
    scene.proxy.clear();
    let report = scene.rebase("run:latest", false, false).await.unwrap();
    let digest = report.digest.unwrap();
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, digest);
    let log = writes(&scene.proxy);
    assert_eq!(log.iter().filter(|w| w.starts_with("PUT") && w.ends_with("/manifests/1")).count(), 2, "{log:#?}");

    // A refusal that says something else is not tried again (nothing written to the tag).
    let v3 = RunImage::jammy("v4", 2);
    scene.push_run("run:latest", &v3).await;
    scene.proxy.inject(Fault::decorate().on("PUT"));
    scene.proxy.inject(Fault::status(400).code("MANIFEST_INVALID").on("PUT"));
    let err = scene.rebase("run:latest", false, false).await.unwrap_err();
    assert!(err.to_string().contains("MANIFEST_INVALID"), "{err}");
    assert_eq!(tag_digest(&scene.registry, &scene.app_ref()).await, digest);
}

/// One app under two tags of one repository, rebased at once onto the same run image: each layer
/// is mounted once, the config uploaded once; each tag is PUT (storing the rebased manifest, never
/// PUT by digest when nothing is signed) and moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_of_one_manifest_rebased_at_once_write_its_content_once() {
    let scene = Scene::new(|a| a).await;
    let pusher = Pusher::new(&scene.host);
    app::push_app(&pusher, "apps/web", Some("2"), &scene.app, Format::Oci).await;
    let v2 = RunImage::jammy("v2", 3);
    scene.push_run("run:latest", &v2).await;
    scene.proxy.clear();
    let run = format!("{}/run:latest", scene.host);
    let (first, second) = (request(&scene.app_ref(), &run), request(&format!("{}/apps/web:2", scene.host), &run));
    let (one, two) =
        tokio::join!(rebase(&scene.registry, &first, &Unguarded), rebase(&scene.registry, &second, &Unguarded));
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!(one.digest, two.digest, "the same rebased image");
    let digest = one.digest.unwrap();
    let log = writes(&scene.proxy);
    let mounts = log.iter().filter(|w| w.starts_with("POST") && w.contains("mount=")).count();
    assert_eq!(mounts, v2.layers.len(), "{log:#?}");
    let config_puts = log.iter().filter(|w| w.starts_with("PUT") && w.contains("/blobs/uploads/")).count();
    assert_eq!(config_puts, 1, "{log:#?}");
    assert_eq!(log.iter().filter(|w| w.starts_with("PUT") && w.ends_with(&digest)).count(), 0, "{log:#?}");
    for tag in ["1", "2"] {
        assert_eq!(log.iter().filter(|w| w.starts_with("PUT") && w.ends_with(&format!("/manifests/{tag}"))).count(), 1);
        assert_eq!(tag_digest(&scene.registry, &format!("{}/apps/web:{tag}", scene.host)).await, digest);
    }
    let (a, b) = (one.blobs, two.blobs);
    assert_eq!((a.mounted + b.mounted, a.present + b.present), (v2.layers.len(), v2.layers.len()), "{a:?} {b:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_is_rebased_platform_by_platform_keeping_other_entries_and_annotations() {
    let registry = TestRegistry::start_relative(Auth::Anonymous);
    let proxy = Proxy::start(&registry.host).await;
    let host = proxy.host.clone();
    let pusher = Pusher::new(&host);
    let v1 = [RunImage::jammy("v1", 2), RunImage::jammy("v1", 2).arch("arm64", Some("v8"))];
    let v1_pushed = [
        app::push_run(&pusher, "run", None, &v1[0], Format::Oci).await,
        app::push_run(&pusher, "run", None, &v1[1], Format::Oci).await,
    ];
    app::push_index(&pusher, "run", "latest", &[(&v1_pushed[0], &v1[0]), (&v1_pushed[1], &v1[1])], None, Format::Oci)
        .await;
    let apps: Vec<App> = v1
        .iter()
        .zip(&v1_pushed)
        .map(|(run, pushed)| App::on(run, &format!("{host}/run:latest"), &format!("{host}/run@{}", pushed.digest)))
        .collect();
    let app_pushed = [
        app::push_app(&pusher, "apps/web", None, &apps[0], Format::Oci).await,
        app::push_app(&pusher, "apps/web", None, &apps[1], Format::Oci).await,
    ];
    let attestation = app::push(
        &pusher,
        "apps/web",
        None,
        &[&app::layer("sbom.json", "{}")],
        &json!({"architecture": "unknown", "os": "unknown", "rootfs": {"type": "layers", "diff_ids": []}}),
        Format::Oci,
    )
    .await;
    let (previous, old_index) = app::push_index(
        &pusher,
        "apps/web",
        "1",
        &[(&app_pushed[0], &apps[0].run), (&app_pushed[1], &apps[1].run)],
        Some(&attestation),
        Format::Oci,
    )
    .await;
    // v2 lists arm64 first: each app platform must find its own.
    let v2 = [RunImage::jammy("v2", 3), RunImage::jammy("v2", 3).arch("arm64", Some("v8"))];
    let v2_pushed = [
        app::push_run(&pusher, "run", None, &v2[0], Format::Oci).await,
        app::push_run(&pusher, "run", None, &v2[1], Format::Oci).await,
    ];
    app::push_index(&pusher, "run", "latest", &[(&v2_pushed[1], &v2[1]), (&v2_pushed[0], &v2[0])], None, Format::Oci)
        .await;

    let client = client(&[&host]);
    let app_ref = format!("{host}/apps/web:1");
    let report = rebase(&client, &request(&app_ref, &format!("{host}/run:latest")), &Unguarded).await.unwrap();
    assert_eq!(report.previous, previous);
    let platforms: Vec<(&str, usize, usize, usize)> = report
        .platforms
        .iter()
        .map(|p| (p.platform.as_str(), p.base_layers.from, p.base_layers.to, p.app_layers))
        .collect();
    assert_eq!(platforms, [("linux/amd64", 2, 3, 4), ("linux/arm64/v8", 2, 3, 4)]);
    assert_eq!(report.blobs.mounted, 6);

    let index = client.get_manifest(&image(&app_ref), "1").await.unwrap();
    assert_eq!(Some(index.digest.clone()), report.digest);
    assert_eq!(index.media_type, "application/vnd.oci.image.index.v1+json");
    let index: Value = serde_json::from_slice(&index.bytes).unwrap();
    assert_eq!(index["annotations"], old_index["annotations"]);
    let entries = index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[2], old_index["manifests"][2], "the attestation entry is kept as it was");
    for (i, entry) in entries[..2].iter().enumerate() {
        assert_eq!(entry["platform"], old_index["manifests"][i]["platform"]);
        assert_eq!(entry["digest"], report.platforms[i].digest);
        let child = format!("{host}/apps/web@{}", entry["digest"].as_str().unwrap());
        let (manifest, config) = manifest_and_config(&client, &child).await;
        let expected: Vec<String> = v2[i].layers.iter().chain(&apps[i].layers).map(|l| l.digest.clone()).collect();
        assert_eq!(layer_digests(&manifest), expected, "platform {i}");
        assert_eq!(config["architecture"], v2[i].architecture);
        let metadata: Value =
            serde_json::from_str(config["config"]["Labels"]["io.buildpacks.lifecycle.metadata"].as_str().unwrap())
                .unwrap();
        assert_eq!(metadata["runImage"]["reference"], format!("{host}/run@{}", v2_pushed[i].digest));
        assert_eq!(metadata["runImage"]["topLayer"], v2[i].top_diff_id());
        for layer in &expected {
            client.get_blob(&image(&app_ref), layer, 1 << 20).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_two_registries_the_layers_are_copied_and_verified() {
    let a = TestRegistry::start();
    let b = TestRegistry::start();
    let (run_pusher, app_pusher) = (Pusher::new(&a.host), Pusher::new(&b.host));
    let v1 = RunImage::jammy("v1", 2);
    let v1_pushed = app::push_run(&run_pusher, "run", Some("latest"), &v1, Format::Docker).await;
    let built = App::on(&v1, &format!("{}/run:latest", a.host), &format!("{}/run@{}", a.host, v1_pushed.digest));
    let app_pushed = app::push_app(&app_pusher, "apps/web", Some("1"), &built, Format::Docker).await;
    let v2 = RunImage::jammy("v2", 3);
    app::push_run(&run_pusher, "run", Some("latest"), &v2, Format::Docker).await;

    let client = client(&[&a.host, &b.host]);
    let app_ref = format!("{}/apps/web:1", b.host);
    let report = rebase(&client, &request(&app_ref, &format!("{}/run:latest", a.host)), &Unguarded).await.unwrap();
    let sizes: u64 = v2.layers.iter().map(|l| l.blob.len() as u64).sum();
    assert_eq!((report.blobs.mounted, report.blobs.copied, report.blobs.bytes_copied), (0, 3, sizes));
    assert_ne!(report.digest.as_deref(), Some(app_pushed.digest.as_str()));
    let (manifest, _) = manifest_and_config(&client, &app_ref).await;
    assert_eq!(manifest["mediaType"], "application/vnd.docker.distribution.manifest.v2+json");
    for layer in manifest["layers"].as_array().unwrap() {
        assert_eq!(layer["mediaType"], "application/vnd.docker.image.rootfs.diff.tar.gzip");
        client.get_blob(&image(&app_ref), layer["digest"].as_str().unwrap(), 1 << 20).await.unwrap();
    }
    let expected: Vec<String> = v2.layers.iter().chain(&built.layers).map(|l| l.digest.clone()).collect();
    assert_eq!(layer_digests(&manifest), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_rebases_with_credentials_from_the_config_and_exits_1_on_a_refusal() {
    let tokens = TokenServer::start(Some(("testuser", "testpass")), 300).await;
    let registry = TestRegistry::start_with(Auth::Token { realm: tokens.realm.clone() });
    let host = registry.host.clone();
    let pusher = Pusher::with_basic(&host, "testuser", "testpass");
    let v1 = RunImage::jammy("v1", 2);
    let v1_pushed = app::push_run(&pusher, "run", Some("latest"), &v1, Format::Oci).await;
    let on_v1 = App::on(&v1, &format!("{host}/run:latest"), &format!("{host}/run@{}", v1_pushed.digest));
    let web = app::push_app(&pusher, "apps/web", Some("1"), &on_v1, Format::Oci).await;
    let locked = on_v1.clone().label("io.buildpacks.rebasable", "false");
    let locked = app::push_app(&pusher, "apps/locked", Some("1"), &locked, Format::Oci).await;
    app::push_run(&pusher, "run", Some("latest"), &RunImage::jammy("v2", 3), Format::Oci).await;

    let workspace = Workspace::new();
    let config = workspace.config(&format!(
        "[registries.\"{host}\"]\nrequests_per_second = 0\nusername = \"testuser\"\npassword_env = \"BM_TEST_REGISTRY_PASSWORD\"\n"
    ));
    let config = config.to_str().unwrap().to_string();
    let run_image = format!("{host}/run:latest");
    let cli = move |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let cwd = std::env::temp_dir();
            run_with_env(&args, &[("BM_TEST_REGISTRY_PASSWORD", "testpass")], &cwd)
        })
    };
    let args = |app: &str, extra: &[&str]| -> Vec<String> {
        let mut a = vec!["rebase".to_string(), format!("{host}/{app}"), "--run-image".into(), run_image.clone()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let reader = client(&[&host]);

    // Anonymous (no --config): the token server grants no push.
    let out = cli(args("apps/web:1", &[])).await.unwrap();
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("unauthorized"), "{}", out.stderr);
    assert_eq!(tag_digest(&reader, &format!("{host}/apps/web:1")).await, web.digest);

    // A refusal: exit 1, the reason, nothing written.
    let out = cli(args("apps/locked:1", &["--config", &config])).await.unwrap();
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("io.buildpacks.rebasable is false"), "{}", out.stderr);
    assert_eq!(tag_digest(&reader, &format!("{host}/apps/locked:1")).await, locked.digest);

    // A dry run says what would happen.
    let out = cli(args("apps/web:1", &["--config", &config, "--dry-run"])).await.unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("dry run: nothing written"), "{}", out.stdout);
    assert!(out.stdout.contains("linux/amd64: 2 run image layers replaced by 3, 4 app layers kept"), "{}", out.stdout);
    assert_eq!(tag_digest(&reader, &format!("{host}/apps/web:1")).await, web.digest);

    let out = cli(args("apps/web:1", &["--config", &config, "--json"])).await.unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let report: Value = serde_json::from_str(&out.stdout).unwrap();
    let now = tag_digest(&reader, &format!("{host}/apps/web:1")).await;
    assert_eq!(report["digest"], now);
    assert_eq!(report["previous"], web.digest);
    assert_eq!(report["blobs"]["mounted"], 3);
    assert!(!out.stderr.contains("testpass") && !out.stdout.contains("testpass"));

    let out = cli(args("apps/web:1", &["--config", &config])).await.unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("already on"), "{}", out.stdout);
}
