//! `[rollout] expedite = "high"` through the binary, with every window closed: a run image move
//! that fixes only a low notice waits for the window; the next, fixing a high one, has its rebase
//! start now, recorded `expedited` with that notice's id (`status --json` and its text); `plan`
//! says what the waiting rebase would fix.

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
    assert_eq!(done["expedited"], json!(["CVE-2026-7002"]), "{status:#}");
    let text = w.cli(&["status"]).stdout;
    assert!(text.contains("(succeeded, expedited by CVE-2026-7002)"), "{text}");
}
