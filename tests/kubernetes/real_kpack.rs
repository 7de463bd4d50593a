//! The `kpack` runner's Builds on the real control plane, its kpack CRDs as released (no kpack
//! controller runs: the test writes the status kpack would): the daemon creates the Build with
//! `fieldValidation=Strict`, follows it to the end the user sees (`status --json`, the event),
//! and every Build it makes — the one in the server, and `build-spec`'s rebuild and rebase — is
//! also a Build of kpack's own v1alpha2 Go types decoded strictly and validated
//! (`scripts/kpack-build-check`): kpack's CRDs preserve unknown fields, so the server alone would
//! keep one kpack ignores.

use crate::support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use kube::api::{Patch, PatchParams};
use support::cnb::BuilderSpec;
use support::control_plane::control_plane;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

/// Runs `scripts/kpack-build-check` on `dir`; its output when it fails.
fn kpack_check(dir: &Path) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kpack-build-check");
    let out = Command::new(&script).arg(dir).output().unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_kpack_builds_pass_the_crd_strictly_and_kpacks_own_types() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let host = registry.host.clone();
    let run = format!("{host}/demo/run:latest");
    let (_, run_images) = pusher.push_index("demo/run", "latest", &[Image::new("amd64")], Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
    // An app built on the run image (its lifecycle metadata names it): a rebase can be planned.
    let lifecycle = json!({"runImage": {"image": run, "topLayer": "sha256:top",
                                         "reference": format!("{host}/demo/run@{}", run_images[0].digest)}});
    let app = Image::new("amd64")
        .salt("web")
        .label("io.buildpacks.lifecycle.metadata", lifecycle.to_string())
        .label("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy");
    pusher.push_image("apps/web", Some("latest"), &app, Format::Oci).await;
    let ns = control_plane().namespace("kpack").await;
    let ws = Workspace::new();
    std::fs::write(
        ws.path("kpack.yaml"),
        "spec:\n  tolerations:\n  - key: spot\n    operator: Exists\n  containers:\n  - name: build\n    env:\n    - name: BP_LOG_LEVEL\n      value: DEBUG\n",
    )
    .unwrap();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"200ms\"\njitter = \"0s\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"rebuild\"\n\
         source = {{ git = \"https://example.com/web.git\", revision = \"main\", sub_path = \"app\" }}\n\
         env = {{ BP_JVM_VERSION = \"21\" }}\nscheduling = {{ node_selector = {{ zone = \"eu-1b\" }} }}\n"
    ));
    let config_arg = config.to_str().unwrap().to_string();
    let pinned = ws.run(&["run", "--once", "--config", &config_arg]);
    assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
    let text = std::fs::read_to_string(&config).unwrap()
        + &format!(
            "\n[runner]\ntype = \"kpack\"\nmax_concurrent = 2\nmax_attempts = 1\n\n\
             [[runner.pools]]\nname = \"k\"\nkubeconfig = \"{}\"\nnamespace = \"{}\"\nplatforms = [\"linux/amd64\"]\n\
             service_account = \"builder\"\nimage_pull_secrets = [\"regcred\"]\nactive_deadline = \"1h\"\n\
             priority_class_name = \"builds-low\"\ntolerations = [{{ key = \"builds\", operator = \"Exists\" }}]\n\
             resources = {{ requests = {{ cpu = \"1\", memory = \"2Gi\" }} }}\npod_template = \"{}\"\n",
            ns.kubeconfig.display(),
            ns.name,
            ws.path("kpack.yaml").display(),
        );
    std::fs::write(&config, text).unwrap();
    let builds = ws.path("builds");
    std::fs::create_dir(&builds).unwrap();
    for action in ["rebuild", "rebase"] {
        let out =
            ws.run(&["build-spec", "--config", &config_arg, "--image", "web", "--action", action, "--output", "json"]);
        assert_eq!(out.code, Some(0), "{action}: {}", out.stderr);
        let build: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(build["kind"], "Build", "{build}");
        std::fs::write(builds.join(format!("build-spec-{action}.json")), &out.stdout).unwrap();
    }

    let mut daemon = Daemon::start(&config);
    let v2 = BuilderSpec::jammy(&run).bump("paketo-buildpacks/java", "18.2.0");
    pusher.push_image("demo/builder", Some("latest"), &v2.image(), Format::Oci).await;
    let created = daemon.wait_for("the Build", |v| v["message"] == "Build created");
    let key = created["name"].as_str().unwrap().to_string();
    let build = ns.get("kpack.io/v1alpha2", "Build", &key).await.expect("the daemon's Build in the server");
    let spec = &build["spec"];
    assert_eq!(spec["tags"], json!([format!("{host}/apps/web:latest")]), "{build}");
    assert!(spec["builder"]["image"].as_str().unwrap().starts_with(&format!("{host}/demo/builder@sha256:")));
    assert_eq!(spec["builder"]["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        spec["source"],
        json!({"git": {"url": "https://example.com/web.git", "revision": "main"}, "subPath": "app"})
    );
    assert_eq!(spec["serviceAccountName"], "builder");
    assert_eq!(spec["nodeSelector"], json!({"zone": "eu-1b", "kubernetes.io/arch": "amd64"}));
    assert_eq!(spec["activeDeadlineSeconds"], 3600);
    let env: Vec<&Value> = spec["env"].as_array().unwrap().iter().map(|e| &e["name"]).collect();
    assert!(env.contains(&&json!("BP_JVM_VERSION")) && env.contains(&&json!("BP_LOG_LEVEL")), "{env:?}");
    assert_eq!(build["metadata"]["annotations"]["buildermonitor.dev/pool"], "k");
    let manager = build["metadata"]["managedFields"][0]["manager"].clone();
    assert_eq!(manager, "builder-monitor", "the daemon's field manager: {build}");
    std::fs::write(builds.join("server.json"), serde_json::to_vec_pretty(&build).unwrap()).unwrap();

    // kpack's end of the build, on the status subresource.
    let api = ns.api("kpack.io/v1alpha2", "Build").await;
    let status = json!({"status": {"conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-12-07T00:00:00Z"}],
                                   "latestImage": format!("{host}/apps/web@sha256:{}", "b".repeat(64))}});
    api.patch_status(&key, &PatchParams::default(), &Patch::Merge(&status)).await.expect("kpack's status");
    let outcome = daemon.wait_for("the outcome", |v| {
        v["target"] == "builder_monitor_core::event"
            && matches!(v["event_type"].as_str(), Some("build.succeeded" | "build.failed"))
    });
    assert_eq!(outcome["event_type"], "build.succeeded", "{outcome}");
    let (exit, _) = daemon.terminate();
    assert!(exit.success());
    let shown = ws.run(&["status", "--json", "--config", &config_arg]);
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    let shown: Value = serde_json::from_str(&shown.stdout).unwrap();
    let web = shown["images"].as_array().unwrap().iter().find(|i| i["name"] == "web").unwrap();
    assert_eq!(
        (&web["last_action"]["key"], &web["last_action"]["state"], &web["last_action"]["pool"]),
        (&json!(key), &json!("succeeded"), &json!("k")),
        "{web:#}"
    );

    // An app without source: kpack refuses any Build without one (the check below shows it), so
    // the runner names what to add instead of writing one.
    let lib = ws.path("lib.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "\n[runner]",
        &format!("\n[[images]]\nname = \"lib\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"rebase\"\n\n[runner]"),
    );
    std::fs::write(&lib, text).unwrap();
    let lib = lib.to_str().unwrap();
    let out = ws.run(&["build-spec", "--config", lib, "--image", "lib", "--action", "rebase", "--output", "json"]);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("image lib has no source: kpack refuses a Build without one"), "{}", out.stderr);

    // kpack's own types: every Build above passes; and the check can fail.
    kpack_check(&builds).unwrap_or_else(|e| panic!("kpack's v1alpha2 types refuse a Build of the daemon:\n{e}"));
    let mut unknown = build.clone();
    unknown["spec"]["buildCache"] = json!(true);
    let bad = ws.path("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("unknown.json"), serde_json::to_vec(&unknown).unwrap()).unwrap();
    let mut sourceless = build.clone();
    sourceless["spec"].as_object_mut().unwrap().remove("source");
    std::fs::write(bad.join("sourceless.json"), serde_json::to_vec(&sourceless).unwrap()).unwrap();
    let refused = kpack_check(&bad).expect_err("a field kpack does not know, and no source, are refused");
    assert!(
        refused.contains(r#"unknown.json: kpack's v1alpha2 Build does not have: unknown field "spec.buildCache""#),
        "{refused}"
    );
    assert!(
        refused.contains("sourceless.json: kpack's validation refuses it: expected exactly one, got neither"),
        "{refused}"
    );
}
