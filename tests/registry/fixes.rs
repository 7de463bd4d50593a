//! Which security notices a run image move fixes, against a real registry with OSV records the
//! test writes into a directory (both of Ubuntu's shapes): the same ids in the recorded event, the
//! webhook a real listener receives, `status --json` and its summary line, and `diff --config`.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use builder_monitor::config::Config;
use builder_monitor::daemon::Parts;
use builder_monitor::ledger::Ledger;
use builder_monitor::metrics::Metrics;
use builder_monitor::schedule::Clock;
use builder_monitor_core::event::EventType;
use serde_json::{Value, json};
use support::app::{RunImage, push_run};
use support::cnb::BuilderSpec;
use support::daemon::Workspace;
use support::images::{Format, Pusher};
use support::receiver::Receiver;
use support::registry::TestRegistry;

const REPO: &str = "paketo/run-jammy-base";
const V1: &[(&str, &str)] = &[("libssl3", "3.0.2-0ubuntu1.15"), ("openssl", "3.0.2-0ubuntu1.15")];
/// openssl's command-line binary moves, its library does not.
const V2: &[(&str, &str)] = &[("libssl3", "3.0.2-0ubuntu1.15"), ("openssl", "3.0.2-0ubuntu1.16")];
/// V2 with a package no earlier image had, below its fix; then that package fixed.
const V3: &[(&str, &str)] =
    &[("libssl3", "3.0.2-0ubuntu1.15"), ("openssl", "3.0.2-0ubuntu1.16"), ("zlib1g", "1:1.2.11.dfsg-2ubuntu9.1")];
const V4: &[(&str, &str)] =
    &[("libssl3", "3.0.2-0ubuntu1.15"), ("openssl", "3.0.2-0ubuntu1.16"), ("zlib1g", "1:1.2.11.dfsg-2ubuntu9.2")];

fn labelled(version: &str, packages: &[(&str, &str)]) -> RunImage {
    let list: Vec<Value> = packages
        .iter()
        .map(|(n, v)| json!({"name": n, "version": v, "arch": "amd64", "source": {"name": "openssl", "version": v}}))
        .collect();
    RunImage::jammy(version, 2).label("io.paketo.stack.packages", &serde_json::to_string(&list).unwrap())
}

/// A CVE record (binaries as one map, with `ubuntu_priority`) fixed at `fixed` for `binaries`.
fn cve(id: &str, ecosystem: &str, fixed: Option<&str>, binaries: &[&str]) -> String {
    let version = fixed.unwrap_or("3.0.2-0ubuntu1.16");
    let map: serde_json::Map<String, Value> = binaries.iter().map(|b| (b.to_string(), json!(version))).collect();
    let mut events = vec![json!({"introduced": "0"})];
    events.extend(fixed.map(|f| json!({"fixed": f})));
    json!({
        "schema_version": "1.6.3", "id": id, "details": "openssl",
        "affected": [{
            "package": {"ecosystem": ecosystem, "name": "openssl"},
            "ranges": [{"type": "ECOSYSTEM", "events": events}],
            "ecosystem_specific": {"binaries": [map], "ubuntu_priority": "high"}
        }]
    })
    .to_string()
}

/// A USN record (binaries as `[{binary_name, binary_version}]`) fixing openssl and libssl3 at .16:
/// this move reaches it only partly (libssl3 stays), so it is not fixed.
fn partial_usn() -> String {
    json!({
        "schema_version": "1.7.0", "id": "USN-7100-1", "summary": "openssl",
        "upstream": ["UBUNTU-CVE-2026-3333"],
        "affected": [{
            "package": {"ecosystem": "Ubuntu:22.04:LTS", "name": "openssl"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.0.2-0ubuntu1.16"}]}],
            "ecosystem_specific": {"binaries": [
                {"binary_name": "openssl", "binary_version": "3.0.2-0ubuntu1.16"},
                {"binary_name": "libssl3", "binary_version": "3.0.2-0ubuntu1.16"}]}
        }]
    })
    .to_string()
}

/// The mirror: one record this move fixes, and ones it never lists (another release, Pro, unfixed,
/// partly reached).
fn write_mirror(root: &Path) {
    let records = [
        (
            "osv/cve/2026/CVE-2026-1111.json",
            cve("CVE-2026-1111", "Ubuntu:22.04:LTS", Some("3.0.2-0ubuntu1.16"), &["openssl"]),
        ),
        (
            "osv/cve/2026/CVE-2026-2222.json",
            cve("CVE-2026-2222", "Ubuntu:24.04:LTS", Some("3.0.2-0ubuntu1.16"), &["openssl"]),
        ),
        (
            "osv/cve/2026/CVE-2026-4444.json",
            cve("CVE-2026-4444", "Ubuntu:Pro:22.04:LTS", Some("3.0.2-0ubuntu1.16"), &["openssl"]),
        ),
        ("osv/cve/2026/CVE-2026-5555.json", cve("CVE-2026-5555", "Ubuntu:22.04:LTS", None, &["openssl"])),
        ("osv/usn/USN-7100-1.json", partial_usn()),
        (
            "osv/cve/2026/CVE-2026-6666.json",
            cve("CVE-2026-6666", "Ubuntu:22.04:LTS", Some("1:1.2.11.dfsg-2ubuntu9.2"), &["zlib1g"]),
        ),
    ];
    for (path, text) in records {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn ids(fixes: &Value) -> Vec<&str> {
    fixes.as_array().expect("a fixes list").iter().map(|f| f["id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_move_that_fixes_one_notice_says_so_in_the_event_the_webhook_and_status() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    push_run(&pusher, REPO, Some("latest"), &labelled("1", V1), Format::Oci).await;
    let run = format!("{}/{REPO}:latest", registry.host);
    pusher.push_image("paketo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
    let hook = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_mirror(&dir.path().join("mirror"));
    let text = format!(
        "[monitor]\nstate = \"x.db\"\n[[builders]]\nname = \"base\"\nimage = \"{}/paketo/builder:latest\"\n\
         [vulnerabilities]\nosv = \"{}\"\n\
         [[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"{}\"\nevents = [\"run_image.changed\"]\n",
        registry.host,
        dir.path().join("mirror").display(),
        hook.url
    );
    let config = Arc::new(Config::parse(&dir.path().join("config.toml"), &text).unwrap());
    let ledger = Ledger::open(&dir.path().join("state.db")).unwrap();
    let parts = Parts::new(config.clone(), ledger.clone(), Clock::System, None).unwrap();
    // As `Parts::build` starts it, on an empty ledger: nothing pinned, so nothing read yet.
    let (vulns, _) = builder_monitor::vulns::start(&config, Metrics::new(), Default::default()).await.unwrap().unwrap();
    assert_eq!(vulns.current().index.releases(), Some(&[][..]), "nothing read before a pin");
    parts.monitor.set_vulns(vulns.clone());
    assert!(parts.monitor.run_once().await);

    push_run(&pusher, REPO, Some("latest"), &labelled("2", V2), Format::Oci).await;
    assert!(parts.monitor.run_once().await);
    // The move read the mirror for its image's release, and only that one.
    let releases: Vec<String> = vulns.current().index.releases().unwrap().iter().map(|r| r.0.clone()).collect();
    assert_eq!(releases, ["Ubuntu:22.04:LTS"]);
    let events = ledger.events_after(0, 1000).await.unwrap();
    let event = events.into_iter().map(|e| e.event).rfind(|e| e.event_type == EventType::RunImageChanged).unwrap();
    let change = serde_json::to_value(event.change.as_ref().unwrap()).unwrap();
    assert_eq!(ids(&change["fixes"]), ["CVE-2026-1111"], "{change:#}");
    assert_eq!(change["fixes"][0]["priority"], "high");
    assert_eq!(
        change["fixes"][0]["packages"],
        json!([{"name": "openssl", "from": "3.0.2-0ubuntu1.15", "to": "3.0.2-0ubuntu1.16"}])
    );
    assert!(event.summary().ends_with("; fixes CVE-2026-1111 (high)"), "{}", event.summary());

    assert_eq!(parts.dispatcher.deliver_due_once().await, 1);
    let body = hook.received()[0].json();
    assert_eq!(ids(&body["change"]["fixes"]), ["CVE-2026-1111"]);

    let status = builder_monitor::status::collect(&config, &ledger, 10).await.unwrap();
    let status = serde_json::to_value(&status).unwrap();
    let shown = &status["run_images"][0]["changes"][0];
    assert_eq!(ids(&shown["fixes"]), ["CVE-2026-1111"]);
    assert!(shown["summary"].as_str().unwrap().ends_with("; fixes CVE-2026-1111 (high)"), "{shown}");

    // A restart reads the pinned images' releases at start, before any move.
    drop(parts);
    let restarted = Parts::build(config.clone(), ledger.clone(), Clock::System).await.unwrap();
    let current = restarted.vulns.as_ref().unwrap().current();
    let releases: Vec<&str> = current.index.releases().unwrap().iter().map(|r| r.0.as_str()).collect();
    assert_eq!(releases, ["Ubuntu:22.04:LTS"]);
    // Of the release's records, only those of the pinned image's binaries are held (issue 53 D6).
    assert_eq!((current.records, current.index.held()), (3, 2), "zlib1g's record is counted, not held");

    // A run image that brings a package no pinned image had: the mirror is read again for its
    // name, so its record is found when it is fixed.
    push_run(&pusher, REPO, Some("latest"), &labelled("3", V3), Format::Oci).await;
    assert!(restarted.monitor.run_once().await);
    assert_eq!(restarted.vulns.as_ref().unwrap().current().index.held(), 3, "read again with zlib1g");
    push_run(&pusher, REPO, Some("latest"), &labelled("4", V4), Format::Oci).await;
    assert!(restarted.monitor.run_once().await);
    let events = ledger.events_after(0, 1000).await.unwrap();
    let event = events.into_iter().map(|e| e.event).rfind(|e| e.event_type == EventType::RunImageChanged).unwrap();
    let change = serde_json::to_value(event.change.as_ref().unwrap()).unwrap();
    assert_eq!(ids(&change["fixes"]), ["CVE-2026-6666"], "{change:#}");
}

#[tokio::test]
async fn diff_with_a_config_lists_what_the_move_fixes() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    push_run(&pusher, REPO, Some("1"), &labelled("1", V1), Format::Oci).await;
    push_run(&pusher, REPO, Some("2"), &labelled("2", V2), Format::Oci).await;
    let (v1, v2) = (format!("{}/{REPO}:1", registry.host), format!("{}/{REPO}:2", registry.host));
    let ws = Workspace::new();
    write_mirror(&ws.path("mirror"));
    std::fs::write(
        ws.path("config.toml"),
        format!(
            "[[builders]]\nname = \"b\"\nimage = \"{}/demo/b:latest\"\n\n[vulnerabilities]\nosv = \"{}\"\n",
            registry.host,
            ws.path("mirror").display()
        ),
    )
    .unwrap();
    let config = ws.path("config.toml");
    let config = config.to_str().unwrap();
    let out = ws.run(&["diff", &v1, &v2, "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let change: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(ids(&change["fixes"]), ["CVE-2026-1111"], "{change:#}");
    let out = ws.run(&["diff", &v1, &v2, "--config", config]);
    assert!(out.stdout.contains("\nfixes CVE-2026-1111 (high): CVE-2026-1111\n"), "{}", out.stdout);
    // The way back fixes nothing; without a config, no fixes at all.
    let back: Value = serde_json::from_str(&ws.run(&["diff", &v2, &v1, "--json", "--config", config]).stdout).unwrap();
    assert_eq!(back["fixes"], json!([]));
    let plain: Value = serde_json::from_str(&ws.run(&["diff", &v1, &v2, "--json"]).stdout).unwrap();
    assert!(plain.get("fixes").is_none(), "{plain:#}");
}
