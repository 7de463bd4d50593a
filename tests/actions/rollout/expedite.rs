//! `[rollout] expedite = "high"` through the binary, with every window closed: a run image move
//! that fixes only a low notice waits for the window; the next, fixing a high one, has its rebase
//! start now, recorded `expedited` with that record (id, priority, file) and the data's source
//! (`status --json` and its text), and an `action.expedited` event and log line say so; `plan`
//! says what the waiting rebase would fix. A record the move does not fix lends no priority.

use super::*;

/// A run image index whose children list `openssl` at `openssl` (`salt` makes the digests new).
async fn push_listed_run(w: &World, salt: &str, openssl: &str) -> String {
    let child = |arch: &str| {
        support::osv::jammy_labels(openssl).into_iter().fold(Image::new(arch).salt(salt), |i, (k, v)| i.label(k, v))
    };
    let (_, children) = w.pusher.push_index("demo/run", "latest", &[child("amd64"), child("arm64")], Format::Oci).await;
    children[0].digest.clone()
}

#[tokio::test]
async fn only_a_change_that_fixes_a_high_notice_starts_outside_the_windows() {
    let w = World::new().await;
    w.push_app("web", &w.run_v1).await;
    support::osv::write_mirror(
        &w.ws.path("mirror"),
        &[("CVE-2026-7001", "low", "3.0.2-0ubuntu1.16"), ("CVE-2026-7002", "high", "3.0.2-0ubuntu1.17")],
    );
    // A crafted critical record of a CVE no move reaches the fix of, and a USN naming that CVE that
    // the low move does fix: the crafted record is not fixed, so it lends the USN nothing (it
    // made the low move critical before).
    let crafted = support::osv::cve("CVE-2026-7003", "critical", "3.0.2-0ubuntu1.99");
    std::fs::write(w.ws.path("mirror/osv/cve/2026/CVE-2026-7003.json"), crafted).unwrap();
    let usn = json!({
        "schema_version": "1.7.0", "id": "USN-7001-1", "upstream": ["UBUNTU-CVE-2026-7003"],
        "affected": [{
            "package": {"ecosystem": "Ubuntu:22.04:LTS", "name": "openssl"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.0.2-0ubuntu1.16"}]}],
            "ecosystem_specific": {"binaries": [{"binary_name": "openssl", "binary_version": "3.0.2-0ubuntu1.16"}]}
        }]
    });
    std::fs::write(w.ws.path("mirror/osv/cve/2026/USN-7001-1.json"), usn.to_string()).unwrap();
    // One hour on a day three days off (UTC): closed now, and still closed should the test cross
    // midnight.
    let day = (chrono::Utc::now() + chrono::Duration::days(3)).format("%a");
    let rollout = format!(
        "[rollout]\nexpedite = \"high\"\nwindows = [{{ days = \"{day}\", start = \"00:00\", end = \"01:00\", timezone = \"UTC\" }}]\n\n\
         [vulnerabilities]\nosv = \"{}\"\n",
        w.ws.path("mirror").display()
    );
    w.write(&w.config(&[("web", "policy = \"rebase\"")], "type = \"exec\"", &rollout));
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    // A listed run image (the move from the unlisted one fixes nothing known), then one whose
    // openssl reaches only the low notice's fix: both wait for the window.
    for (salt, openssl) in [("2", "3.0.2-0ubuntu1.15"), ("3", "3.0.2-0ubuntu1.16")] {
        push_listed_run(&w, salt, openssl).await;
        let out = w.once();
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let status = w.status();
    let low = &status["run_images"][0]["changes"][0];
    assert_eq!(low["fixes"][0]["id"], "CVE-2026-7001", "{low:#}");
    let web = open(&status, "web");
    assert_eq!((web["state"].as_str(), web["gate"].as_str()), (Some("waiting"), Some("window")), "{status:#}");
    assert!(calls(&w.record()).is_empty(), "nothing started outside the windows");
    // `plan` says what the waiting rebase would fix: its change's notices.
    let out = w.cli(&["plan", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(plan[0]["change"]["id"], low["id"], "{plan:#}");
    assert_eq!(plan[0]["change"]["fixes"][0]["id"], "CVE-2026-7001", "{plan:#}");
    let text = w.cli(&["plan"]).stdout;
    let line = format!("  change {} fixes CVE-2026-7001 (low)", low["id"].as_str().unwrap());
    assert!(text.contains(&line), "{text}");

    // The next move fixes the high notice: its rebase starts now, expedited by it.
    push_listed_run(&w, "4", "3.0.2-0ubuntu1.17").await;
    let out = w.once();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(starts(&w.record()), count(&[("web", 1)]));
    let status = w.status();
    let high = status["run_images"][0]["changes"][0]["id"].as_str().unwrap().to_string();
    let done = action(&status, "web");
    assert_eq!(done["change"], high.as_str(), "{status:#}");
    assert_eq!(done["state"], "succeeded", "{status:#}");
    let expedited = &done["expedited"];
    assert_eq!(
        expedited["records"],
        json!([{"id": "CVE-2026-7002", "priority": "high", "file": "osv/cve/2026/CVE-2026-7002.json"}]),
        "{status:#}"
    );
    let mirror = w.ws.path("mirror").display().to_string();
    assert_eq!(expedited["source"]["url"], mirror.as_str(), "{status:#}");
    assert_eq!(expedited["source"]["sha256"].as_str().map(str::len), Some(64), "{status:#}");
    let text = w.cli(&["status"]).stdout;
    assert!(text.contains("(succeeded, expedited by CVE-2026-7002)"), "{text}");
    // One line in the log, and the event, naming the record, its file and the source.
    let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains("expedited (no windows, no soak)")).collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(lines[0].contains("CVE-2026-7002 (high, osv/cve/2026/CVE-2026-7002.json) from"), "{}", lines[0]);
    let ledger = Ledger::open_read_only(&w.ws.path("state.db")).unwrap();
    let events: Vec<Value> =
        ledger.events_after(0, 1000).await.unwrap().iter().map(|e| serde_json::to_value(&e.event).unwrap()).collect();
    let expedited_events: Vec<&Value> = events.iter().filter(|e| e["type"] == "action.expedited").collect();
    assert_eq!(expedited_events.len(), 1, "{events:#?}");
    let rollout = &expedited_events[0]["rollout"];
    assert_eq!(rollout["change"], high.as_str());
    assert_eq!(rollout["actions"][0]["image"], "web");
    assert_eq!(&rollout["expedited"], expedited, "the event and the action record the same");
}
