//! D3: a URL mirror's download never holds the checks back: `run --once` checks (and pins) while
//! the first download stalls, and a daemon whose first download stalls shows it — bytes so far and
//! since when — on `/readyz` and in `status`.

use super::*;

use builder_monitor::ledger::Ledger;

fn config(ws: &Workspace, host: &str, url: &str, server: bool) -> std::path::PathBuf {
    let server = if server { "[server]\nlisten = \"127.0.0.1:0\"\n\n" } else { "" };
    ws.config(&format!(
        "[monitor]\njitter = \"0s\"\nstate = \"state/ledger.db\"\n\n{server}[[builders]]\nname = \"b\"\nimage = \"{host}/demo/b:latest\"\n\n\
         [vulnerabilities]\nosv = \"{url}\"\nreleases = [\"22.04\"]\n"
    ))
}

/// Waits (bounded: 60 s) until the ledger at `path` pins `watch`; whether it did.
fn pinned_within(path: &std::path::Path, watch: &str) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for _ in 0..600 {
        if let Ok(ledger) = Ledger::open_read_only(path)
            && runtime.block_on(ledger.watch(watch)).ok().flatten().is_some_and(|w| w.pin.is_some())
        {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

#[tokio::test]
async fn run_once_checks_while_the_first_download_stalls() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let mirror = Mirror::start(Answer::Stalled(archive(), release.clone()));
    let ws = Workspace::new();
    let config = config(&ws, &registry.host, &mirror.url, false);
    let ledger = ws.path("state/ledger.db");

    // The mirror sends its body only once the check pinned the builder: a run that waited for the
    // data first would never pin (the wait is bounded; the body is sent then anyway).
    let watcher = std::thread::spawn(move || {
        let pinned = pinned_within(&ledger, "b");
        let (flag, signal) = &*release;
        *flag.lock().unwrap() = true;
        signal.notify_all();
        pinned
    });
    let lines = run_once(&ws, &config);
    assert!(watcher.join().unwrap(), "the check ran while the download stalled");
    let waiting = with_message(&lines, "checks and actions done without the vulnerability data");
    assert_eq!(waiting.len(), 1, "{lines:#?}");
    assert!(waiting[0]["download"].as_str().unwrap().contains("first download under way since"), "{lines:#?}");
    assert_eq!(with_message(&lines, "vulnerability data loaded").len(), 1, "then kept: {lines:#?}");
    assert!(ws.path("state/osv/osv.tar.gz").is_file());
}

#[tokio::test]
async fn a_stalled_first_download_shows_on_readyz_and_in_status() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let mirror = Mirror::start(Answer::Stalled(archive(), release.clone()));
    let ws = Workspace::new();
    let config = config(&ws, &registry.host, &mirror.url, true);
    let mut daemon = Daemon::start(&config);
    let base = format!("http://{}", daemon.server_addr());
    daemon.wait_for("the first check", |l| l["message"].as_str().is_some_and(|m| m.contains("pinned")));
    let mut ready = Value::Null;
    for _ in 0..600 {
        ready = support::http().get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
        if ready["vulnerability_data"]["downloading"]["bytes"] == json!(10) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let data = &ready["vulnerability_data"];
    assert_eq!(data["downloading"]["bytes"], json!(10), "{ready:#}");
    assert_eq!(data["downloading"]["first"], json!(true), "{ready:#}");
    assert!(
        data["note"].as_str().unwrap().starts_with("vulnerability data: first download under way since "),
        "{ready:#}"
    );
    assert_eq!(ready["first_check_cycle"], json!(true), "the checks did not wait: {ready:#}");

    let out = ws.run(&["status", "--json", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["vulnerability_download"]["bytes"], json!(10), "{status:#}");
    let out = ws.run(&["status", "--config", config.to_str().unwrap()]);
    assert!(out.stdout.contains("vulnerability data: first download under way since "), "{}", out.stdout);
    assert!(out.stdout.contains(", 10 bytes so far"), "{}", out.stdout);
    let (flag, signal) = &*release;
    *flag.lock().unwrap() = true;
    signal.notify_all();
    daemon.kill();
}
