use super::*;
use builder_monitor_core::schedule::Schedule;

fn parse(text: &str) -> Result<Config, Vec<String>> {
    Config::parse(Path::new("/etc/bm/config.toml"), text).map_err(|e| match e {
        ConfigError::Invalid { diagnostics, .. } => {
            diagnostics.into_iter().map(|d| format!("{}:{}: {}", d.line, d.column, d.message)).collect()
        }
        other => vec![other.to_string()],
    })
}

#[test]
fn minimal_config_gets_defaults() {
    let c = parse("[[builders]]\nname = \"b\"\nimage = \"ubuntu\"\n").unwrap();
    assert_eq!(c.monitor.interval, DEFAULT_INTERVAL);
    assert_eq!(c.monitor.state, StateLocation::Sqlite(PathBuf::from("/etc/bm/builder-monitor.db")));
    let b = &c.builders[0];
    assert_eq!(b.image.to_string(), "docker.io/library/ubuntu:latest");
    assert!(matches!(b.schedule, Schedule::Interval(d) if d == DEFAULT_INTERVAL));
    assert_eq!(b.jitter, DEFAULT_JITTER);
    let r = c.registry("docker.io");
    assert!(!r.insecure);
    assert_eq!(r.requests_per_second, Some(5.0));
    assert!(c.registry("127.0.0.1:5000").insecure);
    assert!(c.registry("localhost:5000").insecure);
}

#[test]
fn every_error_is_reported_with_its_position() {
    let text = r#"
[monitor]
interval = "10"

[registries."ghcr.io"]
username = "me"
password_env = "BM_TEST_SURELY_UNSET_VAR"

[[builders]]
name = "a"
image = "paketobuildpacks/builder-jammy-base:latest"
interval = "5m"
schedule = "0 */5 * * * *"

[[builders]]
name = "a"
image = "Not A Reference"

[[builders]]
name = "c"
image = "heroku/builder@sha256:0000000000000000000000000000000000000000000000000000000000000000"
schedule = "*/5 * * * *"
settle = "soon"

[[builders]]
name = "d"
image = "heroku/builder:24"
colour = "blue"
"#;
    let errors = parse(text).unwrap_err();
    let expect = [
        "3:12: invalid interval \"10\" (a unit is required",
        "7:16: environment variable BM_TEST_SURELY_UNSET_VAR is not set",
        "13:12: set either interval or schedule, not both",
        "16:8: duplicate builder name \"a\" (first defined on line 10)",
        "17:9: invalid image reference \"Not A Reference\"",
        "21:9: image \"heroku/builder@sha256:",
        "22:12: cron expression \"*/5 * * * *\" has 5 fields",
        "23:10: invalid settle \"soon\"",
        "28:1: unknown field `colour`",
    ];
    for (got, want) in errors.iter().zip(expect.iter()) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn a_relative_state_resolves_against_the_state_directory_when_one_is_set() {
    let at = |state: Option<&str>, dir: Option<&str>| {
        let monitor = state.map(|s| format!("[monitor]\nstate = \"{s}\"\n")).unwrap_or_default();
        let text = format!("{monitor}[[builders]]\nname = \"b\"\nimage = \"ubuntu\"\n");
        let config =
            Config::parse_in(Path::new("/etc/bm/config.toml"), &text, Secrets::Resolve, dir.map(PathBuf::from));
        config.unwrap().monitor.state
    };
    let sqlite = |path: &str| StateLocation::Sqlite(PathBuf::from(path));
    let data = Some("/var/lib/bm");
    // Absent or relative: in the state directory, not beside the (read-only) config.
    assert_eq!(at(None, data), sqlite("/var/lib/bm/builder-monitor.db"));
    assert_eq!(at(Some("ledger/state.db"), data), sqlite("/var/lib/bm/ledger/state.db"));
    // Absolute, or the ledger in the cluster: as written.
    assert_eq!(at(Some("/srv/state.db"), data), sqlite("/srv/state.db"));
    assert_eq!(at(Some("kubernetes"), data), StateLocation::Kubernetes);
    // Without one: beside the config, as every relative path.
    assert_eq!(at(None, None), sqlite("/etc/bm/builder-monitor.db"));
    assert_eq!(at(Some("state.db"), None), sqlite("/etc/bm/state.db"));
}

#[test]
fn unknown_top_level_key_and_bad_types() {
    let errors = parse("[monitr]\ninterval = \"1m\"\n[[builders]]\nname = 5\nimage = \"x\"\n").unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].starts_with("1:2: unknown key `monitr`"), "{errors:?}");
    assert!(errors[1].starts_with("4:8: invalid type"), "{errors:?}");
}

#[test]
fn syntax_error_has_a_position() {
    let errors = parse("[monitor\ninterval = 1").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("1:"), "{errors:?}");
}

#[test]
fn write_requests_per_second_is_a_rate_or_left_out() {
    let c = Config::parse(std::path::Path::new("c.toml"), "[registries.\"a.io\"]\nwrite_requests_per_second = 50\n")
        .unwrap();
    assert_eq!(c.registry("a.io").write_requests_per_second, Some(50.0));
    assert_eq!(c.registry("b.io").write_requests_per_second, None, "unset: the registry's answers pace actions");
    let errors = parse("[registries.\"a.io\"]\nwrite_requests_per_second = 0\n").unwrap_err();
    assert!(errors[0].starts_with("2:29: write_requests_per_second must be between"), "{errors:?}");
    assert!(errors[0].contains("leave it out"), "{errors:?}");
}

#[test]
fn registry_settings_are_validated() {
    let errors = parse(
        "[registries.\"docker.io\"]\nrequests_per_second = -1\nburst = 0\nmax_attempts = 0\nca_file = \"/nonexistent/ca.pem\"\n[registries.\"a b\"]\n",
    )
    .unwrap_err();
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(errors[0].starts_with("2:23: requests_per_second"));
    assert!(errors[1].starts_with("3:9: burst"));
    assert!(errors[2].starts_with("4:16: max_attempts"));
    assert!(errors[3].starts_with("5:11: cannot read /nonexistent/ca.pem"));
    assert!(errors[4].starts_with("6:13: invalid registry host"));
}

#[test]
fn max_retry_after_is_a_positive_duration_up_to_a_day() {
    let errors =
        parse("[registries.\"a.io\"]\nmax_retry_after = \"0s\"\n[registries.\"b.io\"]\nmax_retry_after = \"2days\"\n")
            .unwrap_err();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].starts_with("2:19: max_retry_after must be greater than zero"), "{errors:?}");
    assert!(errors[1].starts_with("4:19: max_retry_after must be at most 1day"), "{errors:?}");
    let c = Config::parse(
        Path::new("/x/c.toml"),
        "[registries.\"a.io\"]\nmax_retry_after = \"1m\"\n[[builders]]\nname = \"b\"\nimage = \"a.io/b\"\n",
    )
    .unwrap();
    assert_eq!(c.registry("a.io").max_retry_after, Duration::from_secs(60));
    assert_eq!(c.registry("b.io").max_retry_after, DEFAULT_MAX_RETRY_AFTER);
}

#[test]
fn registry_keys_are_normalised_and_credentials_resolved() {
    let dir = std::env::temp_dir().join(format!("bm-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pw"), "s3cret\n").unwrap();
    let c = Config::parse(
        &dir.join("c.toml"),
        "[registries.\"index.docker.io\"]\nusername = \"me\"\npassword_file = \"pw\"\nrequests_per_second = 0\n",
    )
    .unwrap();
    let r = c.registry("docker.io");
    assert_eq!(r.requests_per_second, None);
    match r.credentials {
        Credentials::Basic { username, password, .. } => {
            assert_eq!(username, "me");
            assert_eq!(password.expose(), "s3cret");
            assert_eq!(format!("{password:?}"), "Secret(***)");
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn platforms_parse() {
    let c = parse("[[builders]]\nname = \"b\"\nimage = \"x:1\"\nplatforms = [\"linux/amd64\", \"linux/arm64/v8\"]\n")
        .unwrap();
    let p = c.builders[0].platforms.clone().unwrap();
    assert_eq!(p[1].to_string(), "linux/arm64/v8");
    let errors = parse("[[builders]]\nname = \"b\"\nimage = \"x:1\"\nplatforms = [\"amd64\"]\n").unwrap_err();
    assert!(errors[0].starts_with("4:14: invalid platform"), "{errors:?}");
}

#[test]
fn alerts_are_validated() {
    let errors = parse(
        r#"
[[alerts]]
name = "a"
type = "pager"
url = "https://hooks.example.com/x"

[[alerts]]
name = "b"
type = "webhook"

[[alerts]]
name = "c"
type = "slack"
url = "https://hooks.slack.com/services/T/B/X"
url_env = "BM_TEST_UNSET_URL"

[[alerts]]
name = "d"
type = "webhook"
url = "ftp://example.com"
events = ["builder.changd", "build.*"]
secret_env = "BM_TEST_UNSET_SECRET"
timeout = "0s"
headers = { "X-Builder-Monitor-Event" = "spoof" }

[[alerts]]
name = "a"
type = "cloudevents"
url = "https://bus.example.com"
"#,
    )
    .unwrap_err();
    let expect = [
        "4:8: unknown alert type \"pager\"",
        "8:8: alert \"b\" needs url, url_env or url_file",
        "15:11: set only one of url, url_env and url_file",
        "20:7: alert URL ftp://example.com must be http or https",
        "21:11: \"builder.changd\" matches no event type",
        "22:14: environment variable BM_TEST_UNSET_SECRET is not set (secret)",
        "23:11: timeout must be greater than zero",
        "24:11: header \"X-Builder-Monitor-Event\" is set by builder-monitor itself",
        "27:8: duplicate alert name \"a\"",
    ];
    for (got, want) in errors.iter().zip(expect.iter()) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");

    let c = parse("[[alerts]]\nname = \"ok\"\ntype = \"slack\"\nurl = \"https://hooks.slack.com/services/T/B/SECRET\"\nbuilders = [\"paketo-*\"]\n").unwrap();
    let a = &c.alerts[0];
    assert_eq!(a.events, DEFAULT_EVENTS);
    assert!(a.wants_type("builder.changed") && !a.wants_type("builder.pinned"));
    assert!(a.wants_builder(["paketo-jammy-base"].into_iter()) && !a.wants_builder(["heroku-24"].into_iter()));
    assert_eq!(a.url.to_string(), "https://hooks.slack.com/…");
    assert!(!format!("{a:?}").contains("SECRET"), "Debug redacts the URL");
    assert_eq!((a.timeout, a.give_up_after), (Duration::from_secs(10), Duration::from_secs(86400)));
}

#[test]
fn images_and_runner_are_validated() {
    let errors = parse(
        r#"
[[builders]]
name = "jammy"
image = "paketobuildpacks/builder-jammy-base"

[[images]]
name = "petclinic"
builder = "jamy"
image = "registry.example.com/apps/petclinic:latest"
policy = "sometimes"

[[images]]
name = "petclinic"
builder = "jammy"
image = "registry.example.com/apps/petclinic@sha256:0000000000000000000000000000000000000000000000000000000000000000"
scheduling = { node_selector = { disktype = "ssd" }, tolerations = [{ key = "dedicated", operator = "Equal", value = "builds", effect = "NoSchedule" }] }

[[images]]
name = "api"
builder = "jammy"
image = "registry.example.com/apps/api"
scheduling = { tolerations = [{ key = "x", colour = "blue" }] }

[runner]
type = "exec"
max_concurrent = 0

[runner.exec]
rebuild = ["pack", "build", "{imag}"]
"#,
    )
    .unwrap_err();
    let expect = [
        "8:11: unknown builder \"jamy\" (configured: jammy)",
        "10:10: unknown policy \"sometimes\"",
        "13:8: duplicate image name \"petclinic\"",
        "15:9: an app image is a tag the runner pushes to, not a digest",
        "22:44: unknown field `colour`",
        "26:18: max_concurrent must be between 1 and 256",
        "28:1: [runner.exec] needs `rebase`",
        "29:11: unknown placeholder {imag} in `rebuild`",
    ];
    for (got, want) in errors.iter().zip(expect.iter()) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn the_rebase_path_is_runner_unless_registry_is_asked_for() {
    let builder = "[[builders]]\nname = \"b\"\nimage = \"r.example/b:1\"\n";
    assert_eq!(parse(builder).unwrap().runner.rebase, RebasePath::Runner);
    let registry = parse(&format!("{builder}[runner]\nrebase = \"registry\"\n")).unwrap();
    assert_eq!((registry.runner.rebase, registry.runner.kind), (RebasePath::Registry, RunnerKind::None));
    let errors = parse(&format!("{builder}[runner]\ntype = \"exec\"\nrebase = \"pod\"\n")).unwrap_err();
    assert_eq!(errors, ["6:10: unknown rebase path \"pod\", expected registry or runner"]);
    // In-daemon rebases need no rebase command; runner rebases still do.
    let exec = "[runner]\ntype = \"exec\"\nrebase = \"REBASE\"\n[runner.exec]\nrebuild = [\"true\"]\n";
    let ok = parse(&format!("{builder}{}", exec.replace("REBASE", "registry"))).unwrap();
    assert!(ok.runner.exec.unwrap().rebase.is_empty());
    let errors = parse(&format!("{builder}{}", exec.replace("REBASE", "runner"))).unwrap_err();
    assert_eq!(errors, ["7:1: [runner.exec] needs `rebase` (an argv array)"]);
}

#[test]
fn kubernetes_runner_values_are_checked_against_the_pod_spec() {
    let errors = parse(
        r#"
[[builders]]
name = "jammy"
image = "paketobuildpacks/builder-jammy-base"

[[images]]
name = "app"
builder = "jammy"
image = "r.example.com/app"
scheduling = { node_selector = { "kubernetes.io/os" = "linux" } }

[runner]
type = "kpack"

[runner.kubernetes]
namespace = "Builds"
node_selector = { "kubernetes.io/os" = "linux" }
affinity = { nodeAffinity = { requiredDuringSchedulingIgnoredDuringExecution = { nodeSelectorTerm = [] } } }
resources = { request = { cpu = "1" } }
backoff_limit = -1
"#,
    )
    .unwrap_err();
    let expect = [
        "10:14: kpack rejects a nodeSelector with kubernetes.io/os",
        "16:13: namespace \"Builds\" is not a valid namespace name",
        "17:17: kpack rejects a nodeSelector with kubernetes.io/os",
        "18:12: affinity is not a Pod spec affinity: unknown field `nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerm`",
        "19:13: resources is not a Pod spec resources object: unknown field `request`",
        "20:17: backoff_limit must be a whole number >= 0",
    ];
    for (got, want) in errors.iter().zip(expect.iter()) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    let ok = parse("[runner]\ntype = \"kubernetes\"\n").unwrap();
    let k = &ok.runner.pools[0].settings;
    assert_eq!(ok.runner.pools[0].name, "default");
    assert_eq!((k.namespace.as_str(), k.git_image.as_str()), ("default", DEFAULT_GIT_IMAGE));
}

#[test]
fn every_duration_rate_and_size_is_range_checked() {
    let errors = parse(
        r#"
[monitor]
interval = "500000000000y"
history = 100000000000

[server]
hooks_per_second = 1e-30

[registries."r.example.com"]
requests_per_second = 1e-30
burst = 4294967295
timeout = "2y"

[[builders]]
name = "b"
image = "r.example.com/b:1"
jitter = "367d"
settle = "1y 1s"

[[alerts]]
name = "a"
type = "webhook"
url = "https://hooks.example.com/x"
give_up_after = "10y"

[runner]
backoff = "100y"

[kubernetes]
lease_duration = "1000y"
"#,
    )
    .unwrap_err();
    let expect = [
        "3:12: interval 500000000000y is over the maximum of 1y",
        "4:11: history must be between 1 and 1000000",
        "7:20: hooks_per_second must be between 0.001 and 10000",
        "10:23: requests_per_second must be 0 (no limit) or between 0.001 and 10000",
        "11:9: burst must be between 1 and 10000",
        "12:11: timeout 2y is over the maximum of 1y",
        "17:10: jitter 367d is over the maximum of 1y",
        "18:10: settle 1y 1s is over the maximum of 1y",
        "24:17: give_up_after 10y is over the maximum of 1y",
        "27:11: backoff 100y is over the maximum of 1y",
        "30:18: lease_duration 1000y is over the maximum of 1y",
    ];
    for (got, want) in errors.iter().zip(expect.iter()) {
        assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    // The bounds themselves are accepted.
    let c = parse(
        "[monitor]\ninterval = \"1y\"\n[server]\nhooks_per_second = 0.001\n[registries.\"r.io\"]\nrequests_per_second = 10000\nburst = 10000\n[[builders]]\nname = \"b\"\nimage = \"r.io/b:1\"\n",
    )
    .unwrap();
    assert_eq!(c.monitor.interval, MAX_DURATION);
    assert_eq!(rate_period(0.001), Duration::from_secs(1000));
    assert_eq!(rate_period(1e-30), Duration::from_secs(1000), "clamped, never an overflow");
    assert_eq!(rate_period(f64::NAN), Duration::from_secs(1000));
}

#[test]
fn loopback_hosts() {
    assert!(is_loopback_host("127.0.0.1:5000"));
    assert!(is_loopback_host("localhost"));
    assert!(is_loopback_host("[::1]:5000"));
    assert!(!is_loopback_host("ghcr.io"));
    assert!(!is_loopback_host("10.0.0.1:5000"));
}

#[test]
fn line_column_counts_characters() {
    assert_eq!(line_column("ab\ncd", 4), (2, 2));
    assert_eq!(line_column("é = 1", 3), (1, 3));
}

/// A duration written as a bare number is one error that asks for a unit, and the table's other
/// problems are still reported beside it (a type error used to hide them).
#[test]
fn a_duration_without_a_unit_asks_for_one_and_hides_nothing() {
    let errors = parse(
        "[monitor]\ninterval = 10\njitter = \"x\"\nhistory = -1\n\n[[builders]]\nname = \"b\"\nimage = \"ghcr.io/a/b:1\"\nsettle = 2.5\n",
    )
    .unwrap_err();
    let expect = [
        "2:12: invalid interval \"10\" (a unit is required, e.g. \"30s\", \"10m\", \"1h\")",
        "3:10: invalid jitter \"x\"",
        "4:11: history must be between 1 and 1000000",
        "9:10: invalid settle \"2.5\" (a unit is required",
    ];
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    for (got, want) in errors.iter().zip(expect) {
        assert!(got.contains(want), "got {got:?}, want {want:?}\nall: {errors:#?}");
    }
}

mod deploy;
mod gitops;
mod pools;
