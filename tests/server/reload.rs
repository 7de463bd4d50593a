//! SIGHUP: the daemon reads its config again, refuses a bad one (keeping the running config, and
//! saying why), and restarts its parts with a good one; every step is logged.

use crate::support;

use std::process::Command;

use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

fn config(host: &str, builders: &[&str]) -> String {
    let mut text = "[monitor]\ninterval = \"1h\"\njitter = \"0s\"\nstate = \"state/ledger.db\"\n".to_string();
    for name in builders {
        text += &format!(
            "\n[[builders]]\nname = \"{name}\"\nimage = \"{host}/demo/{name}:latest\"\nwatch_run_image = false\n"
        );
    }
    text
}

fn hang_up(daemon: &Daemon) {
    let status = Command::new("kill").args(["-HUP", &daemon.pid().to_string()]).status().unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sighup_reloads_a_valid_config_and_keeps_running_on_a_bad_one() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    for name in ["a", "b"] {
        pusher.push_image(&format!("demo/{name}"), Some("latest"), &Image::new("amd64").salt(name), Format::Oci).await;
    }
    let ws = Workspace::new();
    let path = ws.config(&config(&registry.host, &["a"]));
    let mut daemon = Daemon::start(&path);
    let pinned = |name: &'static str| {
        move |v: &serde_json::Value| {
            v["event_type"] == "builder.pinned"
                && v["event"].as_str().is_some_and(|e| e.contains(&format!("\"name\":\"{name}\"")))
        }
    };
    daemon.wait_for("a pinned", pinned("a"));

    // A bad config: refused with its error at FILE:LINE:COL; the daemon goes on.
    std::fs::write(&path, config(&registry.host, &["a"]).replace("interval = \"1h\"", "interval = \"soon\"")).unwrap();
    hang_up(&daemon);
    let refused = daemon.wait_for("the refusal", |v| {
        v["level"] == "ERROR" && v["message"].as_str().is_some_and(|m| m.starts_with("SIGHUP: the config is not valid"))
    });
    assert!(refused["error"].as_str().unwrap().contains("config.toml:2:"), "{refused}");
    assert!(daemon.running(), "a bad config does not stop the daemon");

    // A good one with a second builder: the parts restart with it, and the new builder is pinned.
    std::fs::write(&path, config(&registry.host, &["a", "b"])).unwrap();
    hang_up(&daemon);
    daemon.wait_for("the reload", |v| {
        v["message"].as_str().is_some_and(|m| m.starts_with("SIGHUP: the config is valid"))
    });
    let started = daemon.wait_for("the restart", |v| v["message"] == "builder-monitor starting");
    assert_eq!(started["builders"], 2, "{started}");
    daemon.wait_for("b pinned", pinned("b"));
    let (status, _) = daemon.terminate();
    assert!(status.success(), "{status}");
}
