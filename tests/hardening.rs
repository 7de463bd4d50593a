//! Hostile inputs end to end: malformed secret-bearing files and variables, out-of-range config
//! values, hostile HTTP clients and registry-controlled strings.

mod support;

use std::path::Path;

use support::daemon::{Output, Workspace, run_with_env};
use support::receiver::free_port;

/// Every output stream of one run, for grepping.
fn all_output(out: &Output) -> String {
    format!("{}\n{}", out.stdout, out.stderr)
}

fn assert_no_secret(out: &Output, secrets: &[&str], what: &str) {
    let text = all_output(out);
    for secret in secrets {
        assert!(!text.contains(secret), "{what} prints the secret {secret:?}:\n{text}");
    }
}

/// Runs `check`, `run --once` and `resolve --config` at trace level.
fn run_all(config: &Path, env: &[(&str, &str)], registry: &str) -> Vec<(String, Output)> {
    let cwd = config.parent().unwrap();
    let config = config.to_str().unwrap();
    let mut env = env.to_vec();
    env.push(("BUILDER_MONITOR_LOG", "trace"));
    let image = format!("{registry}/demo/b:latest");
    [
        vec!["check", "--config", config],
        vec!["run", "--once", "--config", config],
        vec!["resolve", &image, "--config", config],
    ]
    .into_iter()
    .map(|args| (args.join(" "), run_with_env(&args, &env, cwd)))
    .collect()
}

#[test]
fn malformed_secret_files_and_variables_never_print_their_values() {
    let ws = Workspace::new();
    // base64 of user:password, written as a bare string (the form the issue found printed).
    let docker_secret = "Y2ZnLXVzZXI6Y2ZnLXBhc3N3b3JkLVNFQ1JFVDE=";
    std::fs::write(ws.path("bare.json"), format!(r#"{{"auths":{{"127.0.0.1:1":"{docker_secret}"}}}}"#)).unwrap();
    std::fs::write(ws.path("typed.json"), r#"{"auths":{"127.0.0.1:2":{"auth":{"v":"dock-SECRET2"}}}}"#).unwrap();
    std::fs::write(ws.path("helpers.json"), r#"{"credHelpers":{"127.0.0.1:3":["dock-SECRET3"]}}"#).unwrap();
    std::fs::write(ws.path("nobase64.json"), r#"{"auths":{"127.0.0.1:4":{"auth":"dock-SECRET4!!"}}}"#).unwrap();
    let mut password = b"pw-SECRET5".to_vec();
    password.extend_from_slice(&[0xff, 0xfe]);
    std::fs::write(ws.path("password"), password).unwrap();
    std::fs::write(ws.path("url"), "ftp://hooks.example.com/url-SECRET6\n").unwrap();
    std::fs::write(ws.path("hmac"), [0xffu8, b'h', b'-', b'S', b'E', b'C', b'R', b'E', b'T', b'7']).unwrap();
    let config = ws.config(
        r#"
[registries."127.0.0.1:1"]
docker_config = "bare.json"
[registries."127.0.0.1:2"]
docker_config = "typed.json"
[registries."127.0.0.1:3"]
docker_config = "helpers.json"
[registries."127.0.0.1:4"]
docker_config = "nobase64.json"
[registries."127.0.0.1:5"]
username = "me"
password_file = "password"

[server]
api_token_env = "BM_HARDENING_TOKEN"

[[builders]]
name = "b"
image = "127.0.0.1:1/demo/b:latest"

[[alerts]]
name = "env"
type = "webhook"
url_env = "BM_HARDENING_URL"

[[alerts]]
name = "file"
type = "webhook"
url_file = "url"
secret_file = "hmac"
"#,
    );
    let env = [("BM_HARDENING_TOKEN", "tok-SECRET8"), ("BM_HARDENING_URL", "not a URL url-SECRET9")];
    let secrets = [
        docker_secret,
        "Y2ZnLXVz",
        "SECRET2",
        "SECRET3",
        "SECRET4",
        "SECRET5",
        "SECRET6",
        "SECRET7",
        "SECRET8",
        "SECRET9",
    ];
    for (what, out) in run_all(&config, &env, "127.0.0.1:1") {
        assert_eq!(out.code, Some(2), "{what} refuses the config: {}", out.stderr);
        assert_no_secret(&out, &secrets, &what);
    }
    let out = run_with_env(&["check", "--config", config.to_str().unwrap()], &env, ws.dir.path());
    for shape in [
        "`auths.\"127.0.0.1:1\"` must be an object",
        "`auths.\"127.0.0.1:2\".auth` must be a string",
        "`credHelpers.\"127.0.0.1:3\"` must be a string",
        "the `auth` entry for 127.0.0.1:4 is not base64",
        "did not contain valid UTF-8",
        "the API token in BM_HARDENING_TOKEN is too short",
    ] {
        assert!(out.stderr.contains(shape), "check says {shape:?}:\n{}", out.stderr);
    }
}

#[test]
fn secrets_in_use_stay_out_of_output_when_requests_fail() {
    let ws = Workspace::new();
    let closed = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        ws.path("kubeconfig"),
        "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: [\"kube-SECRET1\"]\n",
    )
    .unwrap();
    let config = ws.config(&format!(
        r#"
[monitor]
state = "state.db"

[registries."{closed}"]
username = "me"
password_env = "BM_HARDENING_PASSWORD"

[[builders]]
name = "b"
image = "{closed}/demo/b:latest"

[[alerts]]
name = "hook"
type = "webhook"
url_env = "BM_HARDENING_URL"
secret_env = "BM_HARDENING_HMAC"
events = ["*"]
"#
    ));
    let env = [
        ("BM_HARDENING_PASSWORD", "pw-SECRET2\u{1b}[2J"),
        ("BM_HARDENING_URL", &format!("http://{closed}/hooks/url-SECRET3?token=url-SECRET4")),
        ("BM_HARDENING_HMAC", "hmac-SECRET5"),
    ];
    let secrets = ["SECRET2", "SECRET3", "SECRET4", "SECRET5"];
    for (what, out) in run_all(&config, &env, &closed) {
        if !what.starts_with("check") {
            assert_ne!(out.code, Some(0), "{what} fails against a closed port");
        }
        assert_no_secret(&out, &secrets, &what);
    }

    // A malformed kubeconfig: its YAML parser quotes values.
    let kube = ws.path("kube.toml");
    std::fs::write(&kube, "[monitor]\nstate = \"kubernetes\"\n[kubernetes]\nkubeconfig = \"kubeconfig\"\n").unwrap();
    let out = run_with_env(&["run", "--once", "--config", kube.to_str().unwrap()], &[], ws.dir.path());
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("not valid YAML of the kubeconfig shape at line"), "{}", out.stderr);
    assert_no_secret(&out, &["SECRET1"], "run --once with a malformed kubeconfig");
}
