//! What each run image move fixes, on the page as Chromium renders it: the change row of a move
//! that fixes a notice lists its ids (the same as `status --json`), one whose package lists match
//! no record says `fixes no known notice`, and one from an image without a list says why.

use super::*;

use support::app::{RunImage, push_run};

#[tokio::test]
async fn each_change_row_lists_the_ids_status_gives_or_why_there_are_none() {
    let Some(chromium) = chromium() else { return };
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let run = format!("{}/demo/run:latest", registry.host);
    push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("1", 2), Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run).image(), Format::Oci).await;
    let ws = Workspace::new();
    support::osv::write_mirror(&ws.path("mirror"), &[("CVE-2026-9001", "medium", "3.0.2-0ubuntu1.16")]);
    let text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\npublic_read = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{}/demo/builder:latest\"\n\n[vulnerabilities]\nosv = \"{}\"\n",
        registry.host,
        ws.path("mirror").display()
    );
    let path = ws.config(&text);
    let config_arg = path.to_str().unwrap();
    let once = || {
        let out = ws.run(&["run", "--once", "--config", config_arg]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    };
    once();
    // From the unlisted image (nothing to match), to one listing the same openssl (no record
    // fixed), to one that reaches the record's fix.
    for (version, openssl) in [("2", "3.0.2-0ubuntu1.15"), ("3", "3.0.2-0ubuntu1.15"), ("4", "3.0.2-0ubuntu1.16")] {
        let listed = support::osv::jammy_labels(openssl)
            .into_iter()
            .fold(RunImage::jammy(version, 2), |r, (k, v)| r.label(k, &v));
        push_run(&pusher, "demo/run", Some("latest"), &listed, Format::Oci).await;
        once();
    }
    let out = ws.run(&["status", "--json", "--config", config_arg]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let changes = status["run_images"][0]["changes"].as_array().unwrap().clone();
    assert_eq!(changes.len(), 3, "{status:#}");
    let fixing = &changes[0];
    let ids: Vec<&str> = fixing["fixes"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["CVE-2026-9001"], "{fixing:#}");
    assert_eq!(changes[1]["fixes"], serde_json::json!([]), "{:#}", changes[1]);
    let note = changes[2]["fixes_note"].as_str().unwrap_or_else(|| panic!("{:#}", changes[2]));

    // The page, served in process over the ledger the runs wrote.
    let config = std::sync::Arc::new(builder_monitor::config::Config::parse(&path, &text).unwrap());
    let ledger = builder_monitor::ledger::Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let (url, stop) = serve_page(&config, ledger).await;
    let dom = tokio::task::spawn_blocking(move || browse(&chromium, &url, &["--dump-dom"])).await.unwrap();
    stop.cancel();

    // The change row naming `id`.
    let row = |id: &str| {
        let at = dom.find(&format!("<code>{id}</code>")).unwrap_or_else(|| panic!("no row for {id} in:\n{dom}"));
        let start = dom[..at].rfind("<tr class=\"change\">").unwrap();
        &dom[start..at]
    };
    let id = |c: &serde_json::Value| c["id"].as_str().unwrap().to_string();
    let fixed = row(&id(fixing));
    assert!(fixed.contains(&format!("data-fixes=\"{}\"", ids.join(" "))), "{fixed}");
    assert!(fixed.contains("fixes CVE-2026-9001 (medium)"), "{fixed}");
    let none = row(&id(&changes[1]));
    assert!(none.contains("<span class=\"sub fixes\">fixes no known notice</span>"), "{none}");
    assert!(!none.contains("data-fixes"), "{none}");
    let unmatched = row(&id(&changes[2]));
    assert!(unmatched.contains(&format!("<span class=\"sub muted\">fixes: {note}</span>")), "{unmatched}");
}
