//! The chart's image signing: kpack's cosign Secret (`signing.existingSecret`) and the trusted
//! public keys mounted read-only where the [signing] table the chart appends reads them, the
//! password a variable by reference, and the config, keys in place, passing the init container's
//! `check` (which decrypts the key).

use super::*;

const FIT: &str = "[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n\
                   [[builders]]\nname = \"b\"\nimage = \"registry.example.com/b:latest\"\n";

const SIGNING_HEAD: &str = "features: {publish: false, leaderElection: false}
signing:
  existingSecret: kpack-cosign
  requireSigned: true
  trustedKeys:
    - {name: ci, configMap: ci-keys, key: ci.pub}
    - {name: kpack, secret: kpack-builds}
";

const SIGNING_DIR: &str = "/etc/builder-monitor/signing";
const PASSWORD_ENV: &str = "BUILDER_MONITOR_SIGNING_PASSWORD";
/// tests/fixtures/signing: a cosign encrypted key (scrypt N = 32768, as cosign writes it).
const FIXTURE_PASSWORD: &str = "fixture password";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signing").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Secrets and ConfigMap of SIGNING_HEAD, as a kpack user holds them.
fn cluster_objects<'a>(key: &'a str, public: &'a str) -> Vec<(&'a str, &'a str, &'a str)> {
    vec![
        ("kpack-cosign", "cosign.key", key),
        ("kpack-cosign", "cosign.pub", public),
        ("ci-keys", "ci.pub", public),
        ("kpack-builds", "cosign.pub", public),
    ]
}

fn env_var<'a>(docs: &'a [Value], list: &str, name: &str, var: &str) -> Option<&'a Value> {
    container(docs, list, name)["env"].as_array().unwrap().iter().find(|e| e["name"] == var)
}

/// The issue "the chart takes the same Secret kpack uses": cosign.key and cosign.pub mounted in
/// both containers, the password from the Secret by reference, [signing] written with their
/// paths and the trusted keys; `check` in the pod decrypts the key with it.
#[test]
fn the_kpack_cosign_secret_is_mounted_and_written_into_signing() {
    let ws = Workspace::new();
    helm_ok(&["lint", "--strict", CHART, "-f", values_with(&ws, SIGNING_HEAD, FIT).to_str().unwrap()]);
    let docs = render_with(SIGNING_HEAD, FIT);
    assert_locked_down(&docs);
    let volume = pod(&docs)["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "signing").unwrap();
    assert_eq!(
        volume["projected"],
        serde_json::json!({"defaultMode": 0o440, "sources": [
            {"secret": {"name": "kpack-cosign", "items": [
                {"key": "cosign.key", "path": "cosign.key", "mode": 0o400},
                {"key": "cosign.pub", "path": "cosign.pub"}]}},
            {"configMap": {"name": "ci-keys", "items": [{"key": "ci.pub", "path": "trusted/ci.pub"}]}},
            {"secret": {"name": "kpack-builds", "items": [{"key": "cosign.pub", "path": "trusted/kpack.pub"}]}}]}),
        "the key (0400) and the public keys, never the password, as files"
    );
    for (list, name) in [("containers", "builder-monitor"), ("initContainers", "check")] {
        let mounts = container(&docs, list, name)["volumeMounts"].as_array().unwrap();
        let mount = mounts.iter().find(|m| m["name"] == "signing").unwrap_or_else(|| panic!("{name}: no mount"));
        assert_eq!(mount["mountPath"], SIGNING_DIR);
        assert_eq!(mount["readOnly"], true);
        assert!(mount["subPath"].is_null(), "a subPath mount would never see the Secret change");
        let password = env_var(&docs, list, name, PASSWORD_ENV).unwrap_or_else(|| panic!("{name}: no {PASSWORD_ENV}"));
        assert_eq!(
            password["valueFrom"],
            serde_json::json!({"secretKeyRef": {"name": "kpack-cosign", "key": "cosign.password"}})
        );
        assert!(password["value"].is_null(), "the password comes from the Secret, never from values");
    }
    let config = config_text(&docs);
    assert!(config.starts_with(FIT), "the user's config, then the chart's table:\n{config}");
    let signing = format!(
        "[signing]\nkey = \"{SIGNING_DIR}/cosign.key\"\npassword_env = \"{PASSWORD_ENV}\"\nattest = true\n\
         builds = false\nrequire_signed = true\ntrusted_keys = [\"{SIGNING_DIR}/cosign.pub\", \
         \"{SIGNING_DIR}/trusted/ci.pub\", \"{SIGNING_DIR}/trusted/kpack.pub\"]\n"
    );
    assert!(config.ends_with(&signing), "{config}");

    // The pod's `check`, the keys where the pod has them: it reads and decrypts the key.
    let (key, public) = (fixture("cosign-n32768.key"), fixture("cosign-n32768.pub"));
    let objects = cluster_objects(&key, &public);
    let check = init_check_with(&docs, &[(PASSWORD_ENV, FIXTURE_PASSWORD)], &objects);
    assert_eq!(check.code, Some(0), "{}", check.stderr);
    let wrong = init_check_with(&docs, &[(PASSWORD_ENV, "not the password")], &objects);
    assert!(wrong.code == Some(2) && wrong.stderr.contains(PASSWORD_ENV), "{}", wrong.stderr);
    // No secret anywhere in what the chart renders, the ConfigMap above all.
    let rendered = helm_ok(&["template", "bm", CHART, "-f", values_with(&ws, SIGNING_HEAD, FIT).to_str().unwrap()]);
    let key_body = key.lines().nth(1).unwrap();
    for secret in [FIXTURE_PASSWORD, key_body, "PRIVATE KEY"] {
        assert!(!rendered.contains(secret), "{secret:?} rendered");
        assert!(!config.contains(secret));
    }
    assert!(docs.iter().all(|d| d["kind"] != "Secret"));

    // A change of the signing values rolls the pods, as a change of `config` does.
    let checksum = |docs: &[Value]| {
        one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone()
    };
    let built = render_with(&format!("{SIGNING_HEAD}  builds: true\n"), FIT);
    assert!(config_text(&built).contains("\nbuilds = true\n"));
    assert_ne!(checksum(&docs), checksum(&built));

    // Without the values: no table, no volume, no variable; the config as given.
    let plain = render_with("features: {publish: false, leaderElection: false}", FIT);
    assert_eq!(config_text(&plain), FIT);
    assert!(pod(&plain)["volumes"].as_array().unwrap().iter().all(|v| v["name"] != "signing"));
    assert!(env_var(&plain, "containers", "builder-monitor", PASSWORD_ENV).is_none());
}

/// An unencrypted key (`passwordKey: ""`), a Secret without cosign.pub (`publicKeyKey: ""`), and
/// only others' keys trusted (no `existingSecret`): each renders a [signing] `check` accepts.
#[test]
fn signing_without_a_password_or_without_a_key_of_our_own() {
    let ws = Workspace::new();
    let pem = ws.path("p256.pem");
    let out = Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"])
        .arg(&pem)
        .output()
        .expect("run openssl (scripts/test installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let key = std::fs::read_to_string(&pem).unwrap();
    let public = fixture("cosign-n32768.pub");
    let objects = cluster_objects(&key, &public);
    let head = "features: {publish: false, leaderElection: false}\n\
                signing: {existingSecret: kpack-cosign, passwordKey: \"\", publicKeyKey: \"\", attest: false}";
    let docs = render_with(head, FIT);
    for (list, name) in [("containers", "builder-monitor"), ("initContainers", "check")] {
        assert!(env_var(&docs, list, name, PASSWORD_ENV).is_none(), "{name}: no password to take");
    }
    let signing = format!(
        "[signing]\nkey = \"{SIGNING_DIR}/cosign.key\"\nattest = false\nbuilds = false\nrequire_signed = false\ntrusted_keys = []\n"
    );
    assert!(config_text(&docs).ends_with(&signing), "{}", config_text(&docs));
    let check = init_check_with(&docs, &[], &objects);
    assert_eq!(check.code, Some(0), "{}", check.stderr);

    let head = "features: {publish: false, leaderElection: false}\n\
                signing: {requireSigned: true, trustedKeys: [{name: kpack, secret: kpack-builds}]}";
    let docs = render_with(head, FIT);
    let signing = format!("[signing]\nrequire_signed = true\ntrusted_keys = [\"{SIGNING_DIR}/trusted/kpack.pub\"]\n");
    assert!(config_text(&docs).ends_with(&signing), "{}", config_text(&docs));
    assert!(env_var(&docs, "containers", "builder-monitor", PASSWORD_ENV).is_none());
    let check = init_check_with(&docs, &[], &objects);
    assert_eq!(check.code, Some(0), "{}", check.stderr);
}

/// Signing values the chart cannot run fail `helm template` naming the value; a config that
/// writes its own [signing] besides the chart's stops the init container.
#[test]
fn signing_values_the_chart_cannot_run_stop_with_the_fix() {
    let refuse = |set: &[&str], expected: &str| {
        let mut args = vec!["template", "bm", CHART];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = helm().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{set:?}\n→ {stderr}");
    };
    refuse(&["signing.requireSigned=true"], "signing.requireSigned: true trusts no key: set signing.existingSecret");
    refuse(&["signing.existingSecret=Kpack_Cosign"], "existingSecret");
    refuse(&["signing.password=hunter2"], "password");
    refuse(&["signing.trustedKeys[0].name=ci"], "secret");
    refuse(
        &["signing.trustedKeys[0].name=ci", "signing.trustedKeys[0].secret=a", "signing.trustedKeys[0].configMap=b"],
        "oneOf",
    );
    refuse(&["signing.trustedKeys[0].name=CI", "signing.trustedKeys[0].secret=a"], "name");
    refuse(
        &[
            "signing.trustedKeys[0].name=ci",
            "signing.trustedKeys[0].secret=a",
            "signing.trustedKeys[1].name=ci",
            "signing.trustedKeys[1].configMap=b",
        ],
        "signing.trustedKeys: \"ci\" is listed twice",
    );
    refuse(&["signing.existingSecret=k", "podSecurityContext.fsGroup=null"], "set podSecurityContext.fsGroup");

    let (key, public) = (fixture("cosign-n32768.key"), fixture("cosign-n32768.pub"));
    let docs = render_with(SIGNING_HEAD, &format!("{FIT}[signing]\nattest = false\n"));
    let check = init_check_with(&docs, &[(PASSWORD_ENV, FIXTURE_PASSWORD)], &cluster_objects(&key, &public));
    assert!(check.code == Some(2) && check.stderr.contains("duplicate key"), "{}", check.stderr);
    // The line it names is the chart's header, under a comment saying the fix.
    let line: usize = check.stderr.split("config.toml:").nth(1).unwrap().split(':').next().unwrap().parse().unwrap();
    let lines: Vec<&str> = config_text(&docs).lines().collect();
    assert_eq!(lines[line - 1], "[signing]");
    assert!(lines[line - 2].contains("leave [signing] out of `config`"), "{}", lines[line - 2]);
}
