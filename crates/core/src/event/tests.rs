//! Event ids, subjects, JSON shape and summaries.

use super::example_builder_changed as changed;
use super::*;
use std::collections::BTreeMap;

#[test]
fn change_ids_are_stable_and_distinct() {
    let ab = change_id("b", 1, "sha256:a", "sha256:b");
    assert_eq!(ab, change_id("b", 1, "sha256:a", "sha256:b"));
    assert_eq!(ab.len(), 32);
    let ba = change_id("b", 2, "sha256:b", "sha256:a");
    let ab_again = change_id("b", 3, "sha256:a", "sha256:b");
    assert!(ab != ba && ab != ab_again && ba != ab_again);
    assert_ne!(change_id("b", 1, "sha256:a", "sha256:b"), change_id("c", 1, "sha256:a", "sha256:b"));
    // Parts are delimited: shifting text between them changes the id.
    assert_ne!(stable_id(&["ab", "c"]), stable_id(&["a", "bc"]));
}

#[test]
fn rollout_event_ids_come_from_the_sequence_not_the_clock() {
    let since = "2026-11-30T12:00:00Z";
    let first = rollout_event_id(EventType::RolloutFrozen, 1, since);
    assert_eq!(first, rollout_event_id(EventType::RolloutFrozen, 1, since), "recorded again: the same id");
    // freeze, unfreeze, freeze, unfreeze within one second: four ids.
    let ids: std::collections::BTreeSet<String> = [
        (EventType::RolloutFrozen, 1),
        (EventType::RolloutUnfrozen, 2),
        (EventType::RolloutFrozen, 3),
        (EventType::RolloutUnfrozen, 4),
    ]
    .into_iter()
    .map(|(t, n)| rollout_event_id(t, n, since))
    .collect();
    assert_eq!(ids.len(), 4);
    assert_ne!(first, rollout_event_id(EventType::RolloutFrozen, 1, "2026-12-01T00:00:00Z"));
}

#[test]
fn failure_runs_within_one_second_get_their_own_ids() {
    let since = "2026-11-30T12:00:00Z";
    let legacy = stable_id(&["jammy", "check.failed", since]);
    assert_eq!(failure_event_id("jammy", EventType::CheckFailed, since, 0), legacy, "ids recorded before runs");
    let first = failure_event_id("jammy", EventType::CheckFailed, since, 1);
    let second = failure_event_id("jammy", EventType::CheckFailed, since, 2);
    assert!(first != second && first != legacy);
    assert_eq!(first, failure_event_id("jammy", EventType::CheckFailed, since, 1), "repeated: the same id");
    assert_ne!(first, failure_event_id("jammy", EventType::CheckRecovered, since, 1));
}

/// A rebuild of the app image `image`.
fn action_on(image: &str) -> ActionInfo {
    ActionInfo {
        key: "bm-1".into(),
        image: image.into(),
        reference: format!("r/{image}:latest"),
        kind: crate::plan::ActionKind::Rebuild,
        change: "c".into(),
        attempt: 1,
        max_attempts: 3,
        detail: None,
        output_tail: None,
        previous: None,
        digest: None,
        result: ActionResult::empty(crate::plan::ActionKind::Rebuild),
        signature: None,
    }
}

fn subject_of(t: EventType, fill: impl FnOnce(&mut Event)) -> String {
    let mut e = Event::new("id".into(), t, "t".into(), Subject { name: "jammy".into(), image: "x".into() });
    fill(&mut e);
    subject_key(&e)
}

#[test]
fn each_event_type_has_the_subject_its_shape_names() {
    for t in [EventType::BuilderPinned, EventType::BuilderChanged, EventType::CheckFailed, EventType::CheckRecovered] {
        assert_eq!(subject_of(t, |_| {}), "builder:jammy", "{t}");
    }
    // A run image watch's events: the run image, whichever builder is named first.
    let run = |e: &mut Event| e.run_image = Some("docker.io/paketobuildpacks/run-jammy-base:latest".into());
    for t in [EventType::RunImageChanged, EventType::CheckFailed, EventType::CheckRecovered] {
        assert_eq!(subject_of(t, run), "run:docker.io/paketobuildpacks/run-jammy-base:latest", "{t}");
    }
    let action = |e: &mut Event| e.action = Some(action_on("petclinic"));
    for t in [
        EventType::BuildStarted,
        EventType::BuildSucceeded,
        EventType::BuildFailed,
        EventType::RebaseSucceeded,
        EventType::RebaseFailed,
    ] {
        assert_eq!(subject_of(t, action), "image:petclinic", "{t}");
    }
    let waiting = |e: &mut Event| {
        let a = |image: &str, wave| WaitingAction {
            key: "k".into(),
            image: image.into(),
            kind: crate::kind::ActionKind::Rebuild,
            wave,
        };
        e.rollout = Some(RolloutInfo { actions: vec![a("web", 1), a("api", 1)], ..Default::default() })
    };
    for t in [EventType::ActionAwaitingApproval, EventType::ActionHeld] {
        assert_eq!(subject_of(t, waiting), "image:web", "{t}");
    }
    let outage = |e: &mut Event| {
        e.outage = Some(Outage {
            registry: "docker.io".into(),
            since: "t".into(),
            watches: vec!["jammy".into()],
            reason: "registry_unavailable".into(),
            message: "503".into(),
        })
    };
    for t in [EventType::RegistryUnavailable, EventType::RegistryRecovered] {
        assert_eq!(subject_of(t, outage), "registry:docker.io", "{t}");
    }
    for t in [EventType::RolloutFrozen, EventType::RolloutUnfrozen] {
        let by_name = |e: &mut Event| e.builder.name = "rollout".into();
        assert_eq!(subject_of(t, by_name), "rollout", "{t}");
    }
    // Without the part its type names, the builder.
    assert_eq!(subject_of(EventType::BuildFailed, |_| {}), "builder:jammy");
    assert_eq!(subject_of(EventType::RegistryUnavailable, |_| {}), "builder:jammy");
}

#[test]
fn subjects_of_different_kinds_never_meet() {
    // A builder may be named `rollout` or like an app image; its key still differs.
    assert_ne!(subject_of(EventType::BuilderChanged, |e| e.builder.name = "rollout".into()), "rollout");
    let image = subject_of(EventType::BuildStarted, |e| e.action = Some(action_on("jammy")));
    assert_ne!(image, subject_of(EventType::BuilderChanged, |_| {}));
}

#[test]
fn event_json_has_the_documented_shape() {
    let mut e = Event::new(
        "id1".into(),
        EventType::BuilderChanged,
        "2026-11-30T12:00:00Z".into(),
        Subject { name: "b".into(), image: "docker.io/x/y:latest".into() },
    );
    e.previous =
        Some(Pin { digest: "sha256:a".into(), reference: "docker.io/x/y@sha256:a".into(), platforms: BTreeMap::new() });
    e.change = Some(Change::unknown("test"));
    e.images = Some(vec![]);
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["type"], "builder.changed");
    assert_eq!(v["builder"]["image"], "docker.io/x/y:latest");
    assert_eq!(v["previous"]["reference"], "docker.io/x/y@sha256:a");
    assert_eq!(v["change"]["kind"], "unknown");
    assert!(v["change"]["lifecycle"].is_null());
    assert!(v.get("builders").is_none() && v.get("run_image").is_none());
    assert!(v.get("current").is_none());
    let back: Event = serde_json::from_value(v).unwrap();
    assert_eq!(back, e);
}

#[test]
fn summaries_are_one_short_line() {
    let e = changed();
    assert_eq!(
        e.summary(),
        "builder.changed paketo-jammy-base: rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0; planned: rebuild petclinic"
    );
    let mut many = e.clone();
    many.images = Some(
        (1..=7)
            .map(|n| ImageAction { name: format!("app-{n}"), action: if n == 3 { "rebase" } else { "rebuild" }.into() })
            .collect(),
    );
    assert!(
        many.summary().ends_with(
            "; planned: rebuild app-1, rebuild app-2, rebase app-3, rebuild app-4, rebuild app-5, and 2 more"
        ),
        "{}",
        many.summary()
    );
    many.images = Some(vec![]);
    assert!(!many.summary().contains("planned"), "{}", many.summary());
    let mut failed = Event::new("id".into(), EventType::CheckFailed, "t".into(), e.builder.clone());
    failed.error = Some(CheckError {
        reason: "registry_unavailable".into(),
        message: format!("connection refused\n{}", "detail ".repeat(100)),
        consecutive_failures: 3,
        since: "t".into(),
    });
    assert_eq!(
        failed.summary(),
        "check.failed paketo-jammy-base: registry_unavailable — connection refused … (3 in a row)"
    );
    let mut pinned = Event::new("id".into(), EventType::BuilderPinned, "t".into(), e.builder.clone());
    pinned.current = e.current.clone();
    assert_eq!(pinned.summary(), "builder.pinned paketo-jammy-base: pinned to sha256:bbbbbbbbbbbb");
    let long = "x".repeat(1000);
    failed.error.as_mut().unwrap().message = long;
    assert!(failed.summary().chars().count() < 250, "{}", failed.summary());
    // A long error is cut after a whole word.
    let words = "manifest unknown to the registry, which answered with a body that goes on ".repeat(5);
    failed.error.as_mut().unwrap().message = words.clone();
    let summary = failed.summary();
    let quoted = summary.split(" — ").nth(1).unwrap().strip_suffix(" (3 in a row)").unwrap();
    let kept = quoted.strip_suffix(" …").expect("marked as cut");
    assert!(words.starts_with(kept) && words[kept.len()..].starts_with(' '), "{summary}");
}

/// Each kind's facts are read by its kind and written back byte for byte, in the fields events
/// have always had.
#[test]
fn action_facts_round_trip_per_kind() {
    let common = r#""image":"app","reference":"r/app:latest","change":"c","attempt":1,"max_attempts":3"#;
    let rebase = format!(
        r#"{{"key":"k",{common},"kind":"rebase","digest":"sha256:b","path":"registry","tag_race":"sha256:x","pool":"linux"}}"#
    );
    let deploy = format!(
        r#"{{"key":"k",{common},"kind":"deploy","workloads":[{{"kind":"Deployment","namespace":"shop","name":"app","containers":[],"state":"healthy"}}]}}"#
    );
    let gitops = format!(
        r#"{{"key":"k",{common},"kind":"gitops","commit":{{"target":"fleet","id":"abc","branch":"main","files":["a.yaml"]}}}}"#
    );
    let signed = format!(
        r#"{{"key":"k",{common},"kind":"rebase","digest":"sha256:b","path":"registry","signature":{{"digest":"sha256:b","key_id":"k1","signature":"sha256:s","attestation":"sha256:t"}}}}"#
    );
    let order = |text: &str| serde_json::to_string(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
    let info: ActionInfo = serde_json::from_str(&signed).unwrap();
    assert_eq!(info.signature.as_ref().and_then(|s| s.signature.as_deref()), Some("sha256:s"));
    assert_eq!(serde_json::from_str::<ActionInfo>(&rebase).unwrap().signature, None);
    for text in [&rebase, &deploy, &gitops, &signed] {
        let info: ActionInfo = serde_json::from_str(text).unwrap();
        assert_eq!(order(&serde_json::to_string(&info).unwrap()), order(text));
    }
    let info: ActionInfo = serde_json::from_str(&rebase).unwrap();
    let build = info.result.build().unwrap();
    assert_eq!(
        (build.path.as_deref(), build.tag_race.as_deref(), build.pool.as_deref()),
        (Some("registry"), Some("sha256:x"), Some("linux"))
    );
    let info: ActionInfo = serde_json::from_str(&deploy).unwrap();
    assert_eq!(info.result.workloads().len(), 1);
    let info: ActionInfo = serde_json::from_str(&gitops).unwrap();
    assert_eq!(info.result.commit().and_then(|c| c.id.as_deref()), Some("abc"));
    // The wire order is today's: the shared fields first, then path, tag_race, workloads, pool, commit.
    let written = serde_json::to_string(&serde_json::from_str::<ActionInfo>(&rebase).unwrap()).unwrap();
    assert!(
        written.ends_with(r#""digest":"sha256:b","path":"registry","tag_race":"sha256:x","pool":"linux"}"#),
        "{written}"
    );
}
