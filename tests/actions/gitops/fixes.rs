//! A run image move that fixes a notice, written back to real Git: the commit pushed to the remote
//! lists it in a `Fixes:` paragraph and ends with a `Builder-Monitor-Fixes:` trailer that `git
//! interpret-trailers --parse` reads, with the ids of the recorded event.

use super::*;

/// The next run image (salted by its layers), listing `openssl` at `openssl`.
pub(super) async fn push_listed_run(w: &mut World, openssl: &str) {
    w.run += 1;
    let run = support::osv::jammy_labels(openssl)
        .into_iter()
        .fold(RunImage::jammy(&w.run.to_string(), w.run as usize + 2), |r, (k, v)| r.label(k, &v));
    app::push_run(&w.pusher, "demo/run", Some("latest"), &run, Format::Oci).await;
}

/// `git interpret-trailers --parse` of `message`: its trailers, one a line.
pub(super) fn parsed_trailers(message: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("git")
        .args(["interpret-trailers", "--parse"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(message.as_bytes()).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pushed_commit_names_what_the_move_fixes_in_a_trailer() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    support::osv::write_mirror(&w.ws.path("mirror"), &[("CVE-2026-8001", "high", "3.0.2-0ubuntu1.16")]);
    let mut text = std::fs::read_to_string(w.config()).unwrap();
    text += &format!("\n[vulnerabilities]\nosv = \"{}\"\n", w.ws.path("mirror").display());
    std::fs::write(w.config(), text).unwrap();
    // A listed run image first (from the unlisted one nothing can be matched), then the fix.
    for openssl in ["3.0.2-0ubuntu1.15", "3.0.2-0ubuntu1.16"] {
        push_listed_run(&mut w, openssl).await;
        let out = w.once(&[]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }

    let event = w.events("run_image.changed").await.pop().unwrap();
    let fixes = event["change"]["fixes"].as_array().unwrap_or_else(|| panic!("{event:#}"));
    let ids: Vec<&str> = fixes.iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["CVE-2026-8001"], "{event:#}");
    let change = w.ledger().changes(None, 10).await.unwrap()[0].id.clone();
    let commits = w.commits();
    assert_eq!(commits.len(), 2, "{commits:#?}");
    // The whole message as git keeps it, read from the remote.
    let message = git(&w.remote.bare, &["log", "-1", "--format=%B", &commits[0].0]);
    assert!(message.contains("\n\nFixes:\n- CVE-2026-8001 (high): CVE-2026-8001\n\n"), "{message}");
    let trailers = parsed_trailers(&message);
    assert!(trailers.lines().any(|l| l == "Builder-Monitor-Fixes: CVE-2026-8001"), "{trailers}");
    assert!(trailers.lines().any(|l| l == format!("Builder-Monitor-Change: {change}")), "{trailers}");
    // The move before it had nothing to match: no such trailer.
    let earlier = git(&w.remote.bare, &["log", "-1", "--format=%B", &commits[1].0]);
    assert!(!parsed_trailers(&earlier).contains("Builder-Monitor-Fixes"), "{earlier}");
}
