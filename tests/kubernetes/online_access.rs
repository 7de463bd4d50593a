//! `check --online` against the real control plane (issue 62 items 5 and 6): it runs the daemon's
//! start-up access check (SelfSubjectAccessReviews), so a config whose account lacks one rule of
//! what `builder-monitor rbac` prints fails naming the verb, resource and namespace; a bad token
//! (401), a token with no rights, a CA that does not match and a namespace that does not exist
//! are each one line naming the fix.

use crate::exact_rbac::{World, apply, await_granted, token, write_kubeconfig};

use serde_json::Value;

/// A deploy to a Deployment in the test's namespace, beside the ledger and the Lease: the
/// printed RBAC has the daemon's Role and the deploys' Role there.
const DEPLOY: &str = "[[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"HOST/apps/web:latest\"\n\
    deploy = [{ kind = \"Deployment\", namespace = \"NAMESPACE\", name = \"web\" }]\n\n\
    [runner]\ntype = \"none\"\nrebase = \"registry\"\n";

/// The `failed:` lines of the `[kubernetes]` cluster in `check --online`'s stderr, which exits 1.
fn cluster_failures(w: &World) -> Vec<String> {
    let out = w.run(&["check", "--online"]);
    assert_eq!(out.code, Some(1), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let lines: Vec<String> =
        out.stderr.lines().filter(|l| l.starts_with("failed: cluster of [kubernetes]: ")).map(String::from).collect();
    assert_eq!(lines.len(), 1, "one line for the cluster:\n{}", out.stderr);
    lines
}

/// `printed` without the verb `verb` of `resource`'s rule (the rule gone when no verb is left).
fn without(printed: &[Value], resource: &str, verb: &str) -> Vec<Value> {
    let mut out = printed.to_vec();
    for object in out.iter_mut().filter(|o| o["kind"] == "Role") {
        let rules = object["rules"].as_array_mut().unwrap();
        for rule in rules.iter_mut().filter(|r| r["resources"][0] == resource) {
            rule["verbs"].as_array_mut().unwrap().retain(|v| v != verb);
        }
        rules.retain(|r| !r["verbs"].as_array().unwrap().is_empty());
    }
    out
}

/// Under exactly the printed RBAC `check --online` passes, having asked every permission; with
/// one verb or one rule taken away, its one line names what is missing, where, and for what.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_names_each_permission_the_printed_rbac_would_lack() {
    let w = World::new(DEPLOY).await;
    let client = &w.ns.client;
    let ns = &w.ns.name;

    let account = format!("{ns}-all");
    apply(client, &w.printed_rbac(&account)).await;
    await_granted(client, ns, &account, "patch", "apps", "deployments").await;
    w.use_token(&token(client, ns, &account).await);
    let out = w.run(&["check", "--online"]);
    assert_eq!(out.code, Some(0), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains(
            "ok: cluster of [kubernetes]: answers (Kubernetes 1.37); every permission the config needs is granted"
        ),
        "{}",
        out.stdout
    );

    // The case: `patch` on deployments taken away.
    let account = format!("{ns}-nopatch");
    apply(client, &without(&w.printed_rbac(&account), "deployments", "patch")).await;
    await_granted(client, ns, &account, "get", "apps", "deployments").await;
    w.use_token(&token(client, ns, &account).await);
    let failed = cluster_failures(&w);
    assert_eq!(
        failed[0],
        format!(
            "failed: cluster of [kubernetes]: missing permission in namespace \"{ns}\": patch deployments.apps (for [[images]] deploy); grant them to the daemon's service account (`builder-monitor rbac` prints the Roles and bindings it needs)"
        )
    );

    // A whole rule: the Lease's.
    let account = format!("{ns}-nolease");
    let printed = w.printed_rbac(&account);
    let mut reduced = printed.clone();
    for verb in ["create", "get", "update"] {
        reduced = without(&reduced, "leases", verb);
    }
    assert_ne!(reduced, printed);
    apply(client, &reduced).await;
    await_granted(client, ns, &account, "update", "", "configmaps").await;
    w.use_token(&token(client, ns, &account).await);
    let failed = cluster_failures(&w);
    assert!(
        failed[0].contains(&format!(
            "missing permission in namespace \"{ns}\": create leases.coordination.k8s.io, get leases.coordination.k8s.io, update leases.coordination.k8s.io (for [kubernetes] leader_election)"
        )),
        "{}",
        failed[0]
    );
    assert!(!failed[0].contains("configmaps") && !failed[0].contains("deployments"), "{}", failed[0]);
}

/// Issue 62 item 6: a token the server does not know (401), a token of an account bound to
/// nothing, a CA other than the server's, a namespace that does not exist: each one line naming
/// the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_names_the_fix_for_a_bad_token_no_rights_a_wrong_ca_and_no_namespace() {
    let w = World::new("").await;
    let ns = &w.ns.name;
    let kubeconfig = w.ws.path("account.kubeconfig");

    write_kubeconfig(&kubeconfig, &w.ns.kubeconfig, "not-a-token-this-server-signed", None);
    let failed = cluster_failures(&w);
    assert_eq!(
        failed[0],
        "failed: cluster of [kubernetes]: the cluster refused the kubeconfig's credentials (HTTP 401) — renew them in the kubeconfig (an expired or revoked token, or one of another cluster)"
    );

    let nobody = token(&w.ns.client, ns, "nobody").await;
    w.use_token(&nobody);
    let failed = cluster_failures(&w);
    assert!(failed[0].contains(&format!("missing permission in namespace \"{ns}\" (or it does not exist): create configmaps, get configmaps, list configmaps, update configmaps (for [monitor] state = \"kubernetes\")")), "{}", failed[0]);
    assert!(failed[0].ends_with("(`builder-monitor rbac` prints the Roles and bindings it needs)"), "{}", failed[0]);

    let other_ca = other_ca(&w);
    write_kubeconfig(&kubeconfig, &w.ns.kubeconfig, &nobody, Some(&other_ca));
    let failed = cluster_failures(&w);
    assert_eq!(
        failed[0],
        "failed: cluster of [kubernetes]: the server's certificate is not signed by the kubeconfig's CA — set the cluster's CA in the kubeconfig (certificate-authority-data), or check its server address"
    );

    // The admin (its kubeconfig) may read namespaces: one that does not exist is named as such.
    let text = std::fs::read_to_string(&w.config).unwrap();
    let text = text
        .replace(&kubeconfig.display().to_string(), &w.ns.kubeconfig.display().to_string())
        .replace(&format!("namespace = \"{ns}\""), "namespace = \"no-such-namespace\"");
    std::fs::write(&w.config, text).unwrap();
    let failed = cluster_failures(&w);
    assert_eq!(
        failed[0],
        "failed: cluster of [kubernetes]: namespace \"no-such-namespace\" does not exist; create it or change the namespace (needed for [kubernetes] leader_election)"
    );
}

/// A CA certificate (base64 PEM) that did not sign the server's: a fresh one, by openssl.
fn other_ca(w: &World) -> String {
    let key = w.ws.path("other-ca.key");
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=another CA", "-keyout"])
        .arg(&key)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(out.stdout)
}
