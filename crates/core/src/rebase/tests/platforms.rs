//! Platforms and indexes: which child an index rebase picks, what it keeps, and one whole rebase
//! checked against a result written by hand.

use super::*;

// ---- platforms and indexes ----------------------------------------------------------------------

fn index(entries: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries,
        "annotations": {"org.opencontainers.image.created": "2024-06-01"},
    }))
    .unwrap()
}

fn entry(digest: &str, platform: Value) -> Value {
    json!({"mediaType": OCI_MANIFEST, "digest": digest, "size": 500, "platform": platform})
}

fn platform(os: &str, architecture: &str, variant: Option<&str>) -> Platform {
    Platform { os: os.into(), architecture: architecture.into(), variant: variant.map(Into::into), os_version: None }
}

#[test]
fn config_platform_reads_os_architecture_and_variant() {
    let mut app = app_on(&run_image_v1());
    assert_eq!(config_platform(&app.config_bytes()).unwrap(), platform("linux", "amd64", None));
    assert_eq!(config_platform(&app.config_bytes()).unwrap().to_string(), "linux/amd64");
    app.config["architecture"] = json!("arm64");
    app.config["variant"] = json!("v8");
    app.config["os.version"] = json!("1");
    let p = config_platform(&app.config_bytes()).unwrap();
    assert_eq!(p.to_string(), "linux/arm64/v8");
    assert_eq!(p.os_version.as_deref(), Some("1"));
    app.config.as_object_mut().unwrap().remove("os");
    assert_eq!(config_platform(&app.config_bytes()).unwrap_err().to_string(), "app config: no os or architecture");
    assert!(config_platform(b"nope").is_err());
}

#[test]
fn select_platform_picks_the_matching_child() {
    let (amd, arm64, v6, v7, att) = (sha("amd"), sha("arm64"), sha("v6"), sha("v7"), sha("attestation"));
    let run_index = index(json!([
        entry(&amd, json!({"os": "linux", "architecture": "amd64"})),
        entry(&v6, json!({"os": "linux", "architecture": "arm", "variant": "v6"})),
        entry(&v7, json!({"os": "linux", "architecture": "arm", "variant": "v7"})),
        entry(&arm64, json!({"os": "linux", "architecture": "arm64"})),
        entry(&att, json!({"os": "unknown", "architecture": "unknown"})),
    ]));
    assert_eq!(select_platform(&run_index, &platform("linux", "amd64", None)).unwrap(), amd);
    // The variant decides between children of one architecture.
    assert_eq!(select_platform(&run_index, &platform("linux", "arm", Some("v7"))).unwrap(), v7);
    assert_eq!(select_platform(&run_index, &platform("linux", "arm", Some("v6"))).unwrap(), v6);
    // arm64 is v8 whether written or not.
    assert_eq!(select_platform(&run_index, &platform("linux", "arm64", Some("v8"))).unwrap(), arm64);
    // An app without a variant takes the first child of its architecture.
    assert_eq!(select_platform(&run_index, &platform("linux", "arm", None)).unwrap(), v6);
    let refusal = select_platform(&run_index, &platform("linux", "s390x", None)).unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "the run image has no linux/s390x image (it has linux/amd64, linux/arm/v6, linux/arm/v7, linux/arm64, unknown/unknown)"
    );
    // An exact variant wins over a child that names none, wherever it stands.
    let (bare, exact) = (sha("bare arm"), sha("exact arm"));
    let mixed = index(json!([
        entry(&bare, json!({"os": "linux", "architecture": "arm"})),
        entry(&exact, json!({"os": "linux", "architecture": "arm", "variant": "v7"})),
    ]));
    assert_eq!(select_platform(&mixed, &platform("linux", "arm", Some("v7"))).unwrap(), exact);
    assert_eq!(select_platform(&mixed, &platform("linux", "arm", Some("v6"))).unwrap(), bare);
    let only_v6 = index(json!([entry(&v6, json!({"os": "linux", "architecture": "arm", "variant": "v6"}))]));
    assert!(select_platform(&only_v6, &platform("linux", "arm", Some("v7"))).is_err());
    assert!(select_platform(b"{}", &platform("linux", "amd64", None)).is_err());
}

#[test]
fn rebased_index_keeps_other_entries_and_annotations() {
    let (amd, arm, att) = (sha("amd"), sha("arm"), sha("attestation"));
    let mut attestation = entry(&att, json!({"os": "unknown", "architecture": "unknown"}));
    attestation["annotations"] =
        json!({"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": amd});
    let mut arm_entry = entry(&arm, json!({"os": "linux", "architecture": "arm64"}));
    arm_entry["annotations"] = json!({"org.example": "kept"});
    let original = index(json!([entry(&amd, json!({"os": "linux", "architecture": "amd64"})), arm_entry, attestation]));
    let new_arm = sha("new arm");
    let replaced = BTreeMap::from([(arm.clone(), (new_arm.clone(), 777, DOCKER_MANIFEST.to_string()))]);
    let (bytes, digest) = rebased_index(&original, &replaced).unwrap();
    assert_eq!(digest, sha_bytes(&bytes));
    let mut expected = json_of(&original);
    expected["manifests"][1]["digest"] = json!(new_arm);
    expected["manifests"][1]["size"] = json!(777);
    expected["manifests"][1]["mediaType"] = json!(DOCKER_MANIFEST);
    assert_eq!(json_of(&bytes), expected);

    let unknown = BTreeMap::from([(sha("nowhere"), (new_arm, 1, OCI_MANIFEST.to_string()))]);
    assert_eq!(
        rebased_index(&original, &unknown).unwrap_err().to_string(),
        format!("app index: no entry {}", sha("nowhere"))
    );
    assert!(rebased_index(b"[]", &replaced).is_err());
}

// ---- one result written by hand from the rules --------------------------------------------------

#[test]
fn a_small_rebase_gives_the_result_written_by_hand() {
    const OLD_BLOB: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const APP_BLOB: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const NEW_BLOB: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
    const NEW_REF: &str = "example.com/run@sha256:8888888888888888888888888888888888888888888888888888888888888888";

    let app_config = br#"{
        "architecture": "amd64", "os": "linux", "created": "1980-01-01T00:00:01Z",
        "config": {
            "Env": ["CNB_PLATFORM_API=0.12"], "Entrypoint": ["/cnb/process/web"],
            "Labels": {
                "io.buildpacks.stack.id": "old",
                "io.buildpacks.base.distro.name": "ubuntu",
                "io.buildpacks.lifecycle.metadata": "{\"runImage\":{\"image\":\"example.com/run\",\"topLayer\":\"sha256:1111111111111111111111111111111111111111111111111111111111111111\",\"reference\":\"example.com/run@sha256:9999999999999999999999999999999999999999999999999999999999999999\"},\"launcher\":{\"sha\":\"sha256:2222222222222222222222222222222222222222222222222222222222222222\"}}",
                "keep": "me"
            }
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:1111111111111111111111111111111111111111111111111111111111111111", "sha256:2222222222222222222222222222222222222222222222222222222222222222"]},
        "history": [{"created_by": "old base"}, {"created_by": "launcher"}]
    }"#;
    let app_manifest = format!(
        r#"{{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "{}", "size": {}}},
            "layers": [
                {{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "{OLD_BLOB}", "size": 10}},
                {{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "{APP_BLOB}", "size": 20}}
            ]}}"#,
        sha_bytes(app_config),
        app_config.len()
    );
    let base_config = br#"{
        "architecture": "amd64", "os": "linux", "created": "2024-06-01T00:00:00Z",
        "config": {"Env": ["PATH=/bin"], "Labels": {
            "io.buildpacks.stack.id": "new", "io.buildpacks.base.distro.name": "ubuntu",
            "io.buildpacks.base.id": "new-id", "other": "x"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:3333333333333333333333333333333333333333333333333333333333333333"]},
        "history": [{"created_by": "new base"}]
    }"#;
    let base_manifest = format!(
        r#"{{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "{}", "size": {}}},
            "layers": [{{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "{NEW_BLOB}", "size": 30}}]}}"#,
        sha_bytes(base_config),
        base_config.len()
    );
    let options = RebaseOptions {
        force: false,
        run_image_name: "example.com/run:latest".into(),
        run_image_reference: NEW_REF.into(),
        known_run_images: Vec::new(),
    };
    let result =
        rebase_platform(app_manifest.as_bytes(), app_config, base_manifest.as_bytes(), base_config, &options).unwrap();

    let mut config = json_of(&result.config);
    let metadata = config["config"]["Labels"].as_object_mut().unwrap().remove(LIFECYCLE_METADATA).unwrap();
    let metadata: Value = serde_json::from_str(metadata.as_str().unwrap()).unwrap();
    assert_eq!(
        metadata,
        json!({
            "runImage": {
                "image": "example.com/run",
                "topLayer": "sha256:3333333333333333333333333333333333333333333333333333333333333333",
                "reference": "example.com/run@sha256:8888888888888888888888888888888888888888888888888888888888888888"
            },
            "launcher": {"sha": "sha256:2222222222222222222222222222222222222222222222222222222222222222"}
        })
    );
    assert_eq!(
        config,
        json!({
            "architecture": "amd64", "os": "linux", "created": "1980-01-01T00:00:01Z",
            "config": {
                "Env": ["CNB_PLATFORM_API=0.12"], "Entrypoint": ["/cnb/process/web"],
                "Labels": {
                    "io.buildpacks.stack.id": "new",
                    "io.buildpacks.base.distro.name": "ubuntu",
                    "io.buildpacks.base.id": "new-id",
                    "keep": "me"
                }
            },
            "rootfs": {"type": "layers", "diff_ids": [
                "sha256:3333333333333333333333333333333333333333333333333333333333333333",
                "sha256:2222222222222222222222222222222222222222222222222222222222222222"
            ]},
            "history": [{"created_by": "new base"}, {"created_by": "launcher"}]
        })
    );
    assert_eq!(
        json_of(&result.manifest),
        json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha_bytes(&result.config),
                "size": result.config.len()
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", "size": 30},
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "size": 20}
            ]
        })
    );
    assert_eq!(result.manifest_digest, sha_bytes(&result.manifest));
    assert_eq!(result.manifest_media_type, "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        result.base_blobs,
        [Blob { digest: NEW_BLOB.into(), size: 30, media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into() }]
    );
    assert_eq!(
        result.app_blobs,
        [Blob { digest: APP_BLOB.into(), size: 20, media_type: "application/vnd.oci.image.layer.v1.tar+gzip".into() }]
    );
    assert_eq!(
        (result.base_layers_from, result.base_layers_to, result.app_layers, result.already_rebased),
        (1, 1, 1, false)
    );
}
