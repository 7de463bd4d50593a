//! The chart's Grafana dashboard: shipped off by default with the sidecar's label, and reading
//! only metrics the binary exposes.

use super::*;

#[test]
fn the_grafana_dashboard_ships_off_by_default_with_the_sidecar_label() {
    let dashboards = |docs: &[Value]| -> Vec<Value> {
        docs.iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
            .cloned()
            .collect()
    };
    assert!(dashboards(&render(&[])).is_empty(), "off by default");
    helm_ok(&["lint", "--strict", CHART, "--set", "grafanaDashboard.enabled=true"]);
    let docs = render(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "grafanaDashboard.annotations.grafana_folder=Builds",
    ]);
    let found = dashboards(&docs);
    assert_eq!(found.len(), 1, "one dashboard ConfigMap");
    let map = &found[0];
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    assert_eq!(map["metadata"]["annotations"]["grafana_folder"], "Builds");
    let shipped = std::fs::read_to_string(Path::new(CHART).join("dashboards/builder-monitor.json")).unwrap();
    let rendered: Value = serde_json::from_str(map["data"]["builder-monitor.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, serde_json::from_str::<Value>(&shipped).unwrap(), "the dashboard file, unchanged");
    dashboard_panels_read_the_binarys_metrics(&rendered);
    let elsewhere = render(&["--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=grafana"]);
    assert_eq!(dashboards(&elsewhere)[0]["metadata"]["namespace"], "grafana");
    let out = helm().args(["template", "bm", CHART, "--set", "grafanaDashboard.enabld=true"]).output().unwrap();
    assert!(!out.status.success(), "values.schema.json refuses unknown keys");
}

/// The dashboard's metrics are the binary's; failing watches per registry and the pins have
/// panels; a `builder` variable filters every series that has a builder label.
fn dashboard_panels_read_the_binarys_metrics(dashboard: &Value) {
    use builder_monitor::metrics::{ChangeLabels, DeliveryLabels, Metrics, RequestLabels};
    // A series in every family (an empty family writes nothing).
    let metrics = Metrics::new();
    metrics.record_check("w", None, 1.0);
    metrics.set_pinned("w", "sha256:aa");
    metrics.set_open_actions(["pending"]);
    let registry = Metrics::registry_labels("r");
    let (r, s) = (String::from("r"), String::from("x"));
    metrics.changes.get_or_create(&ChangeLabels { builder: "w".into(), kind: s.clone() }).inc();
    metrics.deliveries.get_or_create(&DeliveryLabels { alert: s.clone(), outcome: s.clone() }).inc();
    metrics.registry_requests.get_or_create(&RequestLabels { registry: r, method: s.clone(), status: s }).inc();
    metrics.rate_limited.get_or_create(&registry).inc();
    metrics.rate_limit_wait.get_or_create(&registry).inc();
    metrics.watches_failing.get_or_create(&registry).set(1);
    let exposition = metrics.encode();
    let families: Vec<&str> = exposition.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    let per_builder: BTreeSet<&str> =
        exposition.lines().filter(|l| l.contains("builder=\"w\"")).map(|l| l.split('{').next().unwrap()).collect();
    assert!(per_builder.len() >= 4, "{exposition}");
    let text = dashboard.to_string();
    for (at, _) in text.match_indices("builder_monitor_") {
        let name: String = text[at..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        let known = families
            .iter()
            .any(|f| ["", "_total", "_bucket", "_sum", "_count"].iter().any(|suffix| name == format!("{f}{suffix}")));
        assert!(known, "the dashboard reads {name}, which the binary does not expose");
    }
    let variable = dashboard["templating"]["list"].as_array().unwrap().iter().find(|v| v["name"] == "builder");
    let variable = variable.expect("a `builder` template variable");
    assert_eq!(
        (&variable["type"], &variable["includeAll"], &variable["multi"]),
        (&"query".into(), &true.into(), &true.into())
    );
    assert!(variable["definition"].as_str().unwrap().contains("builder_monitor_checks_total, builder"));
    let panels = dashboard["panels"].as_array().unwrap();
    let exprs = |panel: &Value| -> Vec<String> {
        panel["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_string()).collect()
    };
    let panel_reading = |metric: &str| panels.iter().find(|p| exprs(p).iter().any(|e| e.contains(metric)));
    let failing = panel_reading("builder_monitor_watches_failing").expect("a panel of failing watches");
    assert!(exprs(failing)[0].contains("by (registry)") && failing["targets"][0]["legendFormat"] == "{{registry}}");
    let pins = panel_reading("builder_monitor_pinned_info").expect("a panel of the pins");
    assert!(exprs(pins)[0].contains("by (builder, digest)"), "{pins}");
    let mut filtered = 0;
    for panel in panels {
        for expr in exprs(panel) {
            for series in &per_builder {
                for selector in expr.split(series).skip(1) {
                    assert!(
                        selector.starts_with('{')
                            && selector[..selector.find('}').unwrap()].contains("builder=~\"$builder\""),
                        "panel {}: {series} without the builder variable: {expr}",
                        panel["title"]
                    );
                    filtered += 1;
                }
            }
        }
    }
    assert!(filtered >= 6, "the per-builder panels use the variable");
}
