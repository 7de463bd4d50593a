//! The daemon gives back the memory start-up used (`builder_monitor::memory`): once when it
//! listens, again once every builder has been checked, each time dropping resident pages of its
//! own code from its resident set; and it runs on afterwards (the code faults back in).

use crate::support;

use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

const RELEASED: &str = "gave back memory no longer needed";

#[tokio::test(flavor = "multi_thread")]
async fn start_up_and_the_first_cycle_give_back_code_pages_and_the_daemon_runs_on() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let ws = Workspace::new();
    let mut text = format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1s\"\njitter = \"0s\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\n[registries.\"{}\"]\nrequests_per_second = 0\n\n",
        registry.host
    );
    let names = ["b1", "b2"];
    for name in names {
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &Image::new("amd64").salt(name), Format::Oci).await;
        text += &format!(
            "[[builders]]\nname = \"{name}\"\nimage = \"{}/demo/{name}:latest\"\nwatch_run_image = false\n",
            registry.host
        );
    }
    let config = ws.config(&text);
    let mut daemon = Daemon::start_with_env(
        &config,
        &[("BUILDER_MONITOR_LOG", "info,builder_monitor::daemon=debug,builder_monitor::monitor=debug")],
    );
    let base = format!("http://{}", daemon.server_addr());

    let start_up = daemon.wait_for("the release after start-up", |v| v["message"] == RELEASED);
    assert_eq!(start_up["after"], "start-up", "{start_up}");
    let first_cycle = daemon.wait_for("the release after the first cycle", |v| v["message"] == RELEASED);
    assert_eq!(first_cycle["after"], "the first check cycle", "{first_cycle}");
    for line in [&start_up, &first_cycle] {
        // The executable's code and read-only data were resident, and left.
        assert!(line["mappings"].as_u64().unwrap() >= 1, "{line}");
        assert!(line["code_kib"].as_u64().unwrap() > 0, "{line}");
    }
    // Both builders were pinned before the second release.
    let mut pinned: Vec<String> = daemon
        .log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .take_while(|v| v["message"] != RELEASED || v["after"] != "the first check cycle")
        .filter(|v| v["event_type"] == "builder.pinned")
        .filter_map(|v| v["builder"].as_str().map(String::from))
        .collect();
    pinned.sort_unstable();
    assert_eq!(pinned, names, "the second release waits for every builder's first check");

    // The daemon runs on: it answers, and its checks go on (code runs again from the page cache).
    let ready = support::http().get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    for name in names {
        daemon.wait_for(&format!("a check of {name} after the release"), |v| {
            v["message"] == "check done" && v["watch"] == name
        });
    }
    assert!(daemon.running());
    daemon.kill();
}
