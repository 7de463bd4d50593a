//! Whether each registry serves the OCI 1.1 referrers API, as the daemon found it when it signed,
//! shown from the ledger alone: `status --json` (`registries`) and the page, in Chromium. After a
//! signed registry rebase, the registry with the referrers API shows `true`, Distribution (none)
//! `false`; before the daemon signed anything there, `null`.

use super::*;

use support::app::{self, App, RunImage};
use support::keys;
use support::referrers_registry::{Kind, Served};

/// The `registries` entry of `status --json` for `host`.
fn status_entry(ws: &Workspace, config: &str, host: &str) -> serde_json::Value {
    let out = ws.run(&["status", "--json", "--config", config]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let registries = status["registries"].as_array().unwrap_or_else(|| panic!("no registries: {status:#}"));
    assert_eq!(registries.len(), 1, "one registry of the app images: {registries:?}");
    assert_eq!(registries[0]["host"], host, "{registries:?}");
    registries[0].clone()
}

async fn a_signed_rebase_records_whether_the_registry_serves_referrers(kind: Kind, chromium: &Path) -> String {
    let registry = Served::start(kind);
    let host = registry.host().to_string();
    let pusher = Pusher::new(&host);
    let ws = Workspace::new();
    keys::p256(ws.dir.path(), "own.pem");
    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let built = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    app::push_app(&pusher, "apps/web", Some("latest"), &built, Format::Oci).await;
    let text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\npublic_read = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\npolicy = \"auto\"\n\n\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\n\n\
         [signing]\nkey = \"own.pem\"\n"
    );
    let path = ws.config(&text);
    let config_arg = path.to_str().unwrap();
    let once = || {
        let out = ws.run(&["run", "--once", "--config", config_arg]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    };
    once();
    let before = status_entry(&ws, config_arg, &host);
    assert_eq!(before["referrers"], serde_json::Value::Null, "nothing signed yet: {before}");

    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    once();
    let after = status_entry(&ws, config_arg, &host);
    assert_eq!(after["referrers"], kind == Kind::Referrers, "{kind:?}: {after}");
    assert!(after["probed"].is_string(), "{after}");

    let config = std::sync::Arc::new(builder_monitor::config::Config::parse(&path, &text).unwrap());
    let ledger = builder_monitor::ledger::Ledger::open_read_only(&ws.path("state.db")).unwrap();
    let (url, stop) = serve_page(&config, ledger).await;
    let chromium = chromium.to_path_buf();
    let dom = tokio::task::spawn_blocking(move || browse(&chromium, &url, &["--dump-dom"])).await.unwrap();
    stop.cancel();
    let at = dom.find("<tr class=\"registry\"").unwrap_or_else(|| panic!("no registry row in:\n{dom}"));
    let row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
    assert!(row.contains(&format!("data-host=\"{host}\"")), "{row}");
    row.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_the_page_show_whether_each_registry_serves_the_referrers_api() {
    let Some(chromium) = chromium() else { return };
    let row = a_signed_rebase_records_whether_the_registry_serves_referrers(Kind::Referrers, &chromium).await;
    assert!(row.contains("data-referrers=\"true\""), "{row}");
    let row = a_signed_rebase_records_whether_the_registry_serves_referrers(Kind::Distribution, &chromium).await;
    assert!(row.contains("data-referrers=\"false\""), "{row}");
    assert!(row.contains("referrers tag schema"), "{row}");
}
