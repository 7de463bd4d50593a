//! The benchmark's report as a Markdown table: one row per measurement of each item that ran.

use std::fmt::Write as _;

use serde_json::Value;

use crate::RUN_LAYERS;

pub(crate) fn render(report: &Value) -> String {
    let mut md = String::from("| item | measurement | result |\n|---|---|---|\n");
    let ms = |v: &Value| format!("{:.1} ms", v.as_f64().unwrap_or(f64::NAN) * 1e3);
    let kib = |v: &Value| format!("{:.1} KiB", v.as_f64().unwrap_or(f64::NAN) / 1024.0);
    if let Some(one) = report.get("one") {
        let t = &one["rebase"]["traffic"];
        let _ = writeln!(
            md,
            "| 1 | rebase of one {}-layer app ({:.1} MiB) | {}, {} requests ({}), {} sent, {} received; blobs {} |",
            one["layers"],
            one["app_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
            ms(&one["rebase"]["seconds"]),
            t["requests"],
            t["by_method"],
            kib(&t["bytes_sent"]),
            kib(&t["bytes_received"]),
            one["rebase"]["report"]["blobs"],
        );
        let s = &one["skopeo_copy"]["traffic"];
        let _ = writeln!(
            md,
            "| 1 | `skopeo copy` of the same app to another registry (baseline) | {}, {} requests, {} sent, {} received |",
            ms(&one["skopeo_copy"]["seconds"]),
            s["requests"],
            kib(&s["bytes_sent"]),
            kib(&s["bytes_received"]),
        );
    }
    if let Some(many) = report.get("many") {
        let _ = writeln!(
            md,
            "| 2 | {} apps: per rebase, one at a time (median) | {} |",
            many["sequential"]["apps"],
            ms(&many["sequential"]["median_seconds"])
        );
        let _ = writeln!(
            md,
            "| 2 | {} apps, {} at a time | {:.1} apps/s |",
            many["parallel"]["apps"],
            many["parallel"]["concurrency"],
            many["parallel"]["apps_per_second"].as_f64().unwrap_or(f64::NAN)
        );
        let _ = writeln!(
            md,
            "| 2 | `skopeo copy` per app (median of {}, baseline) | {} |",
            many["skopeo_copy"]["apps"],
            ms(&many["skopeo_copy"]["median_seconds"])
        );
    }
    for fleet in ["fleet", "fleet_signed"].iter().filter_map(|k| report.get(*k)) {
        let t = &fleet["traffic"];
        let _ = writeln!(
            md,
            "| 3 | fleet patch{}: {} apps ({}, {} of {RUN_LAYERS} run image layers changed), push of a new run image → last app tag rebased (push hook) | {:.1} s (first app after {:.2} s, 90 % after {:.1} s), {} failed attempts, {} requests ({:.1} per app: {}), {} sent, {} received, CPU per app: registry {} ms, daemon {} ms, daemon peak RSS {} MiB (no layer bytes) |",
            if fleet["signing"] == true { ", signed and attested" } else { "" },
            fleet["apps"],
            if fleet["shared_repository"] == true { "tags of one repository" } else { "one repository each" },
            fleet["run_layers_changed"],
            fleet["seconds"].as_f64().unwrap_or(f64::NAN),
            fleet["first_seconds"].as_f64().unwrap_or(f64::NAN),
            fleet["p90_seconds"].as_f64().unwrap_or(f64::NAN),
            fleet["failed_attempts"],
            t["requests"],
            t["requests_per_app"].as_f64().unwrap_or(f64::NAN),
            t["by_method"],
            kib(&t["bytes_sent"]),
            kib(&t["bytes_received"]),
            fleet["cpu_ms_per_app"]["registry"].as_f64().map_or("?".to_string(), |m| format!("{m:.1}")),
            fleet["cpu_ms_per_app"]["daemon"].as_f64().map_or("?".to_string(), |m| format!("{m:.1}")),
            fleet["peak_rss_kib"].as_u64().map_or("?".to_string(), |k| format!("{:.1}", k as f64 / 1024.0)),
        );
        let kinds: Vec<String> = t["by_kind"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(kind, v)| {
                let per_app = v["per_app"].as_f64().unwrap_or(f64::NAN);
                let ms = v["registry_ms_per_app"].as_f64().unwrap_or(f64::NAN);
                format!("{kind} {per_app:.2} ({ms:.1} ms)")
            })
            .collect();
        let _ = writeln!(
            md,
            "| 3 | the same, requests per app by kind (the registry's answering time per app, summed) | {} |",
            kinds.join("; ")
        );
    }
    if let Some(ratio) = report.get("signed_over_unsigned").and_then(Value::as_f64) {
        let _ = writeln!(md, "| 3 | fleet patch signed / unsigned, same run | {ratio:.2}× |");
    }
    for run in report.get("claims").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(
            md,
            "| 4 | claims over one change of {} pending rebases, 16 slots (SQLite, in-process) | {} claims in {:.2} s ({} per claim in the first tenth, {} in the last); {:.2} s to record them, {:.2} s to finish them |",
            run["actions"],
            run["claims"],
            run["claim_seconds"].as_f64().unwrap_or(f64::NAN),
            ms(&run["first_tenth_mean_seconds"]),
            ms(&run["last_tenth_mean_seconds"]),
            run["record_seconds"].as_f64().unwrap_or(f64::NAN),
            run["finish_seconds"].as_f64().unwrap_or(f64::NAN),
        );
    }
    md
}
