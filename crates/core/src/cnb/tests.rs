use super::*;
use serde_json::json;
use std::collections::BTreeMap;

/// An image config JSON with these labels, env and layers.
fn config(labels: serde_json::Value, env: &[&str], diff_ids: &[&str], arch: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "architecture": arch, "os": "linux",
        "config": { "Env": env, "Labels": labels },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
    }))
    .unwrap()
}

/// A builder shaped like `paketobuildpacks/builder-jammy-base` (legacy `stack` table only).
struct Jammy {
    buildpacks: Vec<(&'static str, &'static str, &'static str)>,
    lifecycle: &'static str,
    stack_id: &'static str,
    run_image: &'static str,
    base: Vec<&'static str>,
    order: Vec<&'static str>,
    arch: &'static str,
    description: &'static str,
    uid: &'static str,
}

impl Jammy {
    fn new() -> Self {
        Jammy {
            buildpacks: vec![
                ("paketo-buildpacks/java", "18.1.0", "sha256:java1"),
                ("paketo-buildpacks/nodejs", "7.2.0", "sha256:node1"),
                ("paketo-buildpacks/go", "4.14.0", "sha256:go1"),
            ],
            lifecycle: "0.21.13",
            stack_id: "io.buildpacks.stacks.jammy",
            run_image: "index.docker.io/paketobuildpacks/run-jammy-base:latest",
            base: vec!["sha256:base1", "sha256:base2", "sha256:lifecycle"],
            order: vec!["paketo-buildpacks/java", "paketo-buildpacks/nodejs", "paketo-buildpacks/go"],
            arch: "amd64",
            description: "Ubuntu 22.04 Jammy Jellyfish base image with buildpacks for Java, Go, .NET Core, Node.js",
            uid: "1001",
        }
    }

    fn labels(&self) -> serde_json::Value {
        let metadata = json!({
            "description": self.description,
            "buildpacks": self.buildpacks.iter().map(|(id, v, _)| json!({"id": id, "version": v, "homepage": format!("https://github.com/{id}")})).collect::<Vec<_>>(),
            "stack": { "runImage": { "image": self.run_image, "mirrors": null } },
            "lifecycle": { "version": self.lifecycle, "api": {"buildpack": "0.7", "platform": "0.7"},
                "apis": { "buildpack": {"deprecated": [], "supported": ["0.7", "0.8", "0.9", "0.10", "0.11"]},
                          "platform": {"deprecated": [], "supported": ["0.7", "0.12", "0.13", "0.14"]} } },
            "createdBy": { "name": "Pack CLI", "version": "0.38.2+git-abc.build-1" },
        });
        let mut layers = serde_json::Map::new();
        for (id, v, diff) in &self.buildpacks {
            let entry = layers.entry(id.to_string()).or_insert_with(|| json!({}));
            entry[*v] = json!({"api": "0.10", "layerDiffID": diff, "homepage": format!("https://github.com/{id}")});
        }
        let order: Vec<_> = self
            .order
            .iter()
            .map(|id| json!({"group": [{"id": id, "version": self.buildpacks.iter().find(|b| b.0 == *id).map(|b| b.1)}]}))
            .collect();
        json!({
            BUILDER_METADATA: metadata.to_string(),
            STACK_ID: self.stack_id,
            STACK_MIXINS: "[]",
            BUILDPACK_LAYERS: serde_json::Value::Object(layers).to_string(),
            BUILDPACK_ORDER: serde_json::Value::Array(order).to_string(),
        })
    }

    fn config(&self) -> Vec<u8> {
        let mut diffs: Vec<&str> = self.base.clone();
        diffs.extend(self.buildpacks.iter().map(|b| b.2));
        let uid = format!("CNB_USER_ID={}", self.uid);
        config(self.labels(), &[&uid, "CNB_GROUP_ID=1000", "PATH=/usr/bin"], &diffs, self.arch)
    }

    fn metadata(&self) -> BuilderMetadata {
        parse_builder(&self.config()).unwrap().unwrap()
    }

    fn pinned(&self) -> PinnedMetadata {
        single(self.metadata())
    }
}

fn single(m: BuilderMetadata) -> PinnedMetadata {
    let key = format!("{}/{}", m.target.os, m.target.arch);
    PinnedMetadata {
        platforms: [(key, PlatformMetadata::Builder(Box::new(m)))].into(),
        run_image: None,
        packages: Default::default(),
        releases: Default::default(),
        notes: Vec::new(),
    }
}

fn with_run_ref(mut p: PinnedMetadata, image: &str, digest: &str) -> PinnedMetadata {
    p.run_image = Some(RunImagePin {
        image: image.into(),
        reference: Some(format!("{image}@{digest}")),
        packages: BTreeMap::new(),
    });
    p
}

#[test]
fn parses_a_paketo_jammy_builder() {
    let m = Jammy::new().metadata();
    assert_eq!(m.stack_id.as_deref(), Some("io.buildpacks.stacks.jammy"));
    assert_eq!(m.lifecycle.version.as_deref(), Some("0.21.13"));
    assert_eq!(m.lifecycle.platform_apis, ["0.7", "0.12", "0.13", "0.14"], "in version order");
    assert_eq!(m.run_image(), Some("index.docker.io/paketobuildpacks/run-jammy-base:latest"));
    assert_eq!(m.buildpacks.len(), 3);
    assert_eq!(m.buildpacks[0].id, "paketo-buildpacks/go");
    assert_eq!(m.layers["paketo-buildpacks/java"]["18.1.0"].layer_diff_id.as_deref(), Some("sha256:java1"));
    assert_eq!(m.order.as_ref().unwrap().len(), 3);
    assert_eq!(m.base_layers, ["sha256:base1", "sha256:base2", "sha256:lifecycle"]);
    assert_eq!((m.user_id, m.group_id), (Some(1001), Some(1000)));
    assert_eq!(m.target.arch, "amd64");
    assert_eq!(m.created_by.as_ref().unwrap().name.as_deref(), Some("Pack CLI"));
}

#[test]
fn parses_a_paketo_noble_builder_with_images_and_base_labels() {
    let metadata = json!({
        "description": "Ubuntu 24.04 Noble Numbat base image",
        "buildpacks": [{"id": "paketo-buildpacks/java", "version": "19.0.0"}],
        "stack": { "runImage": { "image": "docker.io/paketobuildpacks/ubuntu-noble-run:latest" } },
        "images": [{ "image": "docker.io/paketobuildpacks/ubuntu-noble-run:latest", "mirrors": [] }],
        "lifecycle": { "version": "0.21.13", "apis": { "buildpack": {"supported": ["0.11"]}, "platform": {"deprecated": null, "supported": ["0.13"]} } },
        "createdBy": null,
        "extensions": [],
    });
    let labels = json!({
        BUILDER_METADATA: metadata.to_string(),
        STACK_ID: "io.buildpacks.stacks.noble",
        "io.buildpacks.base.distro.name": "ubuntu",
        "io.buildpacks.base.distro.version": "24.04",
        "io.buildpacks.base.id": "io.buildpacks.stacks.noble",
    });
    let m = parse_builder(&config(labels, &["CNB_USER_ID=1002"], &["sha256:b"], "arm64")).unwrap().unwrap();
    assert_eq!(m.run_images.len(), 1, "images[] and stack.runImage name one run image");
    assert_eq!(m.target.distro_name.as_deref(), Some("ubuntu"));
    assert_eq!(m.target.distro_version.as_deref(), Some("24.04"));
    assert_eq!(m.base_labels.len(), 3);
    assert_eq!(m.lifecycle.platform_apis, ["0.13"]);
    assert!(m.order.is_none() && m.layers.is_empty());
    assert_eq!((m.user_id, m.group_id), (Some(1002), None));
}

#[test]
fn parses_a_heroku_24_builder_with_mirrors_and_label_fallbacks() {
    let metadata = json!({
        "description": "Ubuntu 24.04 AMD64+ARM64 base image with buildpacks for .NET, Go, Java, Node.js, PHP, Python, Ruby & Scala.",
        "buildpacks": [{"id": "heroku/nodejs", "version": "3.2.1"}, {"id": "heroku/python", "version": "0.19.1"}],
        "stack": { "runImage": { "image": "docker.io/heroku/heroku:24", "mirrors": ["public.ecr.aws/heroku/heroku:24"] } },
        "images": [{ "image": "docker.io/heroku/heroku:24", "mirrors": ["public.ecr.aws/heroku/heroku:24"] }],
        "lifecycle": { "version": "" },
    });
    let labels = json!({
        BUILDER_METADATA: metadata.to_string(),
        STACK_ID: "heroku-24",
        LIFECYCLE_VERSION: "0.21.12",
        LIFECYCLE_APIS: json!({"platform": {"supported": ["0.13", "0.14"]}}).to_string(),
    });
    let m = parse_builder(&config(labels, &[], &[], "amd64")).unwrap().unwrap();
    assert_eq!(m.lifecycle.version.as_deref(), Some("0.21.12"), "falls back to the lifecycle label");
    assert_eq!(m.lifecycle.platform_apis, ["0.13", "0.14"]);
    assert_eq!(m.run_images[0].mirrors, ["public.ecr.aws/heroku/heroku:24"]);
    assert_eq!(m.buildpacks[0].id, "heroku/nodejs");
}

#[test]
fn malformed_labels_are_typed_errors_naming_the_label() {
    for (name, value) in [
        (BUILDER_METADATA, "{not json"),
        (BUILDER_METADATA, "\"a string\""),
        (STACK_MIXINS, "{\"a\": 1}"),
        (BUILDPACK_ORDER, "[{\"group\": [{\"version\": \"1\"}]}]"),
        (BUILDPACK_LAYERS, "[]"),
    ] {
        let mut labels = json!({ BUILDER_METADATA: "{}" });
        labels[name] = json!(value);
        match parse_builder(&config(labels, &[], &[], "amd64")) {
            Err(MetadataError::Label { label, .. }) => assert_eq!(label, name),
            other => panic!("{name}={value}: {other:?}"),
        }
    }
    assert!(matches!(parse_builder(b"[1,2"), Err(MetadataError::Config(_))));
    assert!(matches!(platform_metadata(b"{\"config\": 5}"), PlatformMetadata::Unreadable { .. }));
}

#[test]
fn tolerates_nulls_and_missing_parts() {
    let m = parse_builder(br#"{"config": {"Labels": {"io.buildpacks.builder.metadata": "{\"buildpacks\": null, \"stack\": null, \"lifecycle\": null}"}}}"#)
        .unwrap()
        .unwrap();
    assert!(m.buildpacks.is_empty() && m.run_images.is_empty() && m.lifecycle.version.is_none());
    assert_eq!(parse_builder(br#"{"config": null, "rootfs": null}"#).unwrap(), None);
    assert_eq!(
        parse_builder(br#"{"config": {"Labels": {"io.buildpacks.stack.id": "x"}}}"#).unwrap(),
        None,
        "a run image is not a builder"
    );
}

#[test]
fn parses_app_images() {
    let lifecycle = json!({
        "app": [{"sha": "sha256:app"}],
        "buildpacks": [{"key": "paketo-buildpacks/java", "version": "18.1.0", "layers": {}}],
        "runImage": { "image": "index.docker.io/paketobuildpacks/run-jammy-base:latest", "topLayer": "sha256:top",
                      "reference": "index.docker.io/paketobuildpacks/run-jammy-base@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" },
        "stack": { "runImage": { "image": "index.docker.io/paketobuildpacks/run-jammy-base:latest" } },
    });
    let build = json!({
        "buildpacks": [{"id": "paketo-buildpacks/java", "version": "18.1.0"}, {"id": "paketo-buildpacks/ca-certificates", "version": "3.8.0"}],
        "launcher": {"version": "0.21.13", "source": {"git": {"repository": "r", "commit": "c"}}},
        "processes": [],
    });
    let labels = json!({ LIFECYCLE_METADATA: lifecycle.to_string(), BUILD_METADATA: build.to_string(), STACK_ID: "io.buildpacks.stacks.jammy" });
    let app = parse_app(&config(labels, &["CNB_PLATFORM_API=0.13"], &[], "amd64")).unwrap().unwrap();
    let run = app.run_image.as_ref().unwrap();
    assert_eq!(run.top_layer.as_deref(), Some("sha256:top"));
    assert_eq!(app.run_image_digest(), Some(format!("sha256:{}", "a".repeat(64)).as_str()));
    assert_eq!(app.buildpacks.len(), 2);
    assert_eq!(app.launcher_version.as_deref(), Some("0.21.13"));
    assert_eq!(app.platform_api.as_deref(), Some("0.13"));
    assert_eq!(parse_app(&config(json!({}), &[], &[], "amd64")).unwrap(), None);
    assert!(matches!(
        parse_app(&config(json!({ LIFECYCLE_METADATA: "[" }), &[], &[], "amd64")),
        Err(MetadataError::Label { label: LIFECYCLE_METADATA, .. })
    ));
}

/// (what changed, the resulting kind, the reasons).
fn case(
    name: &str,
    previous: &PinnedMetadata,
    current: &PinnedMetadata,
    kind: ChangeKind,
    reasons: &[Reason],
) -> Change {
    let change = classify(previous, current);
    assert_eq!(change.kind, kind, "{name}: {change:#?}");
    assert_eq!(change.reasons, reasons, "{name}: {change:#?}");
    change
}

#[test]
fn classify_rules() {
    use ChangeKind::*;
    use Reason as R;
    let base = Jammy::new();
    let run = "index.docker.io/paketobuildpacks/run-jammy-base:latest";
    let a = "sha256:".to_string() + &"a".repeat(64);
    let b = "sha256:".to_string() + &"b".repeat(64);

    case("identical", &base.pinned(), &base.pinned(), None, &[]);

    let mut cosmetic = Jammy::new();
    cosmetic.description = "new words";
    let c = case("only description/createdBy", &base.pinned(), &cosmetic.pinned(), None, &[]);
    assert!(c.summary().starts_with("none —"));

    let c = case(
        "only the run image moved",
        &with_run_ref(base.pinned(), run, &a),
        &with_run_ref(base.pinned(), run, &b),
        Rebase,
        &[R::Stack, R::RunImage],
    );
    let ri = c.run_image.unwrap();
    assert_eq!(ri.to.unwrap(), format!("{run}@{b}"));

    let mut layers = Jammy::new();
    layers.base = vec!["sha256:base1", "sha256:base2-patched", "sha256:lifecycle"];
    let c = case("same metadata, different base layers", &base.pinned(), &layers.pinned(), Rebase, &[R::Stack]);
    assert_eq!(c.summary(), "rebase — base layers changed");

    let mut bump = Jammy::new();
    bump.buildpacks[0] = ("paketo-buildpacks/java", "18.2.0", "sha256:java2");
    let c = case("buildpack bump", &base.pinned(), &bump.pinned(), Rebuild, &[R::Buildpack]);
    assert_eq!(
        c.buildpacks,
        [BuildpackChange {
            id: "paketo-buildpacks/java".into(),
            from: Some("18.1.0".into()),
            to: Some("18.2.0".into()),
            republished: false
        }]
    );
    assert_eq!(c.summary(), "rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0");

    case(
        "run image and a buildpack",
        &with_run_ref(base.pinned(), run, &a),
        &with_run_ref(bump.pinned(), run, &b),
        Rebuild,
        &[R::Stack, R::Buildpack, R::RunImage],
    );

    let mut removed = Jammy::new();
    removed.buildpacks.pop();
    removed.order.pop();
    let c = case("buildpack removed", &base.pinned(), &removed.pinned(), Rebuild, &[R::Buildpack, R::Order]);
    assert_eq!(c.buildpacks[0].to, Option::None);
    assert_eq!(c.summary(), "rebuild — paketo-buildpacks/go 4.14.0 removed; detection order changed");

    let mut added = Jammy::new();
    added.buildpacks.push(("paketo-buildpacks/python", "2.0.0", "sha256:py"));
    let c = case("buildpack added (not in order)", &base.pinned(), &added.pinned(), Rebuild, &[R::Buildpack]);
    assert_eq!(c.buildpacks[0].from, Option::None);

    let mut lifecycle = Jammy::new();
    lifecycle.lifecycle = "0.21.14";
    let c = case("lifecycle only", &base.pinned(), &lifecycle.pinned(), Rebuild, &[R::Lifecycle]);
    assert_eq!(c.summary(), "rebuild — lifecycle 0.21.13 → 0.21.14");

    let mut stack = Jammy::new();
    stack.stack_id = "io.buildpacks.stacks.noble";
    let c = case("stack id, buildpacks equal", &base.pinned(), &stack.pinned(), Rebuild, &[R::StackId]);
    assert_eq!(c.stack_id.unwrap().to.as_deref(), Some("io.buildpacks.stacks.noble"));

    let mut order = Jammy::new();
    order.order.reverse();
    case("detection order", &base.pinned(), &order.pinned(), Rebuild, &[R::Order]);

    let mut republished = Jammy::new();
    republished.buildpacks[1].2 = "sha256:node1-rebuilt";
    let c = case("same version, new layer", &base.pinned(), &republished.pinned(), Rebuild, &[R::Buildpack]);
    assert!(c.buildpacks[0].republished);

    let mut uid = Jammy::new();
    uid.uid = "1002";
    case("CNB user changed", &base.pinned(), &uid.pinned(), Rebuild, &[R::StackId]);

    let mut renamed = Jammy::new();
    renamed.run_image = "docker.io/paketobuildpacks/run-jammy-base:latest";
    case("same run image, other spelling", &base.pinned(), &renamed.pinned(), None, &[]);
    renamed.run_image = "docker.io/paketobuildpacks/run-jammy-base:0.2";
    let c = case("run image renamed", &base.pinned(), &renamed.pinned(), Rebase, &[R::Stack, R::RunImage]);
    assert_eq!(c.run_image.unwrap().to.as_deref(), Some("docker.io/paketobuildpacks/run-jammy-base:0.2"));

    let not_builder = PinnedMetadata {
        platforms: [("linux/amd64".into(), PlatformMetadata::NotBuilder)].into(),
        run_image: Option::None,
        packages: Default::default(),
        releases: Default::default(),
        notes: Vec::new(),
    };
    let c = case("non-CNB image", &base.pinned(), &not_builder, Unknown, &[]);
    assert!(c.note.unwrap().contains("not a CNB builder"));
    let unreadable = PinnedMetadata {
        platforms: [("linux/amd64".into(), PlatformMetadata::Unreadable { error: "label x is malformed".into() })]
            .into(),
        run_image: Option::None,
        packages: Default::default(),
        releases: Default::default(),
        notes: Vec::new(),
    };
    case("unreadable metadata", &unreadable, &base.pinned(), Unknown, &[]);
    case("nothing known", &PinnedMetadata::default(), &base.pinned(), Unknown, &[]);

    let mut arm = Jammy::new();
    arm.arch = "arm64";
    let c = case("target arch changed, no common platform", &base.pinned(), &arm.pinned(), Rebuild, &[R::StackId]);
    assert!(c.platforms.contains_key("linux/amd64 → linux/arm64"));
}

#[test]
fn multi_platform_changes_combine_to_the_strongest() {
    let two = |amd: &Jammy, arm: &Jammy| {
        let mut arm_meta = arm.metadata();
        arm_meta.target.arch = "arm64".into();
        PinnedMetadata {
            platforms: [
                ("linux/amd64".into(), PlatformMetadata::Builder(Box::new(amd.metadata()))),
                ("linux/arm64".into(), PlatformMetadata::Builder(Box::new(arm_meta))),
            ]
            .into(),
            run_image: None,
            packages: Default::default(),
            releases: Default::default(),
            notes: Vec::new(),
        }
    };
    let base = Jammy::new();
    let mut rebuilt = Jammy::new();
    rebuilt.lifecycle = "0.21.14";
    let mut rebased = Jammy::new();
    rebased.base = vec!["sha256:base1", "sha256:patched"];
    let change = classify(&two(&base, &base), &two(&rebuilt, &rebased));
    assert_eq!(change.kind, ChangeKind::Rebuild);
    assert_eq!(change.platforms["linux/amd64"].kind, ChangeKind::Rebuild);
    assert_eq!(change.platforms["linux/arm64"].kind, ChangeKind::Rebase);
    assert_eq!(change.reasons, [Reason::Stack, Reason::Lifecycle]);

    let mut both = two(&base, &rebased);
    both.platforms.insert("linux/amd64".into(), PlatformMetadata::NotBuilder);
    let change = classify(&two(&base, &base), &both);
    assert_eq!(change.kind, ChangeKind::Unknown, "unknown beats rebase: never a silent rebase");
}

/// A builder config with `n` buildpacks in its metadata, layers and order labels (16,000 make the
/// 6.5 MB config of the report).
fn huge_builder(n: usize) -> Vec<u8> {
    let ids: Vec<String> = (0..n).map(|i| format!("example-buildpacks/buildpack-number-{i:05}")).collect();
    let metadata = json!({
        "description": "a builder with very many buildpacks",
        "buildpacks": ids.iter().map(|id| json!({"id": id, "version": "1.2.3", "homepage": format!("https://github.com/{id}")})).collect::<Vec<_>>(),
        "stack": { "runImage": { "image": "r.example.com/run:1" } },
        "lifecycle": { "version": "0.21.13" },
    });
    let layers: serde_json::Map<String, serde_json::Value> = ids
        .iter()
        .map(|id| (id.clone(), json!({"1.2.3": {"api": "0.10", "layerDiffID": format!("sha256:{:064}", 7), "homepage": format!("https://github.com/{id}")}})))
        .collect();
    let order: Vec<_> = ids.iter().map(|id| json!({"group": [{"id": id, "version": "1.2.3"}]})).collect();
    config(
        json!({
            BUILDER_METADATA: metadata.to_string(),
            STACK_ID: "io.buildpacks.stacks.jammy",
            BUILDPACK_LAYERS: serde_json::Value::Object(layers).to_string(),
            BUILDPACK_ORDER: serde_json::Value::Array(order).to_string(),
        }),
        &["CNB_USER_ID=1001"],
        &["sha256:base"],
        "amd64",
    )
}

#[test]
fn metadata_over_the_limits_becomes_an_unknown_move_with_a_note_not_the_metadata() {
    let at_limit = parse_builder(&huge_builder(MAX_ENTRIES)).unwrap().unwrap();
    assert_eq!(at_limit.buildpacks.len(), MAX_ENTRIES, "the limit itself is accepted");
    let error = parse_builder(&huge_builder(MAX_ENTRIES + 1)).unwrap_err();
    assert!(error.to_string().contains("a list has more than 2000 entries"), "{error}");

    let huge = huge_builder(16_000);
    assert!(huge.len() > 6_000_000, "{} bytes", huge.len());
    let over = platform_metadata(&huge);
    let PlatformMetadata::Unreadable { error } = &over else { panic!("{over:?}") };
    assert!(error.contains("over the size limits") && error.contains("bytes, more than 1048576"), "{error}");
    // What is stored and sent stays small: the note, never the metadata.
    assert!(serde_json::to_vec(&over).unwrap().len() < 512, "{error}");
    let change = classify(
        &Jammy::new().pinned(),
        &PinnedMetadata {
            platforms: [("linux/amd64".into(), over)].into(),
            run_image: None,
            packages: Default::default(),
            releases: Default::default(),
            notes: Vec::new(),
        },
    );
    assert_eq!(change.kind, ChangeKind::Unknown);
    assert!(change.note.as_deref().is_some_and(|n| n.contains("over the size limits")), "{change:?}");
    assert!(serde_json::to_vec(&change).unwrap().len() < 1024);

    // One label over 1 MiB, however few entries it has, is not copied.
    let big = "x".repeat(MAX_LABEL_BYTES + 1);
    let long = config(json!({ BUILDER_METADATA: json!({"description": big}).to_string() }), &[], &[], "amd64");
    let error = parse_builder(&long).unwrap_err();
    assert!(matches!(&error, MetadataError::OverLimit(m) if m.contains(BUILDER_METADATA)), "{error}");
    // Labels outside io.buildpacks.* are skipped, whatever their size or type.
    let mut labels = Jammy::new().labels();
    labels["org.example.blob"] = json!(big);
    labels["org.example.number"] = json!(5);
    let other = config(labels, &["CNB_USER_ID=1001"], &["sha256:base1"], "amd64");
    assert_eq!(parse_builder(&other).unwrap().unwrap().buildpacks.len(), 3);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn metadata() -> impl Strategy<Value = BuilderMetadata> {
        let buildpack = (0..6usize, 0..3usize);
        (
            proptest::collection::btree_map(0..6usize, 0..3usize, 0..5),
            proptest::collection::vec("[a-f]{3}", 0..4),
            prop_oneof![Just("0.21.13"), Just("0.21.14")],
            prop_oneof![Just("io.buildpacks.stacks.jammy"), Just("heroku-24")],
            prop::option::of(proptest::collection::vec(buildpack, 0..4)),
        )
            .prop_map(|(bps, base, lifecycle, stack, order)| {
                let buildpacks = bps
                    .iter()
                    .map(|(id, v)| Buildpack {
                        id: format!("bp/{id}"),
                        version: Some(format!("1.{v}.0")),
                        homepage: None,
                    })
                    .collect();
                BuilderMetadata {
                    stack_id: Some(stack.into()),
                    buildpacks,
                    order: order.map(|o| {
                        vec![
                            o.into_iter()
                                .map(|(id, v)| OrderEntry {
                                    id: format!("bp/{id}"),
                                    version: Some(format!("1.{v}.0")),
                                    optional: false,
                                })
                                .collect(),
                        ]
                    }),
                    lifecycle: Lifecycle { version: Some(lifecycle.into()), ..Default::default() },
                    target: Target { os: "linux".into(), arch: "amd64".into(), ..Default::default() },
                    base_layers: base,
                    run_images: vec![RunImage {
                        image: "docker.io/paketobuildpacks/run-jammy-base:latest".into(),
                        mirrors: vec![],
                    }],
                    ..Default::default()
                }
            })
    }

    proptest! {
        #[test]
        fn classify_of_the_same_metadata_is_none(m in metadata()) {
            prop_assert_eq!(classify(&single(m.clone()), &single(m)).kind, ChangeKind::None);
        }

        #[test]
        fn a_buildpack_change_never_yields_a_rebase(
            m in metadata(), other in metadata(), which in 0..3usize, bump in 1..5usize
        ) {
            let mut changed = other.clone();
            changed.stack_id = m.stack_id.clone();
            changed.lifecycle = m.lifecycle.clone();
            changed.order = m.order.clone();
            changed.buildpacks = m.buildpacks.clone();
            match which {
                0 => changed.buildpacks.push(Buildpack { id: "bp/new".into(), version: Some("9.9.9".into()), homepage: None }),
                1 if !changed.buildpacks.is_empty() => { changed.buildpacks.remove(0); }
                _ if !changed.buildpacks.is_empty() => { changed.buildpacks[0].version = Some(format!("2.{bump}.0")); }
                _ => changed.buildpacks.push(Buildpack { id: "bp/new".into(), version: None, homepage: None }),
            }
            let change = classify(&single(m), &single(changed));
            prop_assert_ne!(change.kind, ChangeKind::Rebase);
            prop_assert!(change.reasons.contains(&Reason::Buildpack));
        }

        #[test]
        fn buildpack_list_order_does_not_matter(a in metadata(), b in metadata(), seed in any::<u64>()) {
            let shuffle = |mut m: BuilderMetadata| {
                let n = m.buildpacks.len();
                if n > 1 { m.buildpacks.rotate_left((seed as usize) % n); }
                m.buildpacks.reverse();
                m
            };
            prop_assert_eq!(classify(&single(a.clone()), &single(b.clone())), classify(&single(shuffle(a)), &single(shuffle(b))));
        }
    }
}

#[test]
fn a_base_move_carries_the_build_image_package_diff() {
    use crate::packages::{Package, Packages, Source};
    let listed = |openssl: &str| {
        let packages = vec![Package { name: "openssl".into(), arch: Some("amd64".into()), version: openssl.into() }];
        BTreeMap::from([(
            "linux/amd64".to_string(),
            Packages::Listed { source: Source::PaketoLabel, packages, cut_at: None },
        )])
    };
    let with = |j: &Jammy, openssl: &str| PinnedMetadata { packages: listed(openssl), ..j.pinned() };
    let base = Jammy::new();
    let mut moved = Jammy::new();
    moved.base = vec!["sha256:base1", "sha256:base2-patched", "sha256:lifecycle"];
    let c = case("base moved", &with(&base, "1"), &with(&moved, "2"), ChangeKind::Rebase, &[Reason::Stack]);
    let packages = c.packages.clone().unwrap();
    assert_eq!((packages.changed[0].from.as_str(), packages.changed[0].to.as_str()), ("1", "2"));
    assert_eq!(c.summary(), "rebase — base layers changed; openssl 1 → 2");
    assert_eq!(serde_json::from_value::<Change>(serde_json::to_value(&c).unwrap()).unwrap(), c);
    // The builder's run image moved: its lists, not the build image's, are what reach app images.
    let run = "index.docker.io/paketobuildpacks/run-jammy-base:latest";
    let on_run = |j: &Jammy, digest: &str, openssl: &str| {
        let mut p = with_run_ref(with(j, "1"), run, digest);
        p.run_image.as_mut().unwrap().packages = listed(openssl);
        p
    };
    let c = classify(&on_run(&base, "sha256:r1", "3.0.1"), &on_run(&base, "sha256:r2", "3.0.2"));
    assert_eq!(c.reasons, [Reason::Stack, Reason::RunImage]);
    assert_eq!(c.packages.unwrap().changed[0].to, "3.0.2");
    // The run image moved without lists on one side: a note, not the build image's (empty) diff.
    let mut bare = on_run(&base, "sha256:r2", "3.0.2");
    bare.run_image.as_mut().unwrap().packages.clear();
    let c = classify(&on_run(&base, "sha256:r1", "3.0.1"), &bare);
    assert!(c.packages.is_none());
    assert_eq!(c.packages_note.as_deref(), Some("the new image has no package list"));
    // A buildpack-only move says nothing about packages, even when the lists differ.
    let mut bumped = Jammy::new();
    bumped.buildpacks[0].1 = "18.2.0";
    let c = classify(&with(&base, "1"), &with(&bumped, "2"));
    assert!(c.packages.is_none() && c.packages_note.is_none(), "{c:#?}");
}
