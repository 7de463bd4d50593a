//! The offline tour runs as a newcomer runs it (`scripts/tour`): from a fresh directory, against a
//! local registry, the daemon pins the builder, classifies the run image's move, rebases both apps
//! in the registry (canary first), plans rebuilds for the builder's move and alerts a webhook.

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tour_shows_a_pin_a_move_rebases_alerts_an_undo_and_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let bin = std::path::Path::new(support::daemon::BINARY);
    let seen = support::tour::run(bin, dir.path(), false).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seen.rebased, ["storefront", "orders"], "canary first");
    let mut planned = seen.rebuilds_planned.clone();
    planned.sort();
    assert_eq!(planned, ["orders", "storefront"]);
    for event in ["builder.pinned", "run_image.changed", "rebase.succeeded", "builder.changed"] {
        assert!(seen.alerts.iter().any(|a| a == event), "no {event} alert in {:?}", seen.alerts);
    }
    assert!(seen.page.starts_with("http://127.0.0.1:"), "{}", seen.page);
    // The write half through the running daemon's API: an undo, and a freeze lifted again.
    let (from, to) = seen.rolled_back.clone().expect("storefront rolled back");
    assert_ne!(from, to);
    assert_eq!(seen.frozen_reason.as_deref(), Some("tour: a change window"));
    let status = std::process::Command::new(bin)
        .args(["status", "--json", "--config", "config.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let storefront = status["images"].as_array().unwrap().iter().find(|i| i["name"] == "storefront").unwrap();
    assert_eq!(storefront["digest"], to.as_str(), "the tag is where the rollback put it: {storefront:#}");
    // On the record: who asked, in the alert and in the history.
    let by = seen.rolled_back_by.clone().expect("image.rolled_back names who asked");
    assert!(by.ends_with("(cli, through the api)"), "{by}");
    assert_eq!(storefront["moves"][0]["by"], by.as_str(), "{storefront:#}");
    // Back on the run image it had before the rebase, which the page shows as the app's own.
    let (now_on, rebased_on) = (&storefront["moves"][0]["run_image"], &storefront["moves"][1]["run_image"]);
    assert!(now_on.is_string() && rebased_on.is_string() && now_on != rebased_on, "{storefront:#}");
    assert!(status["rollout"]["frozen"].is_null(), "unfrozen: {:#}", status["rollout"]);
    // The commands it prints work as pasted into a shell whose PATH lacks the binary.
    let pasted = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{} && builder-monitor status --config config.toml", seen.path_line))
        .env("PATH", "/usr/bin:/bin")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(pasted.status.success(), "{}: {}", seen.path_line, String::from_utf8_lossy(&pasted.stderr));
    let config = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
    assert!(config.contains("rebase = \"registry\""), "{config}");
    every_line_shown_fits(&seen.human);
    one_explanation_and_one_word_per_state(bin, dir.path(), &seen.human, &status);
}

/// `plan` explains the rebuilds by the builder's move (a buildpack), not by the lifecycle the apps
/// were built with, which the daemon rebased them across; `approve` of a change with nothing
/// awaiting approval names its actions' states as `status` does (`waiting`, not `pending`), and
/// the tour shows no `approve` command.
fn one_explanation_and_one_word_per_state(
    bin: &std::path::Path,
    dir: &std::path::Path,
    human: &[(String, String)],
    status: &serde_json::Value,
) {
    let plan = &human.iter().find(|(what, _)| what.starts_with("builder-monitor plan ")).unwrap().1;
    for app in ["storefront", "orders"] {
        let line = plan.lines().find(|l| l.starts_with(&format!("{app} "))).unwrap_or_else(|| panic!("{plan}"));
        assert!(line.contains(": rebuild — the builder moved (paketo-buildpacks/java 18.1.0 → 18.2.0"), "{line}");
        assert!(!line.contains("lifecycle"), "the lifecycle did not move: {line}");
        // The same explanation `status` (and so the page and the builder.changed event) gives.
        let explained = status["builders"][0]["changes"][0]["summary"].as_str().unwrap();
        let moved = explained.strip_prefix("rebuild — ").unwrap_or_else(|| panic!("{explained}"));
        // plan's line is cut at 160 characters, so what it quotes may end in `…`.
        let quoted = line.split("the builder moved (").nth(1).unwrap_or_default();
        let quoted = quoted.split(['…']).next().unwrap().split("); ").next().unwrap();
        assert!(quoted.len() > 20 && moved.starts_with(quoted), "{line}\nstatus: {explained}");
    }
    assert!(human.iter().all(|(_, text)| !text.contains("builder-monitor approve")), "nothing awaits approval");
    let pending = status["pending"].as_array().unwrap();
    let change = pending[0]["change"].as_str().unwrap();
    let approve = std::process::Command::new(bin)
        .args(["approve", change, "--config", "config.toml"])
        .current_dir(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&approve.stdout);
    assert!(approve.status.success(), "{said}{}", String::from_utf8_lossy(&approve.stderr));
    assert!(said.contains("nothing to approve"), "{said}");
    for action in pending {
        let (image, state) = (action["image"].as_str().unwrap(), action["state"].as_str().unwrap());
        assert!(said.contains(&format!("{image} {state}")), "status says {image} is {state}: {said}");
    }
    assert!(pending.iter().any(|a| a["state"] == "waiting"), "{pending:#?}");
}

/// What the tour and the commands it ran showed people (`rollback`, `freeze`, `status`, `plan`,
/// `check`): no line over 160 characters, and digests short (12 hex digits; `--json` has them whole).
fn every_line_shown_fits(human: &[(String, String)]) {
    let commands: Vec<&str> = human.iter().map(|(what, _)| what.as_str()).filter(|w| *w != "tour").collect();
    for expected in ["rollback", "freeze", "unfreeze", "status", "plan", "check"] {
        let ran = format!("builder-monitor {expected} ");
        assert!(commands.iter().any(|c| c.starts_with(&ran)), "the tour did not run {expected}: {commands:?}");
    }
    let full_digest = |line: &str| {
        line.match_indices("sha256:")
            .any(|(at, _)| line[at + 7..].bytes().take_while(u8::is_ascii_hexdigit).count() == 64)
    };
    for (what, text) in human {
        for line in text.lines() {
            assert!(line.chars().count() <= 160, "{what}: a line of {} characters:\n{line}", line.chars().count());
            assert!(!full_digest(line), "{what}: a full digest shown to people:\n{line}");
        }
    }
}
