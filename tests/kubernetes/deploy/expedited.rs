//! `[rollout] expedite` carried to the deploys: a run image move that fixes a high notice, with
//! every window closed and a soak after each wave's deploys, rebases each app and deploys it to its
//! Deployment on the Kubernetes API double now, wave after wave; each deploy recorded `expedited`
//! with that notice's id, as the rebase it follows. Through the built binary, the real registry and
//! an OSV mirror directory the test writes.

use super::*;

/// The next run image (`salt`, `layers`), listing `openssl` at `openssl`.
async fn push_listed_run(w: &World, salt: &str, layers: usize, openssl: &str) {
    let run =
        support::osv::jammy_labels(openssl).into_iter().fold(RunImage::jammy(salt, layers), |r, (k, v)| r.label(k, &v));
    app::push_run(&w.pusher, "demo/run", Some("latest"), &run, Format::Oci).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploys_after_an_expedited_rebase_skip_the_windows_and_the_soak_too() {
    let mirror = tempfile::tempdir().unwrap();
    support::osv::write_mirror(mirror.path(), &[("CVE-2026-9001", "high", "3.0.2-0ubuntu1.17")]);
    let extra = format!("[vulnerabilities]\nosv = \"{}\"\n", mirror.path().display());
    let w = World::deploying_app(&[("canary", 0, &[("shop", "canary")]), ("web", 1, &[("shop", "web")])], &extra).await;
    // A listed run image first (from the unlisted one nothing can be matched), rolled out while
    // no window or soak holds anything.
    push_listed_run(&w, "2", 4, "3.0.2-0ubuntu1.15").await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.running("web"), w.reference("web", &w.tag("web").await));

    // Now every window is closed (one hour on a day three days off, UTC: still closed should the
    // test cross midnight), a deploy soaks an hour before the next wave, and a high fix expedites.
    let day = (chrono::Utc::now() + chrono::Duration::days(3)).format("%a");
    let mut text = std::fs::read_to_string(&w.config).unwrap();
    text += &format!(
        "\n[rollout]\nexpedite = \"high\"\nsoak = \"1h\"\n\
         windows = [{{ days = \"{day}\", start = \"00:00\", end = \"01:00\", timezone = \"UTC\" }}]\n"
    );
    std::fs::write(&w.config, text).unwrap();
    push_listed_run(&w, "3", 5, "3.0.2-0ubuntu1.17").await;
    let out = w.cli(&["run", "--once"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let change = w.ledger().changes(None, 10).await.unwrap()[0].id.clone();
    let actions: Vec<ActionRecord> = w.actions().await.into_iter().filter(|a| a.change == change).collect();
    for name in ["canary", "web"] {
        let tag = w.tag(name).await;
        assert_eq!(w.running(name), w.reference(name, &tag), "{name}'s deploy ran now: {actions:#?}");
        for kind in ["rebase", "deploy"] {
            let a = actions.iter().find(|a| a.image == name && a.action == kind).unwrap_or_else(|| {
                panic!("no {kind} of {name}: {actions:#?}");
            });
            assert_eq!(a.state, ActionState::Succeeded, "{a:#?}");
            assert_eq!(a.expedited.ids(), ["CVE-2026-9001"], "{kind} of {name}: {a:#?}");
        }
    }
    let status = w.status();
    let shown: Vec<&Value> = status["actions"].as_array().unwrap().iter().filter(|a| a["action"] == "deploy").collect();
    assert!(
        shown.iter().any(|a| a["image"] == "web" && a["expedited"]["records"][0]["id"] == "CVE-2026-9001"),
        "{status:#}"
    );
}
