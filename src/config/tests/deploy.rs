//! `[[images]] deploy` and `undo`, `[rollout]`'s deploy keys, `[runner.exec] deploy`.

use super::*;
use builder_monitor_core::deploy::{GitopsOwned, Undo, Workload, WorkloadKind};
use builder_monitor_core::plan::ActionKind;

const BUILDER: &str = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n";

/// `text` after the builder, its errors' lines counted from `text`'s first line.
fn parse_after_builder(text: &str) -> Result<Config, Vec<String>> {
    parse(&format!("{BUILDER}{text}")).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| {
                let (line, rest) = e.split_once(':').unwrap();
                format!("{}:{rest}", line.parse::<usize>().unwrap() - 3)
            })
            .collect()
    })
}

fn image(name: &str, extra: &str) -> String {
    format!("[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"r.example/{name}\"\n{extra}")
}

fn assert_errors(errors: &[String], expect: &[&str]) {
    for (got, want) in errors.iter().zip(expect) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

fn workload(kind: WorkloadKind, namespace: &str, name: &str, container: Option<&str>) -> Workload {
    Workload {
        kind,
        namespace: namespace.into(),
        name: name.into(),
        container: container.map(Into::into),
        gitops_owned: GitopsOwned::Skip,
    }
}

#[test]
fn a_full_deploy_config_parses_to_its_values() {
    let text = format!(
        "{}{}{}",
        image(
            "petclinic",
            r#"undo = "workload"
deploy = [
  { kind = "Deployment", namespace = "shop", name = "petclinic", container = "app", gitops_owned = "patch" },
  { kind = "CronJob", namespace = "shop", name = "petclinic-report", gitops_owned = "skip" },
  { kind = "StatefulSet", namespace = "data", name = "cache.v2" },
  { kind = "Deployment", namespace = "shop", name = "web", container = "petclinic" },
]
"#
        ),
        image(
            "orders",
            r#"deploy = [
  { kind = "DaemonSet", namespace = "edge", name = "orders-agent" },
  { kind = "Deployment", namespace = "shop", name = "web", container = "orders" },
]
"#
        ),
        r#"
[rollout]
approve = ["deploy"]
soak = "10m"
undo = "none"
fail_after = "90s"
deploy_timeout = "15m"

[runner]
type = "kubernetes"

[runner.exec]
deploy = ["deploy-tool", "--to={reference}", "--digest", "{digest}", "--app={name}", "{{literal}}"]
"#
    );
    let c = parse_after_builder(&text).unwrap();
    let (petclinic, orders) = (c.image("petclinic").unwrap(), c.image("orders").unwrap());
    let patched = Workload {
        gitops_owned: GitopsOwned::Patch,
        ..workload(WorkloadKind::Deployment, "shop", "petclinic", Some("app"))
    };
    assert_eq!(
        petclinic.deploy,
        [
            patched,
            workload(WorkloadKind::CronJob, "shop", "petclinic-report", None),
            workload(WorkloadKind::StatefulSet, "data", "cache.v2", None),
            workload(WorkloadKind::Deployment, "shop", "web", Some("petclinic")),
        ]
    );
    assert_eq!(
        orders.deploy,
        [
            workload(WorkloadKind::DaemonSet, "edge", "orders-agent", None),
            workload(WorkloadKind::Deployment, "shop", "web", Some("orders")),
        ]
    );
    assert_eq!((petclinic.undo, orders.undo), (Some(Undo::Workload), None));
    assert_eq!((petclinic.undo(&c.rollout), orders.undo(&c.rollout)), (Undo::Workload, Undo::None));

    let r = &c.rollout;
    assert_eq!(r.approve, BTreeSet::from([ActionKind::Deploy]));
    assert!(orders.needs_approval(ActionKind::Deploy, r) && !orders.needs_approval(ActionKind::Rebuild, r));
    assert_eq!(
        (r.soak, r.undo, r.fail_after, r.deploy_timeout),
        (Duration::from_secs(600), Undo::None, Duration::from_secs(90), Duration::from_secs(900))
    );

    let exec = c.runner.exec.as_ref().unwrap();
    assert_eq!(c.runner.kind, RunnerKind::Kubernetes);
    assert_eq!(exec.deploy, ["deploy-tool", "--to={reference}", "--digest", "{digest}", "--app={name}", "{{literal}}"]);
    assert!(exec.rebuild.is_empty() && exec.rebase.is_empty(), "a table for deploys alone has no build commands");

    assert!(c.deploys());
    assert_eq!(c.deploy_namespaces(), BTreeSet::from(["data".to_string(), "edge".into(), "shop".into()]));
    let summary = c.summary();
    for want in [
        "petclinic: r.example/petclinic:latest (builder jammy, policy auto, deploys to Deployment shop/petclinic, \
         CronJob shop/petclinic-report, StatefulSet data/cache.v2, Deployment shop/web, undo workload)\n",
        "orders: r.example/orders:latest (builder jammy, policy auto, deploys to DaemonSet edge/orders-agent, \
         Deployment shop/web)\n",
        "rollout: always open, approval for deploy, deploys: soak 10m, undo none, fail after 1m 30s, deploy timeout 15m\n",
    ] {
        assert!(summary.contains(want), "{want}\n{summary}");
    }
}

#[test]
fn without_deploy_keys_nothing_is_deployed_and_the_defaults_hold() {
    let c = parse_after_builder(&format!("{}[runner]\ntype = \"kpack\"\n", image("app", ""))).unwrap();
    let app = c.image("app").unwrap();
    assert!(app.deploy.is_empty());
    assert_eq!((app.undo, app.undo(&c.rollout)), (None, Undo::WorkloadAndTag));
    let r = &c.rollout;
    assert_eq!(
        (r.soak, r.undo, r.fail_after, r.deploy_timeout),
        (Duration::ZERO, Undo::WorkloadAndTag, Duration::from_secs(120), Duration::from_secs(600))
    );
    assert!(!c.deploys());
    assert!(c.deploy_namespaces().is_empty());
    assert!(!c.summary().contains("rollout:"), "{}", c.summary());

    // An empty list deploys nothing; a command alone is a deploy.
    let empty = parse_after_builder(&image("app", "deploy = []\n")).unwrap();
    assert!(!empty.deploys());
    let by_command = parse_after_builder("[runner.exec]\ndeploy = [\"deploy-tool\", \"{reference}\"]\n").unwrap();
    assert!(by_command.deploys());
    assert!(by_command.deploy_namespaces().is_empty());
    // Bounds and zero soak are accepted.
    let c = parse_after_builder("[rollout]\nsoak = \"0s\"\nfail_after = \"10m\"\ndeploy_timeout = \"10m\"\n").unwrap();
    assert_eq!((c.rollout.soak, c.rollout.fail_after), (Duration::ZERO, Duration::from_secs(600)));
}

#[test]
fn every_bad_workload_value_is_reported_at_its_position() {
    let long_label = "n".repeat(64);
    let cron_name = "c".repeat(53);
    let long_name = "d".repeat(254);
    let text = image(
        "app",
        &format!(
            r#"undo = "tag"
deploy = [
  {{ kind = "Deploymnet", namespace = "shop", name = "a" }},
  {{ kind = "deployment", namespace = "Shop", name = "a" }},
  {{ kind = "Deployment", namespace = "{long_label}", name = "a" }},
  {{ kind = "Deployment", namespace = "-shop", name = "petclinic_v2" }},
  {{ kind = "StatefulSet", namespace = "shop", name = "a..b" }},
  {{ kind = "Deployment", namespace = "shop", name = "{long_name}" }},
  {{ kind = "CronJob", namespace = "shop", name = "{cron_name}" }},
  {{ kind = "CronJob", namespace = "shop", name = "Report" }},
  {{ kind = "DaemonSet", namespace = "shop", name = "a", container = "App" }},
  {{ kind = "DaemonSet", namespace = "shop", name = "b", container = "a.b" }},
  {{ kind = "DaemonSet", namespace = "shop", name = "c", gitops_owned = "yes" }},
  {{ kind = "CronJob", namespace = "shop", name = "{}" }},
]
"#,
            "c".repeat(52)
        ),
    );
    let errors = parse_after_builder(&text).unwrap_err();
    assert_errors(
        &errors,
        &[
            "5:8: unknown undo \"tag\", expected workload-and-tag, workload or none",
            "7:12: unknown workload kind \"Deploymnet\", expected Deployment, StatefulSet, DaemonSet or CronJob",
            "8:12: unknown workload kind \"deployment\", expected Deployment, StatefulSet, DaemonSet or CronJob",
            "8:38: namespace \"Shop\" is not a valid namespace name (a DNS-1123 label: at most 63 lowercase letters, \
             digits and '-', starting and ending with a letter or digit)",
            &format!("9:38: namespace \"{long_label}\" is not a valid namespace name (a DNS-1123 label"),
            "10:38: namespace \"-shop\" is not a valid namespace name",
            "10:54: name \"petclinic_v2\" is not a valid Deployment name (a DNS-1123 subdomain: at most 253 \
             characters, lowercase letters, digits and '-' in parts joined by '.', each starting and ending with a \
             letter or digit)",
            "11:54: name \"a..b\" is not a valid StatefulSet name (a DNS-1123 subdomain",
            &format!("12:53: name \"{long_name}\" is not a valid Deployment name"),
            &format!("13:50: CronJob name \"{cron_name}\" is 53 characters, at most 52 (its Jobs' names add 11)"),
            "14:50: name \"Report\" is not a valid CronJob name",
            "15:69: container \"App\" is not a valid container name (a DNS-1123 label",
            "16:69: container \"a.b\" is not a valid container name",
            "17:72: unknown gitops_owned \"yes\", expected skip or patch",
        ],
    );
}

#[test]
fn unknown_and_missing_workload_keys_are_refused() {
    let text = format!(
        "{}{}{}{}",
        image("a", "deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"a\", image = \"x\" }]\n"),
        image("b", "deploy = [{ kind = \"Deployment\", name = \"b\" }]\n"),
        image("c", "deploy = [{ namespace = \"shop\", name = \"c\" }]\n"),
        image("d", "deploy = { kind = \"Deployment\", namespace = \"shop\", name = \"d\" }\nundo = 1\n"),
    );
    let errors = parse_after_builder(&text).unwrap_err();
    assert_errors(
        &errors,
        &[
            "5:66: unknown field `image`, expected one of `kind`, `namespace`, `name`, `container`, `gitops_owned`",
            "10:11: missing field `namespace`",
            "15:11: missing field `kind`",
            "20:10: invalid type: map, expected a sequence",
        ],
    );
}

#[test]
fn a_workload_twice_in_an_image_is_refused() {
    let text = image(
        "app",
        r#"deploy = [
  { kind = "Deployment", namespace = "shop", name = "web" },
  { kind = "Deployment", namespace = "shop", name = "web", container = "app" },
  { kind = "StatefulSet", namespace = "shop", name = "web" },
  { kind = "Deployment", namespace = "other", name = "web" },
]
"#,
    );
    let errors = parse_after_builder(&text).unwrap_err();
    assert_errors(
        &errors,
        // Lines in messages count the whole file (the builder's 3 lines too).
        &["7:3: Deployment shop/web is listed twice in this image's deploy (first on line 9): list it once"],
    );
}

#[test]
fn two_images_share_a_workload_only_by_naming_different_containers() {
    let deploy = |container: &str| {
        format!("deploy = [{{ kind = \"Deployment\", namespace = \"shop\", name = \"web\"{container} }}]\n")
    };
    let text = format!(
        "{}{}{}{}{}",
        image("a", &deploy(", container = \"a\"")),
        image("b", &deploy(", container = \"b\"")),
        image("c", &deploy(", container = \"a\"")),
        image("d", &deploy("")),
        image("e", "deploy = [{ kind = \"CronJob\", namespace = \"shop\", name = \"web\" }]\n"),
    );
    let errors = parse_after_builder(&text).unwrap_err();
    assert_errors(
        &errors,
        &[
            "15:11: Deployment shop/web is also deployed by image \"a\" (line 8): two images would fight over it; \
             deploy it from one image, or name a different container in each",
            "20:11: Deployment shop/web is also deployed by image \"a\" (line 8)",
        ],
    );
    // Written as one array (read as a value, not a piece per image), the same rule.
    let whole = format!(
        "images = [\n  {{ name = \"a\", builder = \"jammy\", image = \"r.example/a\", deploy = [{{ kind = \"Deployment\", namespace = \"shop\", name = \"web\" }}] }},\n  {{ name = \"b\", builder = \"jammy\", image = \"r.example/b\", deploy = [{{ kind = \"Deployment\", namespace = \"shop\", name = \"web\" }}] }},\n]\n{BUILDER}"
    );
    let errors = parse(&whole).unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].starts_with("3:69: Deployment shop/web is also deployed by image \"a\" (line 2)"), "{errors:#?}");
}

#[test]
fn every_bad_rollout_deploy_value_is_reported_at_its_position() {
    let errors = parse_after_builder(
        "[rollout]\nsoak = \"10\"\nundo = \"never\"\nfail_after = \"0s\"\ndeploy_timeout = \"soon\"\napprove = [\"deploy\", \"roll\"]\n",
    )
    .unwrap_err();
    assert_errors(
        &errors,
        &[
            "2:8: invalid soak \"10\" (a unit is required, e.g. \"30s\", \"10m\", \"1h\")",
            "3:8: unknown undo \"never\", expected workload-and-tag, workload or none",
            "4:14: fail_after must be greater than zero",
            "5:18: invalid deploy_timeout \"soon\"",
            "6:22: unknown action kind \"roll\" in approve, expected rebuild, rebase, deploy or gitops",
        ],
    );
    let errors = parse_after_builder("[rollout]\ndeploy_timeout = \"0s\"\nsoak = \"2y\"\n").unwrap_err();
    assert_errors(
        &errors,
        &["2:18: deploy_timeout must be greater than zero", "3:8: soak 2y is over the maximum of 1y"],
    );
}

#[test]
fn fail_after_is_at_most_deploy_timeout() {
    let errors = parse_after_builder("[rollout]\nfail_after = \"5m\"\ndeploy_timeout = \"3m\"\n").unwrap_err();
    assert_errors(&errors, &["2:14: fail_after 5m is longer than deploy_timeout 3m: make it at most that"]);
    let errors = parse_after_builder("[rollout]\nfail_after = \"11m\"\n").unwrap_err();
    assert_errors(&errors, &["2:14: fail_after 11m is longer than deploy_timeout 10m"]);
    let errors = parse_after_builder("[rollout]\ndeploy_timeout = \"1m\"\n").unwrap_err();
    assert_errors(
        &errors,
        &["2:18: deploy_timeout 1m is shorter than fail_after 2m (its default): make it longer, or set fail_after"],
    );
    let c = parse_after_builder("[rollout]\ndeploy_timeout = \"1m\"\nfail_after = \"30s\"\n").unwrap();
    assert_eq!((c.rollout.fail_after, c.rollout.deploy_timeout), (Duration::from_secs(30), Duration::from_secs(60)));
}

#[test]
fn a_deploy_command_alone_suits_every_runner_type_but_exec() {
    let exec = "[runner.exec]\ndeploy = [\"deploy-tool\", \"{reference}\"]\n";
    for kind in [RunnerKind::None, RunnerKind::Kubernetes, RunnerKind::Kpack] {
        let c = parse_after_builder(&format!("[runner]\ntype = \"{}\"\n{exec}", kind.as_str())).unwrap();
        let e = c.runner.exec.unwrap();
        assert_eq!((e.deploy.len(), e.rebuild.len(), e.rebase.len()), (2, 0, 0), "{kind:?}");
    }
    // Without a type (none), too; a given build command is still checked.
    let errors = parse_after_builder(&format!("{exec}rebuild = [\"pack\", \"{{digest}}\"]\n")).unwrap_err();
    assert_errors(
        &errors,
        &[
            "3:11: unknown placeholder {digest} in `rebuild` (known: image, builder, run_image, source, revision, sub_path, change_id, action, name;",
        ],
    );
    // The exec runner runs builds: it needs their commands, as without deploy.
    let errors = parse_after_builder(&format!("[runner]\ntype = \"exec\"\n{exec}")).unwrap_err();
    assert_errors(
        &errors,
        &["3:1: [runner.exec] needs `rebuild` (an argv array)", "3:1: [runner.exec] needs `rebase` (an argv array)"],
    );
    let ok = parse_after_builder(&format!(
        "[runner]\ntype = \"exec\"\n{exec}rebuild = [\"pack\", \"build\", \"{{image}}\"]\nrebase = [\"pack\", \"rebase\", \"{{image}}\"]\n"
    ))
    .unwrap();
    let e = ok.runner.exec.unwrap();
    assert_eq!((e.deploy.len(), e.rebuild.len(), e.rebase.len()), (2, 3, 3));
    // A table with neither builds nor deploy still needs the build commands.
    let errors = parse_after_builder("[runner.exec]\ntimeout = \"1m\"\n").unwrap_err();
    assert_errors(&errors, &["1:1: [runner.exec] needs `rebuild`", "1:1: [runner.exec] needs `rebase`"]);
}

#[test]
fn the_deploy_template_knows_digest_and_reference() {
    let errors = parse_after_builder(
        "[runner.exec]\ndeploy = [\"tool\", \"{digest}\", \"{reference}\", \"{ref}\", \"{image\"]\n",
    )
    .unwrap_err();
    assert_errors(
        &errors,
        &[
            "2:10: unknown placeholder {ref} in `deploy` (known: image, builder, run_image, source, revision, \
             sub_path, change_id, action, name, digest, reference; write {{ and }} for literal braces)",
            "2:10: `deploy`: ",
        ],
    );
    let errors = parse_after_builder("[runner.exec]\ndeploy = []\n").unwrap_err();
    assert_errors(&errors, &["2:10: `deploy` must name a program"]);
    let errors = parse_after_builder("[runner.exec]\ndeploy = [\" \", \"x\"]\n").unwrap_err();
    assert_errors(&errors, &["2:10: `deploy` must name a program"]);
}
