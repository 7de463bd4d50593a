use super::history::is_empty_layer;
use super::image::{DOCKER_CONFIG, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST};
use super::*;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;

const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

fn sha(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// A layer's diffID (uncompressed) and blob digest (compressed), distinct per name.
fn diff(name: &str) -> String {
    sha(&format!("diff:{name}"))
}
fn gz(name: &str) -> String {
    sha(&format!("gz:{name}"))
}
fn size(name: &str) -> u64 {
    100 + name.len() as u64
}

/// An image under test: its config document and its layers by name.
#[derive(Clone)]
struct Image {
    manifest_type: &'static str,
    layer_type: &'static str,
    layers: Vec<&'static str>,
    config: Value,
}

impl Image {
    fn config_bytes(&self) -> Vec<u8> {
        let mut config = self.config.clone();
        config["rootfs"] =
            json!({"type": "layers", "diff_ids": self.layers.iter().map(|l| diff(l)).collect::<Vec<_>>()});
        serde_json::to_vec(&config).unwrap()
    }

    fn manifest_bytes(&self) -> Vec<u8> {
        let config = self.config_bytes();
        let config_type = if self.manifest_type == DOCKER_MANIFEST { DOCKER_CONFIG } else { OCI_CONFIG };
        serde_json::to_vec_pretty(&json!({
            "schemaVersion": 2,
            "mediaType": self.manifest_type,
            "config": {"mediaType": config_type, "digest": digest_of(&config), "size": config.len()},
            "layers": self.layers.iter().map(|l| json!({"mediaType": self.layer_type, "digest": gz(l), "size": size(l)})).collect::<Vec<_>>(),
            "annotations": {"org.opencontainers.image.source": "https://example.com/src"},
        }))
        .unwrap()
    }

    fn labels_mut(&mut self) -> &mut Map<String, Value> {
        self.config["config"]["Labels"].as_object_mut().unwrap()
    }

    fn label(&mut self, key: &str, value: &str) -> &mut Self {
        self.labels_mut().insert(key.into(), json!(value));
        self
    }

    fn metadata(&self) -> Value {
        serde_json::from_str(self.config["config"]["Labels"][LIFECYCLE_METADATA].as_str().unwrap()).unwrap()
    }

    fn set_metadata(&mut self, metadata: Value) -> &mut Self {
        self.label(LIFECYCLE_METADATA, &metadata.to_string())
    }

    fn platform_api(&mut self, api: &str) -> &mut Self {
        let env = self.config["config"]["Env"].as_array_mut().unwrap();
        env.retain(|e| !e.as_str().unwrap().starts_with("CNB_PLATFORM_API="));
        if !api.is_empty() {
            env.push(json!(format!("CNB_PLATFORM_API={api}")));
        }
        self
    }
}

fn run_image_v1() -> Image {
    Image {
        manifest_type: OCI_MANIFEST,
        layer_type: OCI_LAYER,
        layers: vec!["os", "packages-v1"],
        config: json!({
            "architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
            "config": {
                "Env": ["PATH=/usr/bin"], "User": "1002:1000",
                "Labels": {
                    "io.buildpacks.stack.id": "io.buildpacks.stacks.jammy",
                    "io.buildpacks.stack.mixins": "[\"openssl\",\"run:tzdata\"]",
                    "io.buildpacks.stack.maintainer": "v1",
                    "io.buildpacks.base.distro.name": "ubuntu",
                    "io.buildpacks.base.distro.version": "22.04",
                    "io.buildpacks.base.id": "run-v1",
                    "org.opencontainers.image.ref.name": "v1",
                },
            },
            "history": [
                {"created_by": "os"},
                {"created_by": "packages v1"},
                {"created_by": "USER cnb", "empty_layer": true},
            ],
        }),
    }
}

/// v1 with a patched package layer and a new one, an extra history entry and new labels.
fn run_image_v2() -> Image {
    let mut image = run_image_v1();
    image.layers = vec!["os", "packages-v2", "certs"];
    image.config["created"] = json!("2024-06-01T00:00:00Z");
    image.config["history"] = json!([
        {"created_by": "os"},
        {"created_by": "ENV X=1", "empty_layer": true},
        {"created_by": "packages v2"},
        {"created_by": "certs"},
        {"created_by": "USER cnb", "empty_layer": true},
    ]);
    image.label("io.buildpacks.stack.maintainer", "v2").label("io.buildpacks.base.id", "run-v2");
    image.labels_mut().remove("io.buildpacks.stack.mixins");
    image.label("io.buildpacks.stack.mixins", "[\"openssl\",\"tzdata\",\"curl\"]");
    image.label("io.buildpacks.stack.released", "2024-06-01");
    image.label("org.opencontainers.image.ref.name", "v2");
    image
}

const RUN_IMAGE: &str = "registry.example/run";

/// An app built on v1 the way the lifecycle's exporter writes one (platform API 0.12).
fn app_on(base: &Image) -> Image {
    let mut labels: Map<String, Value> = base.config["config"]["Labels"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("io.buildpacks.stack.") || k.starts_with("io.buildpacks.base."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let metadata = json!({
        "app": [{"sha": diff("app")}],
        "launcher": {"sha": diff("launcher")},
        "config": {"sha": diff("launch-config")},
        "buildpacks": [{"key": "paketo-buildpacks/go", "version": "4.14.0", "layers": {}}],
        "runImage": {
            "image": RUN_IMAGE,
            "mirrors": ["mirror.example/run"],
            "topLayer": diff(base.layers.last().unwrap()),
            "reference": format!("{RUN_IMAGE}@{}", digest_of(&base.manifest_bytes())),
        },
        "stack": {"runImage": {"image": RUN_IMAGE, "mirrors": ["mirror.example/run"]}},
    });
    labels.insert(LIFECYCLE_METADATA.into(), json!(metadata.to_string()));
    labels.insert("io.buildpacks.build.metadata".into(), json!("{\"processes\":[{\"type\":\"web\"}]}"));
    labels.insert("io.buildpacks.project.metadata".into(), json!("{}"));
    labels.insert("org.opencontainers.image.ref.name".into(), json!("v1"));
    let mut history = base.config["history"].as_array().unwrap().clone();
    history.extend([
        json!({"created_by": "launcher"}),
        json!({"created_by": "launch-config"}),
        json!({"created_by": "app"}),
    ]);
    let mut layers = base.layers.clone();
    layers.extend(["launcher", "launch-config", "app"]);
    Image {
        manifest_type: base.manifest_type,
        layer_type: base.layer_type,
        layers,
        config: json!({
            "architecture": "amd64", "os": "linux", "created": "1980-01-01T00:00:01Z",
            "config": {
                "Env": ["PATH=/usr/bin:/cnb/process", "CNB_PLATFORM_API=0.12"],
                "Entrypoint": ["/cnb/process/web"], "User": "1002:1000", "WorkingDir": "/workspace",
                "Labels": labels,
            },
            "history": history,
        }),
    }
}

fn options() -> RebaseOptions {
    RebaseOptions {
        force: false,
        run_image_name: format!("{RUN_IMAGE}:latest"),
        run_image_reference: format!("{RUN_IMAGE}@{}", digest_of(&run_image_v2().manifest_bytes())),
        known_run_images: Vec::new(),
    }
}

fn rebase(app: &Image, base: &Image, options: &RebaseOptions) -> Result<PlatformRebase, Refusal> {
    rebase_platform(&app.manifest_bytes(), &app.config_bytes(), &base.manifest_bytes(), &base.config_bytes(), options)
}

fn forced() -> RebaseOptions {
    RebaseOptions { force: true, ..options() }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn labels_of(config: &Value) -> BTreeMap<String, String> {
    config["config"]["Labels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().into()))
        .collect()
}

// ---- the happy path -------------------------------------------------------------------------

#[test]
fn rebases_a_single_platform_app_onto_the_new_run_image() {
    let (v1, v2) = (run_image_v1(), run_image_v2());
    let app = app_on(&v1);
    let result = rebase(&app, &v2, &options()).unwrap();
    assert!(!result.already_rebased);
    assert_eq!((result.base_layers_from, result.base_layers_to, result.app_layers), (2, 3, 3));

    // Digests are those of the exact bytes, which are compact JSON.
    assert_eq!(result.config_digest, sha_bytes(&result.config));
    assert_eq!(result.manifest_digest, sha_bytes(&result.manifest));
    assert!(!result.manifest.contains(&b'\n') && !result.config.contains(&b'\n'));
    assert_eq!(result.manifest_media_type, OCI_MANIFEST);

    // Layers: v2's then the app's, in descriptors and diffIDs alike.
    let manifest = json_of(&result.manifest);
    let layers: Vec<(&str, u64, &str)> = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["digest"].as_str().unwrap(), l["size"].as_u64().unwrap(), l["mediaType"].as_str().unwrap()))
        .collect();
    let expected: Vec<&str> = vec!["os", "packages-v2", "certs", "launcher", "launch-config", "app"];
    let expected_digests: Vec<String> = expected.iter().map(|l| gz(l)).collect();
    assert_eq!(layers.iter().map(|l| l.0.to_string()).collect::<Vec<_>>(), expected_digests);
    assert!(layers.iter().all(|l| l.2 == OCI_LAYER));
    assert_eq!(manifest["config"]["digest"], json!(result.config_digest));
    assert_eq!(manifest["config"]["size"], json!(result.config.len()));
    assert_eq!(manifest["config"]["mediaType"], json!(OCI_CONFIG));
    assert_eq!(manifest["annotations"], json!({"org.opencontainers.image.source": "https://example.com/src"}));
    let blobs = |names: &[&str]| -> Vec<Blob> {
        names.iter().map(|n| Blob { digest: gz(n), size: size(n), media_type: OCI_LAYER.into() }).collect()
    };
    assert_eq!(result.base_blobs, blobs(&["os", "packages-v2", "certs"]));
    assert_eq!(result.app_blobs, blobs(&["launcher", "launch-config", "app"]));

    let config = json_of(&result.config);
    let diff_ids: Vec<String> = expected.iter().map(|l| diff(l)).collect();
    assert_eq!(config["rootfs"], json!({"type": "layers", "diff_ids": diff_ids}));
    // History: v2's whole history (its empty entries too), then one entry per app layer.
    let history = config["history"].as_array().unwrap();
    let mut wanted = v2.config["history"].as_array().unwrap().clone();
    wanted.extend([
        json!({"created_by": "launcher"}),
        json!({"created_by": "launch-config"}),
        json!({"created_by": "app"}),
    ]);
    assert_eq!(history, &wanted);
    assert_eq!(history.iter().filter(|h| !is_empty_layer(h)).count(), diff_ids.len());

    // Everything but layers, history and base labels is the app's.
    let old = json_of(&app.config_bytes());
    for key in ["created", "os", "architecture"] {
        assert_eq!(config[key], old[key], "{key}");
    }
    for key in ["Env", "Entrypoint", "User", "WorkingDir"] {
        assert_eq!(config["config"][key], old["config"][key], "{key}");
    }

    // Labels: stack.* and base.* are v2's, the lifecycle metadata is updated, nothing else moved.
    let (before, after) = (labels_of(&old), labels_of(&config));
    let changed: Vec<&String> = before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).collect();
    let mut changed: Vec<&str> = changed.into_iter().map(String::as_str).collect();
    changed.sort();
    changed.dedup();
    assert_eq!(
        changed,
        [
            "io.buildpacks.base.id",
            LIFECYCLE_METADATA,
            "io.buildpacks.stack.maintainer",
            "io.buildpacks.stack.mixins",
            "io.buildpacks.stack.released",
        ]
    );
    assert_eq!(after["io.buildpacks.stack.released"], "2024-06-01");
    assert_eq!(after["org.opencontainers.image.ref.name"], "v1", "a non-CNB label of the base is not copied");

    let mut metadata: Value = serde_json::from_str(&after[LIFECYCLE_METADATA]).unwrap();
    assert_eq!(metadata["runImage"]["topLayer"], json!(diff("certs")));
    assert_eq!(metadata["runImage"]["reference"], json!(options().run_image_reference));
    let mut old_metadata = app.metadata();
    metadata["runImage"]["topLayer"] = json!(null);
    metadata["runImage"]["reference"] = json!(null);
    old_metadata["runImage"]["topLayer"] = json!(null);
    old_metadata["runImage"]["reference"] = json!(null);
    assert_eq!(metadata, old_metadata, "image, mirrors, stack and every other key are kept");
}

fn sha_bytes(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[test]
fn media_types_stay_those_of_the_app_manifest() {
    // A Docker v2 app onto an OCI run image: the run image's layers are named as Docker layers.
    let mut v1 = run_image_v1();
    v1.manifest_type = DOCKER_MANIFEST;
    v1.layer_type = DOCKER_LAYER;
    let app = app_on(&v1);
    let result = rebase(&app, &run_image_v2(), &options()).unwrap();
    assert_eq!(result.manifest_media_type, DOCKER_MANIFEST);
    let manifest = json_of(&result.manifest);
    assert_eq!(manifest["mediaType"], json!(DOCKER_MANIFEST));
    assert_eq!(manifest["config"]["mediaType"], json!(DOCKER_CONFIG));
    assert!(manifest["layers"].as_array().unwrap().iter().all(|l| l["mediaType"] == json!(DOCKER_LAYER)));
    assert!(result.base_blobs.iter().chain(&result.app_blobs).all(|b| b.media_type == DOCKER_LAYER));

    // An OCI app onto a Docker v2 run image: OCI layers.
    let mut v2 = run_image_v2();
    v2.manifest_type = DOCKER_MANIFEST;
    v2.layer_type = DOCKER_LAYER;
    let result = rebase(&app_on(&run_image_v1()), &v2, &options()).unwrap();
    assert_eq!(result.manifest_media_type, OCI_MANIFEST);
    assert!(json_of(&result.manifest)["layers"].as_array().unwrap().iter().all(|l| l["mediaType"] == json!(OCI_LAYER)));

    // A zstd layer has no Docker v2 name: refused rather than mislabelled.
    let mut v2 = run_image_v2();
    v2.layer_type = "application/vnd.oci.image.layer.v1.tar+zstd";
    let refusal = rebase(&app, &v2, &options()).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "run image layer media type application/vnd.oci.image.layer.v1.tar+zstd has no equivalent in a Docker v2 manifest"
    );
}

#[test]
fn an_app_already_on_the_run_image_needs_no_writes() {
    let app = app_on(&run_image_v1());
    let v2 = run_image_v2();
    let first = rebase(&app, &v2, &options()).unwrap();
    let again =
        rebase_platform(&first.manifest, &first.config, &v2.manifest_bytes(), &v2.config_bytes(), &options()).unwrap();
    assert!(again.already_rebased);
    assert_eq!(
        (again.manifest_digest.as_str(), again.config_digest.as_str()),
        (first.manifest_digest.as_str(), first.config_digest.as_str())
    );
    assert_eq!(again.manifest, first.manifest);
    assert_eq!((again.base_layers_from, again.base_layers_to, again.app_layers), (3, 3, 3));

    // An app built on v2 itself is on it too.
    let built = app_on(&v2);
    assert!(rebase(&built, &v2, &options()).unwrap().already_rebased);

    // Same layers but another recorded run image: the metadata must still be rewritten.
    let mut other = app_on(&v2);
    let mut metadata = other.metadata();
    metadata["runImage"]["reference"] = json!(format!("{RUN_IMAGE}@{}", sha("another manifest")));
    other.set_metadata(metadata);
    let result = rebase(&other, &v2, &options()).unwrap();
    assert!(!result.already_rebased);
    let config = json_of(&result.config);
    let metadata: Value = serde_json::from_str(&labels_of(&config)[LIFECYCLE_METADATA]).unwrap();
    assert_eq!(metadata["runImage"]["reference"], json!(options().run_image_reference));
}

// ---- refusals, and what --force overrides -------------------------------------------------------

/// The rebase refused without and with --force (for refusals force does not override).
fn refused_even_forced(app: &Image, base: &Image) -> String {
    let refusal = rebase(app, base, &options()).unwrap_err();
    assert_eq!(rebase(app, base, &forced()).unwrap_err(), refusal, "--force must not override this");
    refusal.to_string()
}

/// The rebase refused, and done with --force.
fn refused_unless_forced(app: &Image, base: &Image) -> (String, PlatformRebase) {
    let refusal = rebase(app, base, &options()).unwrap_err();
    assert!(refusal.to_string().ends_with("(use --force)"), "{refusal}");
    (refusal.to_string(), rebase(app, base, &forced()).unwrap())
}

#[test]
fn old_platform_api_requires_the_same_stack_id_even_forced() {
    for api in ["", "0.9", "0.11"] {
        let mut app = app_on(&run_image_v1());
        app.platform_api(api);
        let mut v2 = run_image_v2();
        v2.label("io.buildpacks.stack.id", "io.buildpacks.stacks.noble");
        assert_eq!(
            refused_even_forced(&app, &v2),
            "stack id io.buildpacks.stacks.jammy differs from io.buildpacks.stacks.noble"
        );
        v2.labels_mut().remove("io.buildpacks.stack.id");
        assert_eq!(refused_even_forced(&app, &v2), "no io.buildpacks.stack.id on the run image");
        app.label("io.buildpacks.stack.id", "");
        assert_eq!(refused_even_forced(&app, &v2), "no io.buildpacks.stack.id on the app image");
        assert!(rebase(&app, &v2, &options()).is_err());
    }
    // From 0.12 the stack id is not compared.
    let mut v2 = run_image_v2();
    v2.label("io.buildpacks.stack.id", "io.buildpacks.stacks.noble");
    assert!(rebase(&app_on(&run_image_v1()), &v2, &options()).is_ok());
}

#[test]
fn old_platform_api_requires_every_app_mixin_even_forced() {
    let mut app = app_on(&run_image_v1());
    app.platform_api("0.10");
    // Prefixes are stripped on both sides: run:tzdata on the app is tzdata on v2.
    app.label("io.buildpacks.stack.mixins", "[\"openssl\",\"run:tzdata\",\"build:curl\"]");
    assert!(rebase(&app, &run_image_v2(), &options()).is_ok());
    app.label("io.buildpacks.stack.mixins", "[\"run:libxml2\",\"openssl\",\"zlib\"]");
    assert_eq!(refused_even_forced(&app, &run_image_v2()), "missing required mixin(s) libxml2, zlib");
    // A run image without the label has no mixins.
    let mut v2 = run_image_v2();
    v2.labels_mut().remove("io.buildpacks.stack.mixins");
    assert_eq!(refused_even_forced(&app, &v2), "missing required mixin(s) libxml2, openssl, zlib");
    // From 0.12 mixins are not compared.
    app.platform_api("0.12");
    assert!(rebase(&app, &v2, &options()).is_ok());
}

#[test]
fn rebasable_false_refuses_from_platform_api_0_12_unless_forced() {
    let mut app = app_on(&run_image_v1());
    app.label("io.buildpacks.rebasable", "false");
    let (reason, result) = refused_unless_forced(&app, &run_image_v2());
    assert_eq!(reason, "io.buildpacks.rebasable is false (use --force)");
    assert_eq!(labels_of(&json_of(&result.config))["io.buildpacks.rebasable"], "false");
    app.label("io.buildpacks.rebasable", "true");
    assert!(rebase(&app, &run_image_v2(), &options()).is_ok());
    // Older apps: the rebaser does not read the label.
    app.label("io.buildpacks.rebasable", "false").platform_api("0.11");
    assert!(rebase(&app, &run_image_v2(), &options()).is_ok());
}

#[test]
fn the_target_must_match_from_platform_api_0_12_unless_forced() {
    let app = app_on(&run_image_v1());
    let mut arm = run_image_v2();
    arm.config["architecture"] = json!("arm64");
    let (reason, result) = refused_unless_forced(&app, &arm);
    assert_eq!(reason, "os/architecture linux/amd64 does not match the run image's linux/arm64 (use --force)");
    assert_eq!(json_of(&result.config)["architecture"], json!("arm64"), "forced: the platform is the base's");

    // Variant: a missing one matches any; two different ones do not.
    let mut app_v7 = app_on(&run_image_v1());
    app_v7.config["architecture"] = json!("arm");
    app_v7.config["variant"] = json!("v7");
    let mut base = run_image_v2();
    base.config["architecture"] = json!("arm");
    assert!(rebase(&app_v7, &base, &options()).is_ok());
    base.config["variant"] = json!("v6");
    let (reason, result) = refused_unless_forced(&app_v7, &base);
    assert_eq!(reason, "variant v7 does not match the run image's v6 (use --force)");
    assert_eq!(json_of(&result.config)["variant"], json!("v6"));

    // Distro: the run image's name/version must be the app's; an app without one fails.
    let mut noble = run_image_v2();
    noble.label("io.buildpacks.base.distro.version", "24.04");
    let (reason, _) = refused_unless_forced(&app, &noble);
    assert_eq!(reason, "distro ubuntu 22.04 does not match the run image's ubuntu 24.04 (use --force)");
    let mut bare = app_on(&run_image_v1());
    bare.labels_mut().retain(|k, _| !k.starts_with("io.buildpacks.base.distro."));
    let (reason, _) = refused_unless_forced(&bare, &run_image_v2());
    assert_eq!(reason, "distro (none) does not match the run image's ubuntu 22.04 (use --force)");
    // A run image without distro labels is no constraint.
    let mut plain = run_image_v2();
    plain.labels_mut().retain(|k, _| !k.starts_with("io.buildpacks.base.distro."));
    assert!(rebase(&app, &plain, &options()).is_ok());

    // Below 0.12 only os/architecture are compared (a single-manifest run image must match).
    let mut old = app_on(&run_image_v1());
    old.platform_api("0.10");
    assert!(rebase(&old, &noble, &options()).is_ok());
    assert!(rebase(&old, &arm, &options()).is_err());
}

#[test]
fn a_top_layer_outside_the_image_refuses_even_forced() {
    let mut app = app_on(&run_image_v1());
    let mut metadata = app.metadata();
    metadata["runImage"]["topLayer"] = json!(diff("elsewhere"));
    app.set_metadata(metadata.clone());
    assert_eq!(refused_even_forced(&app, &run_image_v2()), format!("top layer {} not in the image", diff("elsewhere")));
    metadata["runImage"].as_object_mut().unwrap().remove("topLayer");
    app.set_metadata(metadata);
    assert_eq!(refused_even_forced(&app, &run_image_v2()), "io.buildpacks.lifecycle.metadata has no runImage.topLayer");
}

#[test]
fn no_lifecycle_metadata_refuses_even_forced() {
    let mut app = app_on(&run_image_v1());
    app.labels_mut().remove(LIFECYCLE_METADATA);
    assert_eq!(refused_even_forced(&app, &run_image_v2()), "no io.buildpacks.lifecycle.metadata label");
    app.label(LIFECYCLE_METADATA, "");
    assert_eq!(refused_even_forced(&app, &run_image_v2()), "no io.buildpacks.lifecycle.metadata label");
    app.config["config"]["Labels"] = json!(null);
    assert_eq!(refused_even_forced(&app, &run_image_v2()), "no io.buildpacks.lifecycle.metadata label");
}

#[test]
fn an_empty_run_image_refuses() {
    let mut empty = run_image_v2();
    empty.layers.clear();
    empty.config["history"] = json!([]);
    assert_eq!(refused_even_forced(&app_on(&run_image_v1()), &empty), "the run image has no layers");
}

#[test]
fn the_run_image_name_must_be_image_or_a_mirror_from_platform_api_0_12_unless_forced() {
    let app = app_on(&run_image_v1());
    let v2 = run_image_v2();
    // The recorded image, a mirror, with a digest, untagged: all the same name.
    for name in [
        RUN_IMAGE.to_string(),
        format!("{RUN_IMAGE}:latest"),
        "mirror.example/run".to_string(),
        format!("mirror.example/run@{}", sha("x")),
        format!("{RUN_IMAGE}:latest@{}", sha("x")),
    ] {
        let options = RebaseOptions { run_image_name: name.clone(), ..options() };
        assert!(rebase(&app, &v2, &options).is_ok(), "{name}");
    }
    let other = RebaseOptions { run_image_name: format!("{RUN_IMAGE}:v2"), ..options() };
    let refusal = rebase(&app, &v2, &other).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "run image registry.example/run:v2 is not io.buildpacks.lifecycle.metadata's runImage.image or one of its mirrors (use --force)"
    );
    // Forced: the new name becomes the run image, without mirrors, in runImage and stack alike.
    let result = rebase(&app, &v2, &RebaseOptions { force: true, ..other.clone() }).unwrap();
    let metadata: Value = serde_json::from_str(&labels_of(&json_of(&result.config))[LIFECYCLE_METADATA]).unwrap();
    assert_eq!(metadata["runImage"]["image"], json!("registry.example/run:v2"));
    assert_eq!(metadata["runImage"]["mirrors"], json!([]));
    assert_eq!(metadata["stack"]["runImage"], json!({"image": "registry.example/run:v2", "mirrors": []}));
    assert_eq!(metadata["runImage"]["topLayer"], json!(diff("certs")));

    // The legacy stack.runImage counts as well.
    let mut legacy = app_on(&run_image_v1());
    let mut m = legacy.metadata();
    m["runImage"].as_object_mut().unwrap().remove("image");
    m["runImage"].as_object_mut().unwrap().remove("mirrors");
    m["stack"]["runImage"]["image"] = json!(format!("{RUN_IMAGE}:v2"));
    legacy.set_metadata(m);
    assert!(rebase(&legacy, &v2, &other).is_ok());

    // Below 0.12 the name is not checked, and the metadata keeps its names.
    let mut old = app_on(&run_image_v1());
    old.platform_api("0.11");
    let result = rebase(&old, &v2, &other).unwrap();
    let metadata: Value = serde_json::from_str(&labels_of(&json_of(&result.config))[LIFECYCLE_METADATA]).unwrap();
    assert_eq!(metadata["runImage"]["image"], json!(RUN_IMAGE));
}

#[test]
fn old_platform_api_syncs_stack_labels_only() {
    let mut app = app_on(&run_image_v1());
    app.platform_api("0.11");
    let result = rebase(&app, &run_image_v2(), &options()).unwrap();
    let labels = labels_of(&json_of(&result.config));
    assert_eq!(labels["io.buildpacks.stack.maintainer"], "v2");
    assert_eq!(labels["io.buildpacks.base.id"], "run-v1", "base.* labels are synced from API 0.12 only");
}

#[test]
fn base_labels_gone_from_the_new_run_image_are_deleted() {
    let mut v2 = run_image_v2();
    v2.labels_mut().remove("io.buildpacks.base.id");
    v2.labels_mut().remove("io.buildpacks.stack.maintainer");
    let result = rebase(&app_on(&run_image_v1()), &v2, &options()).unwrap();
    let labels = labels_of(&json_of(&result.config));
    assert!(!labels.contains_key("io.buildpacks.base.id") && !labels.contains_key("io.buildpacks.stack.maintainer"));
}

#[test]
fn malformed_input_is_refused_with_what_is_wrong() {
    let app = app_on(&run_image_v1());
    let v2 = run_image_v2();
    let (am, ac, bm, bc) = (app.manifest_bytes(), app.config_bytes(), v2.manifest_bytes(), v2.config_bytes());
    let o = options();
    let reason = |r: Result<PlatformRebase, Refusal>| r.unwrap_err().to_string();
    assert!(reason(rebase_platform(b"{not json", &ac, &bm, &bc, &o)).starts_with("app manifest: not JSON ("));
    assert!(reason(rebase_platform(&am, &ac, &bm, b"", &o)).starts_with("run image config: not JSON ("));
    assert_eq!(reason(rebase_platform(&am, b"[]", &bm, &bc, &o)), "app config: not a JSON object");
    // A config that is not the one the manifest names.
    assert!(reason(rebase_platform(&am, &bc, &bm, &bc, &o)).starts_with("app manifest: its config descriptor names"));
    // An index where a platform manifest belongs.
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})).unwrap();
    assert_eq!(
        reason(rebase_platform(&am, &ac, &index, &bc, &o)),
        "run image manifest: an index, not a single-platform manifest"
    );
    // Layers and diffIDs that do not pair up.
    let mut short = json_of(&bm);
    short["layers"].as_array_mut().unwrap().pop();
    let short = serde_json::to_vec(&short).unwrap();
    assert_eq!(
        reason(rebase_platform(&am, &ac, &short, &bc, &o)),
        "run image manifest: 2 layers, but its config has 3 diffIDs"
    );

    let mut bad = app.clone();
    bad.label(LIFECYCLE_METADATA, "{\"runImage\":");
    assert!(reason(rebase(&bad, &v2, &o)).starts_with("io.buildpacks.lifecycle.metadata: not JSON ("));
    bad.label(LIFECYCLE_METADATA, "[1]");
    assert_eq!(reason(rebase(&bad, &v2, &o)), "io.buildpacks.lifecycle.metadata: not a JSON object");
    let mut bad = app.clone();
    bad.platform_api("0.1x");
    assert_eq!(reason(rebase(&bad, &v2, &o)), "CNB_PLATFORM_API: \"0.1x\" is not a version");
    let mut bad = app.clone();
    bad.platform_api("0.10").label("io.buildpacks.stack.mixins", "openssl");
    assert!(reason(rebase(&bad, &v2, &o)).starts_with("io.buildpacks.stack.mixins: not a JSON list of strings ("));
    let mut bad = app.clone();
    bad.labels_mut().insert("count".into(), json!(3));
    assert_eq!(reason(rebase(&bad, &v2, &o)), "app config: label count is not a string");
}

// ---- history ------------------------------------------------------------------------------------

#[test]
fn empty_layer_history_entries_do_not_count_as_layers() {
    // The app's history: v1's (ending in an empty USER entry), then app entries with an empty
    // entry among them. The cut falls after v1's entries, the app's empty entry stays in place.
    let mut app = app_on(&run_image_v1());
    app.config["history"] = json!([
        {"created_by": "os"},
        {"created_by": "ENV A=1", "empty_layer": true},
        {"created_by": "packages v1"},
        {"created_by": "USER cnb", "empty_layer": true},
        {"created_by": "launcher"},
        {"created_by": "LABEL x", "empty_layer": true},
        {"created_by": "launch-config"},
        {"created_by": "app"},
    ]);
    let result = rebase(&app, &run_image_v2(), &options()).unwrap();
    let config = json_of(&result.config);
    assert_eq!(
        config["history"],
        json!([
            {"created_by": "os"},
            {"created_by": "ENV X=1", "empty_layer": true},
            {"created_by": "packages v2"},
            {"created_by": "certs"},
            {"created_by": "USER cnb", "empty_layer": true},
            {"created_by": "launcher"},
            {"created_by": "LABEL x", "empty_layer": true},
            {"created_by": "launch-config"},
            {"created_by": "app"},
        ])
    );
}

#[test]
fn a_history_that_does_not_count_the_layers_is_normalised() {
    // The app's history is one entry short: its layers get empty entries (imgutil does the same).
    let mut app = app_on(&run_image_v1());
    app.config["history"].as_array_mut().unwrap().pop();
    let result = rebase(&app, &run_image_v2(), &options()).unwrap();
    let history = json_of(&result.config)["history"].as_array().unwrap().clone();
    assert_eq!(&history[..5], run_image_v2().config["history"].as_array().unwrap().as_slice());
    assert_eq!(&history[5..], &[json!({}), json!({}), json!({})]);

    // No history on either side: none in the result.
    let mut app = app_on(&run_image_v1());
    app.config.as_object_mut().unwrap().remove("history");
    let mut v2 = run_image_v2();
    v2.config.as_object_mut().unwrap().remove("history");
    let result = rebase(&app, &v2, &options()).unwrap();
    assert!(json_of(&result.config).get("history").is_none());
    // The run image alone has one: the app's layers get empty entries.
    let result = rebase(&app, &run_image_v2(), &options()).unwrap();
    assert_eq!(json_of(&result.config)["history"].as_array().unwrap().len(), 5 + 3);
}

mod platforms;
