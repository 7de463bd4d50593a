//! `[[runner.pools]]`, `[runner.kubernetes]` as pool `default`, `[[images]] pool` and
//! `pod_template`.

use super::*;

const BUILDER: &str = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n";

fn image(name: &str, extra: &str) -> String {
    format!("[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"r.example/{name}\"\n{extra}")
}

fn assert_errors(errors: &[String], expect: &[&str]) {
    for (got, want) in errors.iter().zip(expect) {
        assert!(got.contains(want), "got {got:?}, want {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn pools_in_order_after_the_default_with_their_own_settings() {
    let c = parse(&format!(
        r#"{BUILDER}
{}
{}
[runner]
type = "kubernetes"

[runner.kubernetes]
namespace = "builds"

[[runner.pools]]
name = "arm"
platforms = ["linux/arm64", "linux/amd64"]
kubeconfig = "clusters/arm.yaml"
context = "arm"
namespace = "arm-builds"
max_in_flight = 3
queue = "builds"
priority_class = "batch-low"
managed_by = "kueue.x-k8s.io/multikueue"
resources = {{ requests = {{ cpu = "2", memory = "4Gi" }} }}

[[runner.pools]]
name = "win"
type = "kpack"
platforms = ["windows/amd64"]
"#,
        image("api", "pool = \"win\"\n"),
        image("web", "")
    ))
    .unwrap();
    let names: Vec<&str> = c.runner.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["default", "arm", "win"]);
    let default = &c.runner.pools[0];
    assert_eq!(
        (default.kind, default.platforms.as_ref(), default.cluster.as_ref()),
        (RunnerKind::Kubernetes, None, None)
    );
    assert_eq!(default.settings.namespace, "builds");
    let arm = c.runner.pool("arm").unwrap();
    assert_eq!(arm.kind, RunnerKind::Kubernetes, "a pool's type defaults to [runner] type");
    assert_eq!(arm.platforms.as_deref(), Some(&["linux/arm64".to_string(), "linux/amd64".to_string()][..]));
    let cluster = arm.cluster.as_ref().unwrap();
    assert_eq!(cluster.kubeconfig.as_deref(), Some(Path::new("/etc/bm/clusters/arm.yaml")), "relative to the config");
    assert_eq!(cluster.context.as_deref(), Some("arm"));
    assert_eq!((arm.settings.namespace.as_str(), arm.max_in_flight), ("arm-builds", Some(3)));
    assert_eq!(arm.queue.as_deref(), Some("builds"));
    assert_eq!(arm.priority_class.as_deref(), Some("batch-low"));
    assert_eq!(arm.managed_by.as_deref(), Some("kueue.x-k8s.io/multikueue"));
    let win = c.runner.pool("win").unwrap();
    assert_eq!((win.kind, win.cluster.as_ref()), (RunnerKind::Kpack, None));
    assert_eq!(c.image("api").unwrap().pool.as_deref(), Some("win"));
    assert_eq!(c.image("web").unwrap().pool, None);
    // A pool without platforms builds linux/amd64.
    let c = parse(&format!("{BUILDER}[runner]\ntype = \"kpack\"\n[[runner.pools]]\nname = \"a\"\n")).unwrap();
    assert_eq!(c.runner.pools.len(), 1, "no [runner.kubernetes]: no default pool");
    assert_eq!(c.runner.pools[0].platforms.as_deref(), Some(&[DEFAULT_PLATFORM.to_string()][..]));
    assert_eq!(c.runner.pools[0].kind, RunnerKind::Kpack);
}

#[test]
fn bad_pools_are_errors_at_their_line() {
    let errors = parse(&format!(
        r#"{BUILDER}
[runner]
type = "kubernetes"

[runner.kubernetes]
name = "main"

[[runner.pools]]
platforms = ["linux/amd64"]

[[runner.pools]]
name = "Linux"

[[runner.pools]]
name = "default"

[[runner.pools]]
name = "a"
type = "nomad"

[[runner.pools]]
name = "b"
platforms = ["linux", "windows/amd64"]
max_in_flight = 0
queue = "builds"
managed_by = "multikueue"

[[runner.pools]]
name = "c"
type = "kpack"
queue = "builds"
managed_by = "kueue.x-k8s.io/multikueue"

[[runner.pools]]
name = "d"
managed_by = "kueue.x-k8s.io/multikueue"
platforms = []

[[runner.pools]]
name = "d"
"#
    ))
    .unwrap_err();
    assert_errors(
        &errors,
        &[
            "9:8: [runner.kubernetes] is the pool named \"default\" of the [runner] type: `name` belongs in a [[runner.pools]] entry",
            "11:1: a [[runner.pools]] entry needs a `name`",
            "15:8: pool name \"Linux\" is not a DNS label",
            "18:8: pool \"default\" is [runner.kubernetes]; name this pool otherwise",
            "22:8: unknown pool type \"nomad\", expected kubernetes or kpack",
            "26:14: platform \"linux\" is not os/arch[/variant]",
            "26:23: a Job pool builds Linux images only",
            "27:17: max_in_flight must be between 1 and 256",
            "28:9: a pool with a queue needs resources.requests",
            "29:14: managed_by \"multikueue\" is not a controller name",
            "34:9: queue is for Job pools",
            "35:14: managed_by is for Job pools",
            "39:14: managed_by needs a queue",
            "40:13: platforms must name at least one os/arch",
            "43:8: duplicate pool name \"d\" (first defined on line 38)",
        ],
    );
}

#[test]
fn pools_need_a_kubernetes_runner_and_images_name_known_pools() {
    let errors = parse(&format!("{BUILDER}{}[runner]\ntype = \"exec\"\n[runner.exec]\nrebuild = [\"true\"]\nrebase = [\"true\"]\n[[runner.pools]]\nname = \"a\"\n", image("app", "pool = \"a\"\n"))).unwrap_err();
    assert_errors(&errors, &["10:8: [[runner.pools]] build on Kubernetes, runner type \"exec\" runs local commands"]);
    let errors = parse(&format!("{BUILDER}{}", image("app", "pool = \"a\"\n"))).unwrap_err();
    assert_errors(&errors, &["8:8: pool \"a\": no pools are configured"]);
    let errors = parse(&format!(
        "{BUILDER}{}[runner]\ntype = \"kubernetes\"\n[[runner.pools]]\nname = \"b\"\n",
        image("app", "pool = \"a\"\n")
    ))
    .unwrap_err();
    assert_errors(&errors, &["8:8: unknown pool \"a\" (configured: b)"]);
}

#[test]
fn pod_templates_are_read_relative_to_the_config_and_refused_fields_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let safe = dir.path().join("safe.yaml");
    std::fs::write(&safe, "spec:\n  containers:\n  - name: build\n    env:\n    - name: A\n      value: b\n").unwrap();
    let privileged = dir.path().join("privileged.yaml");
    std::fs::write(
        &privileged,
        "spec:\n  hostNetwork: true\n  containers:\n  - name: dind\n    image: docker:dind\n    securityContext:\n      privileged: true\n",
    )
    .unwrap();
    let config_path = dir.path().join("config.toml");
    let text = |pool_extra: &str, image_template: &str| {
        format!(
            "{BUILDER}{}[runner]\ntype = \"kubernetes\"\n[[runner.pools]]\nname = \"a\"\npod_template = \"safe.yaml\"\n{pool_extra}",
            image("app", &format!("pool = \"a\"\npod_template = \"{image_template}\"\n"))
        )
    };
    let c = Config::parse(&config_path, &text("", "safe.yaml")).unwrap();
    let pool = c.runner.pool("a").unwrap();
    assert_eq!(pool.pod_template.as_ref().unwrap().path, safe);
    assert_eq!(pool.pod_template.as_ref().unwrap().value["spec"]["containers"][0]["env"][0]["value"], "b");
    assert!(c.image("app").unwrap().pod_template.is_some());

    let refused = Config::parse(&config_path, &text("", "privileged.yaml")).unwrap_err().to_string();
    assert!(refused.contains("privileged.yaml: spec.hostNetwork"), "{refused}");
    assert!(refused.contains("privileged"), "{refused}");
    assert!(refused.contains("allow_privileged = true"), "{refused}");
    // The image's pool allows it.
    assert!(Config::parse(&config_path, &text("allow_privileged = true\n", "privileged.yaml")).is_ok());

    let missing = Config::parse(&config_path, &text("", "missing.yaml")).unwrap_err().to_string();
    assert!(missing.contains("pod_template:") && missing.contains("missing.yaml"), "{missing}");
}

#[test]
fn a_kpack_pool_takes_only_what_a_build_carries() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("volumes.yaml"), "spec:\n  volumes:\n  - name: cache\n    emptyDir: {}\n").unwrap();
    std::fs::write(dir.path().join("nodes.yaml"), "spec:\n  nodeSelector:\n    pool: builds\n").unwrap();
    let text = |template: &str| {
        format!("{BUILDER}[runner]\ntype = \"kpack\"\n[[runner.pools]]\nname = \"k\"\npod_template = \"{template}\"\n")
    };
    let path = dir.path().join("config.toml");
    assert!(Config::parse(&path, &text("nodes.yaml")).is_ok());
    let refused = Config::parse(&path, &text("volumes.yaml")).unwrap_err().to_string();
    assert!(refused.contains("a kpack Build cannot carry spec.volumes"), "{refused}");
}
