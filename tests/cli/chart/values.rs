//! The chart in Helm's terms: the init container's disagreements name the Helm value to change,
//! `values.schema.json` refuses what the values alone show wrong (at `helm template`, before any
//! pod), and several replicas keep off one node by default.

use super::*;

const BUILDERS: &str = "[[builders]]\nname = \"b\"\nimage = \"x/y:latest\"\n";

/// A config that fits the values `features: {publish: false, leaderElection: false}`.
fn fits() -> String {
    format!("[server]\nlisten = \"0.0.0.0:9464\"\n[monitor]\nstate = \"kubernetes\"\n{BUILDERS}")
}

/// Each expectation the chart passes names its Helm value, and a config that disagrees with
/// each stops the init container with that value as the other fix, never an `--expect` the
/// operator does not write.
#[test]
fn every_disagreement_of_the_init_check_names_the_helm_value() {
    let head = "features: {publish: false, leaderElection: false}";
    let docs = render_with(head, &fits());
    let args = container(&docs, "initContainers", "check")["args"].as_array().unwrap().clone();
    let expectations: Vec<&str> =
        args.windows(2).filter(|w| w[0] == "--expect").map(|w| w[1].as_str().unwrap()).collect();
    assert_eq!(expectations.len(), 11, "{args:?}");
    for e in &expectations {
        assert!(e.contains('@'), "{e}: names the value it came from");
    }
    let deploy = "[[images]]\nname = \"w\"\nbuilder = \"b\"\nimage = \"x/w:1\"\n\
                  deploy = [{ kind = \"Deployment\", namespace = \"shop\", name = \"w\" }]\n";
    let pool = "[runner]\ntype = \"kubernetes\"\n[runner.kubernetes]\nnamespace = \"default\"\n\
                [[runner.pools]]\nname = \"arm\"\nkubeconfig = \"/etc/builder-monitor/pools/arm/kubeconfig\"\n";
    let fits = fits();
    let cases = [
        (
            head,
            format!("[server]\nlisten = \"0.0.0.0:8080\"\n[monitor]\nstate = \"kubernetes\"\n{BUILDERS}"),
            "(or set features.port: 8080)",
        ),
        (head, format!("[monitor]\nstate = \"kubernetes\"\n{BUILDERS}"), "(the port is features.port)"),
        (head, format!("{fits}[kubernetes]\nnamespace = \"x\"\n"), "(or install the release with --namespace x)"),
        (head, format!("{fits}[kubernetes]\nkubeconfig = \"/k\"\n"), "(the account is serviceAccount's)"),
        ("", fits.clone(), "set publish = true (or set features.publish: false)"),
        (head, format!("{fits}[kubernetes]\npublish = true\nprune = true\n"), "(or set features.prune: true)"),
        (head, format!("{fits}[kubernetes]\nleader_election = true\n"), "(or set features.leaderElection: true)"),
        (head, format!("[server]\nlisten = \"0.0.0.0:9464\"\n{BUILDERS}"), "or set features.clusterState: false"),
        (
            "features: {publish: false, leaderElection: false, clusterState: false}",
            fits.clone(),
            "(or set features.clusterState: true)",
        ),
        (head, format!("{fits}[runner]\ntype = \"kpack\"\n"), "(or set features.runner.type: kpack)"),
        (
            "features: {publish: false, leaderElection: false, runner: {type: kpack, namespace: builds}}",
            format!("{fits}[runner]\ntype = \"kpack\"\n[runner.kubernetes]\nnamespace = \"ci\"\n"),
            "(or set features.runner.namespace: ci)",
        ),
        (head, format!("{fits}{deploy}"), "set deployNamespaces: [\"shop\"]"),
        (
            "features: {publish: false, leaderElection: false, runner: {type: kubernetes, namespace: default}}",
            format!("{fits}{pool}"),
            "(or add an entry named \"arm\" to pools, with the Secret holding that kubeconfig)",
        ),
    ];
    for (head, config, value) in cases {
        let check = init_check(&render_with(head, &config), &[]);
        assert!(check.code == Some(2) && check.stderr.contains(value), "{head}\n{config}\n→ {}", check.stderr);
        assert!(!check.stderr.contains("or expect "), "{}", check.stderr);
    }
}

/// `helm template` (and so `lint` and `install`) refuses, naming the value, what
/// values.schema.json can judge from the values alone.
#[test]
fn values_the_schema_can_judge_fail_helm_template_naming_the_value() {
    let cases = [
        // A typo of a top-level key would otherwise be ignored.
        ("replicas: 3", "replicas"),
        ("replicaCount: 0", "replicaCount"),
        ("replicaCount: \"2\"", "replicaCount"),
        ("features: {port: \"9464\"}", "features.port"),
        ("features: {publish: \"true\"}", "features.publish"),
        ("features: {leaderElectoin: true}", "leaderElectoin"),
        ("features: {runner: {type: kubernetes, namespace: Builds}}", "features.runner.namespace"),
        // Pruning deletes what publishing made: one without the other is a mistake.
        ("features: {publish: false, prune: true}", "features.publish"),
        ("deployNamespaces: shop", "deployNamespaces"),
        ("pools: [{name: arm}]", "kubeconfigSecret"),
        // YAML reads 1.10 as the number 1.1.
        ("image: {tag: 1.10}", "image.tag"),
        ("image: {pullPolicy: always}", "image.pullPolicy"),
        ("imagePullSecrets: [regcred]", "imagePullSecrets.0"),
        ("extraEnv: [{name: PORT, value: 8080}]", "extraEnv.0.value"),
        ("podDisruptionBudget: {maxUnavailable: half}", "podDisruptionBudget.maxUnavailable"),
        ("podAntiAffinityPreset: always", "podAntiAffinityPreset"),
        ("service: {type: Ingress}", "service.type"),
        ("persistence: {size: lots}", "persistence.size"),
    ];
    for (head, value) in cases {
        let stderr = render_error(head, &fits());
        // Helm 3 names `a.b.0`, Helm 4 `/a/b/0`.
        let slashed = format!("/{}", value.replace('.', "/"));
        assert!(stderr.contains(value) || stderr.contains(&slashed), "{head}: names {value}:\n{stderr}");
    }
    // The same refusal in `helm lint`.
    let ws = Workspace::new();
    let path = values_with(&ws, "replicas: 3", &fits());
    let out = helm().args(["lint", CHART, "-f", path.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

/// The pod's affinity as rendered from `head`.
fn affinity(head: &str) -> Value {
    let config = format!("{}[kubernetes]\npublish = true\nleader_election = true\n", fits());
    pod(&render_with(head, &config))["affinity"].clone()
}

/// Two replicas on one node are one node's loss from none: by default they prefer different
/// nodes, by the release's own selector labels; `podAntiAffinityPreset` and `affinity` override.
#[test]
fn several_replicas_keep_off_one_node_unless_told_otherwise() {
    let docs = render(&[]);
    assert_eq!(one(&docs, "Deployment")["spec"]["replicas"], 2);
    let selector = one(&docs, "Deployment")["spec"]["selector"]["matchLabels"].clone();
    let term = serde_json::json!({"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"});
    assert_eq!(
        pod(&docs)["affinity"],
        serde_json::json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}
        ]}})
    );
    assert_eq!(
        affinity("podAntiAffinityPreset: hard")["podAntiAffinity"],
        serde_json::json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]})
    );
    assert!(affinity("podAntiAffinityPreset: none").is_null());
    // One replica has no one to avoid.
    let single = render_with("features: {publish: false, leaderElection: false}", &fits());
    assert!(pod(&single)["affinity"].is_null(), "{}", pod(&single)["affinity"]);
    assert!(affinity("replicaCount: 1").is_null());
    // The user's own rules stay; theirs replace ours only for podAntiAffinity.
    let node = "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [ops]}]}]}}}";
    let merged = affinity(node);
    assert_eq!(
        merged["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            [0]["key"],
        "pool"
    );
    assert_eq!(
        merged["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"],
        term
    );
    let theirs = "affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 5, podAffinityTerm: {topologyKey: topology.kubernetes.io/zone, labelSelector: {matchLabels: {app: x}}}}]}}";
    let replaced = affinity(theirs);
    assert_eq!(replaced["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"], 5);
    assert_eq!(
        replaced["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].as_array().unwrap().len(),
        1
    );
}
