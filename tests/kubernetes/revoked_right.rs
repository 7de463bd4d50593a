//! A right taken from the running daemon (issue 62 item 5): under exactly the RBAC `builder-monitor
//! rbac` prints, `patch` on Deployments is removed from its Role; a deploy then waits for it —
//! named in `status`, `/readyz` and one log line — while the builder watch goes on pinning moves;
//! the rule restored, the same deploy is written and the right clears, without a restart.

use crate::support;

use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::exact_rbac::{apply, await_granted, token, write_kubeconfig};
use support::cnb::BuilderSpec;
use support::control_plane::control_plane;
use support::daemon::{Daemon, Workspace, run_with_env};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

const TOKEN_ENV: &str = "BM_REVOKED_TEST_TOKEN";
const TOKEN: &str = "revoked-right-test-token";

async fn readyz(addr: &str) -> Value {
    support::http().get(format!("http://{addr}/readyz")).send().await.unwrap().json().await.unwrap()
}

/// Waits until the server's authorizer refuses `account` the verb (SubjectAccessReview, by the
/// admin): the Role just applied takes effect once its informers have seen it.
async fn await_refused(client: &kube::Client, namespace: &str, account: &str, verb: &str, group: &str, resource: &str) {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": format!("system:serviceaccount:{namespace}:{account}"),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"), "system:authenticated"],
        "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource},
    }}))
    .unwrap();
    let refused = async {
        loop {
            let answer = reviews.create(&PostParams::default(), &review).await.expect("SubjectAccessReview");
            if !answer.status.is_some_and(|s| s.allowed) {
                return;
            }
            // The authorizer's informers offer no event to wait on; ask again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(support::PATIENCE, refused).await.expect("the right is taken away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_waits_for_a_removed_right_and_resumes_when_it_is_restored() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    pusher
        .push_image(
            "demo/builder",
            Some("latest"),
            &BuilderSpec::jammy(&format!("{host}/demo/run:1")).image(),
            Format::Oci,
        )
        .await;
    let v1 = pusher
        .push_image("apps/web", Some("latest"), &BuilderSpec::jammy("example.test/a:1").image(), Format::Oci)
        .await;
    let ns = control_plane().namespace("revoked").await;
    ns.create(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": format!("{host}/apps/web@{}", v1.digest)}]}}}}))
        .await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"{TOKEN_ENV}\"\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\n\
         deploy = [{{ kind = \"Deployment\", namespace = \"{ns}\", name = \"web\" }}]\n\n\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nnamespace = \"{ns}\"\n",
        ws.path("account.kubeconfig").display(),
        ns = ns.name,
    ));
    let cli = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--config", config.to_str().unwrap()]);
        run_with_env(&all, &[(TOKEN_ENV, TOKEN), ("BUILDER_MONITOR_API_TOKEN", TOKEN)], &ws.path(""))
    };
    let account = format!("{}-daemon", ns.name);
    let out = cli(&["rbac", "--output", "json", "--service-account", &account]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let printed: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    apply(&ns.client, &printed).await;
    await_granted(&ns.client, &ns.name, &account, "patch", "apps", "deployments").await;
    write_kubeconfig(
        &ws.path("account.kubeconfig"),
        &ns.kubeconfig,
        &token(&ns.client, &ns.name, &account).await,
        None,
    );

    let mut daemon = Daemon::start_with_env(&config, &[(TOKEN_ENV, TOKEN)]);
    let addr = daemon.server_addr();
    daemon.wait_for_event("builder.pinned");

    // `patch` on Deployments taken from the Role the daemon runs under.
    let mut revoked = printed.clone();
    for object in revoked.iter_mut().filter(|o| o["kind"] == "Role") {
        for rule in object["rules"].as_array_mut().unwrap().iter_mut().filter(|r| r["resources"][0] == "deployments") {
            let verbs: Vec<Value> =
                rule["verbs"].as_array().unwrap().iter().filter(|v| *v != "patch").cloned().collect();
            rule["verbs"] = Value::Array(verbs);
        }
    }
    apply(&ns.client, &revoked).await;
    await_refused(&ns.client, &ns.name, &account, "patch", "apps", "deployments").await;

    let v2 = pusher
        .push_image("apps/web", Some("latest"), &BuilderSpec::jammy("example.test/a:2").image(), Format::Oci)
        .await;
    // A deploy by hand, through the daemon's API (what `builder-monitor deploy web` sends).
    let answer = support::http()
        .post(format!("http://{addr}/api/v1/images/web/deploy"))
        .bearer_auth(TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_success(), "{}", answer.text().await.unwrap());
    let right = format!("patch deployments.apps in namespace \"{}\"", ns.name);
    let refused = daemon.wait_for("the refusal", |l| l["right"] == right.as_str());
    assert_eq!(refused["level"], "WARN", "{refused}");
    let ready = readyz(&addr).await;
    assert_eq!(ready["degraded"], true, "{ready}");
    assert_eq!(ready["missing_rights"], json!([format!("{right} (for image \"web\"'s deploy)")]), "{ready}");
    let status: Value = serde_json::from_str(&cli(&["status", "--json"]).stdout).unwrap();
    let entry = status["deploys"].as_array().unwrap().iter().find(|d| d["image"] == "web").unwrap().clone();
    assert_eq!(entry["detail"], format!("waiting for the right to {right}"), "{entry}");
    let text = cli(&["status"]).stdout;
    assert!(text.contains(&format!("waiting for the right to {right}")), "{text}");

    // The builder watch goes on: a move is pinned while the deploy waits.
    pusher
        .push_image(
            "demo/builder",
            Some("latest"),
            &BuilderSpec::jammy(&format!("{host}/demo/run:2")).image(),
            Format::Oci,
        )
        .await;
    daemon.wait_for_event("builder.changed");

    apply(&ns.client, &printed).await;
    daemon.wait_for("the right back", |l| l["message"] == "the right is granted again: what waited for it resumes");
    daemon.wait_for_event("deploy.succeeded");
    let running = ns.get("apps/v1", "Deployment", "web").await.unwrap();
    assert_eq!(running["spec"]["template"]["spec"]["containers"][0]["image"], format!("{host}/apps/web@{}", v2.digest));
    let ready = readyz(&addr).await;
    assert_eq!(ready["missing_rights"], json!([]), "{ready}");
    assert_eq!(ready["degraded"], false, "{ready}");
    let (_, log) = daemon.terminate();
    let refusals = log.iter().filter(|l| l.contains("the cluster refused a right")).count();
    assert_eq!(refusals, 1, "one line when it went missing, however often it was asked again");
}
