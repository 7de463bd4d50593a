//! Docker credential helpers (`credHelpers`, `credsStore`): the daemon runs the real helper
//! program (a script here) against a real registry with basic auth, keeps its answer, asks again
//! after a refusal, and gives it a clean environment.

use crate::support;

use std::os::unix::fs::PermissionsExt as _;

use support::daemon::{Workspace, run_with_env};
use support::images::{Format, Image, Pusher};
use support::registry::{Auth, TestRegistry};

/// Writes `bin/docker-credential-bmtest`: it records the server asked about and its environment,
/// then prints `answer.json` (or fails when that file is missing).
fn helper(ws: &Workspace) -> String {
    let bin = ws.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dir = ws.dir.path().display();
    let script = format!(
        "#!/bin/sh\nserver=$(cat)\necho \"$1 $server\" >> {dir}/asked\nenv > {dir}/env.txt\n\
         if [ -f {dir}/answer.json ]; then cat {dir}/answer.json; else echo 'credentials not found in native keychain'; exit 1; fi\n"
    );
    let program = bin.join("docker-credential-bmtest");
    std::fs::write(&program, script).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

fn answer(ws: &Workspace, password: &str) {
    let text = format!(r#"{{"ServerURL":"x","Username":"testuser","Secret":"{password}"}}"#);
    std::fs::write(ws.path("answer.json"), text).unwrap();
}

fn asked(ws: &Workspace) -> Vec<String> {
    std::fs::read_to_string(ws.path("asked")).unwrap_or_default().lines().map(str::to_string).collect()
}

#[tokio::test]
async fn a_credential_helper_is_run_cached_asked_again_after_a_refusal_and_sees_no_secrets() {
    let registry = TestRegistry::start_with(Auth::Htpasswd);
    let pusher = Pusher::with_basic(&registry.host, "testuser", "testpass");
    pusher.push_image("demo/builder", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    pusher.push_image("demo/other", Some("latest"), &Image::new("arm64"), Format::Oci).await;
    let ws = Workspace::new();
    let path = helper(&ws);
    std::fs::write(ws.path("docker.json"), format!(r#"{{"credHelpers":{{"{}":"bmtest"}}}}"#, registry.host)).unwrap();
    let config = ws.config(&format!(
        "[monitor]\ninterval = \"1h\"\njitter = \"0s\"\nstate = \"state/ledger.db\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[builders]]\nname = \"other\"\nimage = \"{host}/demo/other:latest\"\n\n\
         [registries.\"{host}\"]\ndocker_config = \"docker.json\"\nrequests_per_second = 0\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_TEST_API_TOKEN\"\n",
        host = registry.host
    ));
    let config = config.to_str().unwrap();
    let env = [("PATH", path.as_str()), ("BM_TEST_API_TOKEN", "api-token-never-for-helpers")];
    let run = |ws: &Workspace| run_with_env(&["run", "--once", "--config", config], &env, ws.dir.path());

    // The config names the helper; `check` says so without running it.
    let check = run_with_env(&["check", "--config", config], &env, ws.dir.path());
    assert_eq!(check.code, Some(0), "{}", check.stderr);
    assert!(check.stdout.contains("docker-credential-bmtest (from "), "{}", check.stdout);
    assert!(asked(&ws).is_empty(), "check runs no helper");

    // A helper that has no credentials: the check fails and says what the helper said.
    let failed = run(&ws);
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    assert!(failed.stderr.contains("credentials not found in native keychain"), "{}", failed.stderr);

    // A wrong answer is refused by the registry, and the message names the helper.
    answer(&ws, "wrong-password");
    let refused = run(&ws);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(refused.stderr.contains("docker-credential-bmtest gave were refused"), "{}", refused.stderr);

    // The right answer pins both builders; one run asks the helper once for both.
    answer(&ws, "testpass");
    let before = asked(&ws).len();
    let pinned = run(&ws);
    assert_eq!(pinned.code, Some(0), "{}", pinned.stderr);
    let asked = asked(&ws);
    assert_eq!(asked.len(), before + 1, "one answer kept for every request of the run: {asked:?}");
    assert!(asked.iter().all(|line| *line == format!("get {}", registry.host)), "{asked:?}");
    let status = run_with_env(&["status", "--json", "--config", config], &env, ws.dir.path());
    let status: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let pins = status["builders"].as_array().unwrap().iter().filter(|b| b["pinned"]["digest"].is_string()).count();
    assert_eq!(pins, 2, "{status:#}");

    // The helper's environment: PATH and HOME kinds of variable, never the daemon's secrets.
    let seen = std::fs::read_to_string(ws.path("env.txt")).unwrap();
    assert!(seen.lines().any(|l| l.starts_with("PATH=")), "{seen}");
    assert!(!seen.contains("BM_TEST_API_TOKEN") && !seen.contains("api-token-never-for-helpers"), "{seen}");
    assert!(!seen.contains("BUILDER_MONITOR_LOG"), "{seen}");
    for out in [&failed, &refused, &pinned] {
        assert!(!out.stderr.contains("testpass") && !out.stdout.contains("testpass"), "{}", out.stderr);
        assert!(!out.stderr.contains("wrong-password"), "{}", out.stderr);
    }
}

#[test]
fn a_helper_not_on_the_path_is_a_config_error_that_names_it() {
    let ws = Workspace::new();
    std::fs::write(ws.path("docker.json"), r#"{"auths":{"ghcr.io":{}},"credsStore":"bm-absent"}"#).unwrap();
    let config = ws.config(
        "[[builders]]\nname = \"b\"\nimage = \"ghcr.io/demo/b:latest\"\n\n[registries.\"ghcr.io\"]\ndocker_config = \"docker.json\"\n",
    );
    let check =
        run_with_env(&["check", "--config", config.to_str().unwrap()], &[("PATH", "/usr/bin:/bin")], ws.dir.path());
    assert_eq!(check.code, Some(2), "{}\n{}", check.stdout, check.stderr);
    assert!(check.stderr.contains("`docker-credential-bm-absent`, which is not on PATH"), "{}", check.stderr);
    assert!(check.stderr.contains("config.toml:6:"), "{}", check.stderr);
}
