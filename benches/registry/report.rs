//! The report: every figure of a run rendered as the Markdown table of docs/performance.md.

use super::*;

pub(crate) fn f(v: &Value, digits: usize) -> String {
    match v.as_f64() {
        Some(x) => format!("{x:.digits$}"),
        None => "n/a".to_string(),
    }
}

pub(crate) fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "**missed**",
        None => "n/a",
    }
}

pub(crate) fn render(r: &Value) -> String {
    let m = &r["machine"];
    let mut out = String::new();
    let _ = writeln!(out, "# builder-monitor registry benchmark\n");
    let _ = writeln!(
        out,
        "`{}` on {} × {} ({} MHz), {:.1} GiB RAM, Linux {}; {}; commit {}, {}; load average {} at start, {} at end.\n",
        r["command"].as_str().unwrap_or_default(),
        m["cores"],
        m["cpu_model"].as_str().unwrap_or("?"),
        m["cpu_mhz"].as_str().unwrap_or("?"),
        m["memory_gib"].as_f64().unwrap_or(0.0),
        m["kernel"].as_str().unwrap_or("?"),
        m["registry"].as_str().unwrap_or("registry ?"),
        m["commit"].as_str().unwrap_or("?"),
        m["date"].as_str().unwrap_or("?"),
        m["load_average_at_start"].as_str().unwrap_or("?"),
        m["load_average_at_end"].as_str().unwrap_or("?"),
    );
    let _ = writeln!(
        out,
        "Cores: {}.\n",
        m["pinning"].as_str().unwrap_or("shared by the registry, the daemon and the load tools")
    );
    let _ = writeln!(out, "| # | measurement | result | target | |\n|---|---|---|---|---|");
    let mut row = |n: &str, what: String, result: String, target: &str, ok: Option<bool>| {
        let _ = writeln!(out, "| {n} | {what} | {result} | {target} | {} |", verdict(ok));
    };
    for (label, v) in
        [("anonymous", &r["requests_per_check"]["anonymous"]), ("bearer token", &r["requests_per_check"]["bearer"])]
    {
        let per = v["requests_per_check"].as_f64();
        row(
            "1",
            format!(
                "requests per unchanged check, {label} ({} tags, {} checks in {} s, counted at a proxy{})",
                v["tags"],
                v["checks"],
                f(&v["seconds"], 0),
                if label == "anonymous" { String::new() } else { " plus the token server".into() }
            ),
            format!(
                "{} ({} HEAD, {} token fetches, {} 401s)",
                f(&v["requests_per_check"], 4),
                v["heads"],
                v["token_fetches"],
                v["unauthorized_answers"]
            ),
            "≤ 1.01",
            per.map(|p| p <= 1.01),
        );
    }
    let b = &r["requests_per_check"]["bearer"];
    row(
        "1",
        format!(
            "token fetches per (scope, token lifetime) while pinning ({} scopes, {} tags pinned 16 at a time in {} s, lifetime {} s; {} 401s)",
            b["scopes_at_pin"],
            b["tags"],
            f(&b["pin"]["seconds"], 1),
            b["token_lifetime_seconds"],
            b["pin"]["unauthorized_answers"]
        ),
        format!(
            "{} ({} fetches in all, at most {} for one scope, {} sooner than 90 % of a lifetime after the previous)",
            f(&b["token_fetches_per_scope_per_lifetime_at_pin"], 2),
            b["pin"]["token_fetches"],
            b["max_token_fetches_of_one_scope_at_pin"],
            b["duplicate_token_fetches_at_pin"]
        ),
        "≤ 1",
        b["token_fetches_per_scope_per_lifetime_at_pin"].as_f64().map(|x| x <= 1.0),
    );
    let between = &b["seconds_between_fetches_of_a_scope"];
    row(
        "1",
        format!(
            "token fetches per (scope, token lifetime) at steady state (lifetime {} s; {} s of checks, {} refetch intervals)",
            b["token_lifetime_seconds"],
            f(&b["seconds"], 0),
            between["samples"]
        ),
        format!(
            "{} (a scope's token refetched every {} s on average, at least {} s apart)",
            f(&b["token_fetches_per_scope_per_lifetime"], 2),
            f(&between["mean"], 2),
            f(&between["min"], 2)
        ),
        "≤ 1",
        b["token_fetches_per_scope_per_lifetime"].as_f64().map(|x| x <= 1.0),
    );
    let t = &r["throughput"];
    row(
        "2",
        format!("builder-monitor checks/s, C={}, rate limit off ({} tags, in process)", t["concurrency"], t["tags"]),
        format!(
            "{} ({} ms CPU/check; registry {} ms/check)",
            f(&t["builder_monitor"]["checks_per_second"], 0),
            f(&t["builder_monitor"]["cpu_ms_per_check"], 3),
            f(&t["builder_monitor"]["registry_cpu_ms_per_check"], 3)
        ),
        "",
        None,
    );
    row(
        "2",
        format!(
            "registry HEAD ceiling, C={} keep-alive ({})",
            t["concurrency"],
            t["ceiling"]["tool"].as_str().unwrap_or("?")
        ),
        f(&t["ceiling"]["requests_per_second"], 0),
        "",
        None,
    );
    row(
        "2",
        "wrk GET, same Accept, C=16 keep-alive (reference)".into(),
        f(&t["wrk_get"]["requests_per_second"], 0),
        "",
        None,
    );
    row(
        "2",
        "ratio builder-monitor / HEAD ceiling".into(),
        f(&t["ratio_to_ceiling"], 2),
        "≥ 0.8",
        t["ratio_to_ceiling"].as_f64().map(|x| x >= 0.8),
    );
    let d = &t["daemon"];
    row(
        "2",
        format!("`builder-monitor run` unchanged checks/s, start-up excluded ({} tags)", d["tags"]),
        format!("{} ({} ms CPU/check)", f(&d["run"]["checks_per_second"], 0), f(&d["run"]["cpu_ms_per_check"], 3)),
        "≤ 0.05 ms CPU/check",
        d["run"]["cpu_ms_per_check"].as_f64().map(|x| x <= 0.05),
    );
    row(
        "2",
        "ratio `run` / HEAD ceiling".into(),
        f(&t["daemon_ratio_to_ceiling"], 2),
        "≥ 0.95",
        t["daemon_ratio_to_ceiling"].as_f64().map(|x| x >= 0.95),
    );
    row(
        "2",
        format!("`run --once` over {} pinned tags, start-up included", d["tags"]),
        format!("{} checks/s ({} s)", f(&d["once"]["checks_per_second"], 0), f(&d["once"]["seconds"], 2)),
        "",
        None,
    );
    row(
        "2",
        "ratio `run --once` / HEAD ceiling".into(),
        f(&t["once_ratio_to_ceiling"], 2),
        "≥ 0.9",
        t["once_ratio_to_ceiling"].as_f64().map(|x| x >= 0.9),
    );
    row(
        "2",
        "ratio `run` / skopeo".into(),
        format!("{}×", f(&t["daemon_ratio_to_skopeo"], 0)),
        "≥ 40×",
        t["daemon_ratio_to_skopeo"].as_f64().map(|x| x >= 40.0),
    );
    row(
        "2",
        format!("skopeo inspect per tag, sequential ({} tags)", t["skopeo"]["samples"]),
        format!("{} checks/s", f(&t["skopeo"]["checks_per_second"], 1)),
        "",
        None,
    );
    row("2", "ratio builder-monitor / skopeo".into(), format!("{}×", f(&t["ratio_to_skopeo"], 0)), "", None);
    let l = &r["latency"];
    for (label, v) in [("1 s interval", &l["interval_1s"]), ("registry push hook (interval 1 h)", &l["push_hook"])] {
        let missed = v["missed"].as_u64().unwrap_or(0);
        row(
            "3",
            format!("push → builder.changed, {label} ({} pushes)", v["pushes"]),
            format!(
                "median {} s, p90 {} s, max {} s{}",
                f(&v["median"], 3),
                f(&v["p90"], 3),
                f(&v["max"], 3),
                if missed > 0 {
                    format!("; **{missed} of {} pushes not detected** (hook raced the tag write)", v["pushes"])
                } else {
                    String::new()
                }
            ),
            "",
            (missed > 0).then_some(false),
        );
    }
    let mem = &r["memory"];
    for run in mem["runs"].as_array().into_iter().flatten() {
        let n = run["builders"].as_u64().unwrap_or(0);
        row(
            "4",
            format!("`run` with {n} tags: peak RSS (VmHWM) / steady RSS (anonymous + file at the end); CPU"),
            format!(
                "{} MiB / {} MiB ({} + {}); {} CPU s (first cycle {} s, then {} ms/check over {} cycles); max {} fds, {} threads",
                f(&run["peak_rss_mib"], 1),
                f(&run["steady_max_rss_mib"], 1),
                f(&json!(run["rss_anon_end_kib"].as_f64().map(|k| k / MIB)), 1),
                f(&json!(run["rss_file_end_kib"].as_f64().map(|k| k / MIB)), 1),
                f(&run["cpu_seconds_total"], 2),
                f(&run["cpu_seconds_first_cycle"], 2),
                f(&run["steady_cpu_ms_per_check"], 3),
                f(&run["steady_cycles"], 1),
                run["max_open_fds"],
                run["max_threads"]
            ),
            if n == 10_000 { "< 36 MiB / < 32 MiB" } else { "" },
            (n == 10_000).then(|| {
                run["peak_rss_mib"].as_f64().unwrap_or(f64::MAX) < 36.0
                    && run["steady_max_rss_mib"].as_f64().unwrap_or(f64::MAX) < 32.0
            }),
        );
    }
    row(
        "4",
        "RSS growth per tag (peak / steady)".into(),
        format!("{} / {} KiB", f(&mem["peak_rss_growth_kib_per_tag"], 2), f(&mem["steady_rss_growth_kib_per_tag"], 2)),
        "",
        None,
    );
    let s = &r["soak"];
    let growth = s["rss_growth_kib"].as_f64();
    row(
        "4",
        format!("soak, {} tags for {} s: RSS first → last tenth (min–max)", s["builders"], s["soak_seconds"]),
        format!(
            "{} → {} MiB ({}–{} MiB), slope {} KiB/h, {} steady checks",
            f(&json!(s["rss_first_tenth_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_last_tenth_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_min_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&json!(s["rss_max_kib"].as_f64().map(|k| k / MIB)), 2),
            f(&s["rss_slope_kib_per_hour"], 0),
            s["run"]["steady_checks"]
        ),
        "no growth (< 1 MiB)",
        growth.map(|g| g < 1024.0),
    );
    let st = &r["startup"];
    for phase in ["cold", "warm", "warm_limited"] {
        let v = &st[phase];
        let (ledger, limit) = match phase {
            "cold" => ("empty ledger", "no rate limit".to_string()),
            "warm" => ("every builder pinned", "no rate limit".to_string()),
            _ => ("every builder pinned", format!("{STARTUP_RPS} req/s, burst {STARTUP_BURST}")),
        };
        let floor = v["seconds_the_limit_allows"].as_f64();
        row(
            "5",
            format!("start-up with {} builders, {ledger}, {limit}", v["builders"]),
            format!(
                "listening {} s, first check {} s, every builder checked (/readyz 200) {} s{}; {} CPU s, peak RSS {} MiB",
                f(&v["seconds_to_listening"], 3),
                f(&v["seconds_to_first_check"], 3),
                f(&v["seconds_to_ready"], 3),
                floor
                    .map(|fl| format!(
                        " (the limit allows {fl:.2} s: {:.3}×)",
                        v["seconds_to_ready"].as_f64().unwrap_or(0.0) / fl
                    ))
                    .unwrap_or_default(),
                f(&v["cpu_seconds_to_ready"], 2),
                f(&json!(v["peak_rss_kib"].as_f64().map(|k| k / MIB)), 1),
            ),
            match (floor, phase) {
                (Some(_), _) => "within the limit's time",
                (None, "warm") => "first check ≤ 0.1 s",
                _ => "",
            },
            match (floor, phase) {
                (Some(fl), _) => Some(v["seconds_to_ready"].as_f64().is_some_and(|r| r <= fl * 1.1)),
                (None, "warm") => v["seconds_to_first_check"].as_f64().map(|s| s <= 0.1),
                _ => None,
            },
        );
    }
    for case in r["packages"].as_array().into_iter().flatten() {
        row(
            "6",
            format!("requests per new run image digest, {}", case["image"].as_str().unwrap_or("?")),
            format!(
                "{} before, {} with package lists (+{}: {} manifest GETs, {} config and {} layer blob GETs); {} per unchanged check",
                case["before"],
                case["after"],
                case["extra"],
                case["extra_manifests"],
                case["extra_configs"],
                case["extra_layers"],
                case["unchanged_check_requests"]
            ),
            "≤ 1 layer blob GET per platform; 1 request per unchanged check",
            Some(
                case["unchanged_check_requests"].as_u64() == Some(1)
                    && case["extra_layers"].as_u64() <= case["platforms"].as_u64(),
            ),
        );
    }
    let _ = writeln!(out, "\nRaw numbers, commands and per-sample values: `registry.json` beside this file.");
    out
}
