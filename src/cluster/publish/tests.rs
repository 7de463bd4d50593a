use serde_json::json;

use super::*;
use crate::ledger::{HeldDigest, PinMetadata, PinRecord, WatchKind};
use builder_monitor_core::cnb::Change;
use builder_monitor_core::schedule::parse_timestamp;

fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
    parse_timestamp(text).unwrap()
}

fn pinned(metadata: serde_json::Value) -> PinMetadata {
    serde_json::from_value::<builder_monitor_core::cnb::PinnedMetadata>(metadata).unwrap().into()
}

fn record() -> WatchRecord {
    WatchRecord {
        name: "jammy".into(),
        kind: WatchKind::Builder,
        image: "registry.test/builder:latest".into(),
        pin: Some(PinRecord {
            digest: "sha256:bb".into(),
            reference: "registry.test/builder@sha256:bb".into(),
            media_type: "application/vnd.oci.image.index.v1+json".into(),
            platforms: Default::default(),
            since: at("2026-11-30T10:00:00Z"),
        }),
        metadata: Some(pinned(json!({
            "platforms": {
                "linux/amd64": {
                    "status": "builder",
                    "stack_id": "io.buildpacks.stacks.jammy",
                    "buildpacks": [{ "id": "paketo-buildpacks/go", "version": "4.1.0", "homepage": "https://example.test/go" }],
                    "run_images": [{ "image": "registry.test/run:base" }],
                    "lifecycle": { "version": "0.20.1" },
                    "target": { "os": "linux", "arch": "amd64" }
                }
            },
            "run_image": { "image": "registry.test/run:base", "reference": "registry.test/run@sha256:r1" }
        }))),
        first_seen: at("2026-11-30T09:00:00Z"),
        last_check: Some(at("2026-11-30T10:05:00Z")),
        last_ok: Some(true),
        last_error_reason: None,
        last_error: None,
        last_change: None,
        consecutive_failures: 0,
        failing_since: None,
        pending: None,
        moves: 1,
        failure_runs: 0,
    }
}

fn change() -> ChangeRecord {
    ChangeRecord {
        id: "c1".into(),
        watch: "jammy".into(),
        seq: 1,
        previous: "sha256:aa".into(),
        current: "sha256:bb".into(),
        previous_reference: "registry.test/builder@sha256:aa".into(),
        current_reference: "registry.test/builder@sha256:bb".into(),
        change: serde_json::from_value::<Change>(json!({ "kind": "rebuild", "reasons": ["BUILDPACK"] })).unwrap(),
        rollback: false,
        detected: at("2026-11-30T10:00:00Z"),
    }
}

fn input<'a>(
    record: Option<&'a WatchRecord>,
    history: &'a [PinnedDigest],
    change: Option<&'a ChangeRecord>,
) -> StatusInput<'a> {
    StatusInput {
        record,
        history,
        last_change: change,
        run_image: None,
        generation: Some(1),
        previous: None,
        now: "2026-11-30T10:05:01Z",
    }
}

#[test]
fn a_pinned_builder_publishes_its_pin_metadata_and_history() {
    let record = record();
    let change = change();
    let history: Vec<PinnedDigest> = (0..12)
        .map(|i| PinnedDigest {
            digest: format!("sha256:{i:02}"),
            first_seen: at(&format!("2026-11-{:02}T00:00:00Z", 30 - i)),
            platforms: Vec::new(),
        })
        .collect();
    let status = status_of(&input(Some(&record), &history, Some(&change)));
    assert_eq!(status.latest_image.as_deref(), Some("registry.test/builder@sha256:bb"));
    assert_eq!(
        status.stack,
        Some(BuilderStack {
            id: Some("io.buildpacks.stacks.jammy".into()),
            run_image: Some("registry.test/run@sha256:r1".into())
        })
    );
    assert_eq!(status.lifecycle.and_then(|l| l.version).as_deref(), Some("0.20.1"));
    assert_eq!(status.builder_metadata[0].id, "paketo-buildpacks/go");
    assert_eq!(status.builder_metadata[0].version.as_deref(), Some("4.1.0"));
    assert_eq!(status.history.len(), HISTORY, "history is cut to the last {HISTORY}");
    assert_eq!(status.history[0].digest, "sha256:00");
    assert_eq!(status.history[1].first_seen, "2026-11-29T00:00:00Z");
    let last = status.last_change.expect("last change");
    assert_eq!((last.kind.as_str(), last.reasons.as_slice()), ("rebuild", ["BUILDPACK".to_string()].as_slice()));
    assert_eq!(status.last_change_time.as_deref(), Some("2026-11-30T10:00:00Z"));
    assert_eq!(status.last_check_time.as_deref(), Some("2026-11-30T10:05:00Z"));
    let ready = &status.conditions[0];
    assert_eq!((ready.type_.as_str(), ready.status.as_str()), ("Ready", "True"));
    assert_eq!(status.conditions[1].status, "True");
    assert_eq!(status.observed_generation, Some(1));
}

#[test]
fn the_run_image_watch_pin_wins_over_the_one_recorded_with_the_builder() {
    let record = record();
    let mut i = input(Some(&record), &[], None);
    i.run_image = Some("registry.test/run@sha256:r2".into());
    assert_eq!(status_of(&i).stack.and_then(|s| s.run_image).as_deref(), Some("registry.test/run@sha256:r2"));
}

#[test]
fn a_failed_check_is_ready_false_with_a_reason_and_keeps_the_pin() {
    let mut record = record();
    record.last_ok = Some(false);
    record.last_error_reason = Some("tag_missing".into());
    record.last_error = Some("registry.test/builder:latest: tag not found".into());
    let status = status_of(&input(Some(&record), &[], None));
    let ready = &status.conditions[0];
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("TagMissing"));
    assert_eq!(ready.message.as_deref(), Some("registry.test/builder:latest: tag not found"));
    assert_eq!(status.conditions[1].status, "Unknown");
    assert_eq!(status.latest_image.as_deref(), Some("registry.test/builder@sha256:bb"), "the pin is kept");
}

#[test]
fn a_settling_digest_is_not_up_to_date() {
    let mut record = record();
    record.pending = Some(HeldDigest { digest: "sha256:cc".into(), since: at("2026-11-30T10:04:00Z") });
    let status = status_of(&input(Some(&record), &[], None));
    assert_eq!(status.conditions[1].status, "False");
    assert_eq!(status.conditions[1].reason.as_deref(), Some("Settling"));
    assert_eq!(
        status.conditions[1].message.as_deref(),
        Some("the tag moved to sha256:cc (seen since 2026-11-30T10:04:00Z); waiting for it to settle")
    );
}

#[test]
fn never_checked_is_unknown() {
    let status = status_of(&input(None, &[], None));
    assert_eq!(status.latest_image, None);
    assert!(status.conditions.iter().all(|c| c.status == "Unknown"));
}

#[test]
fn transition_times_move_only_when_a_condition_changes() {
    let record = record();
    let before = ClusterBuilderStatus {
        conditions: vec![
            Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("Pinned".into()),
                message: None,
                last_transition_time: Some("2026-11-29T00:00:00Z".into()),
            },
            Condition {
                type_: "UpToDate".into(),
                status: "False".into(),
                reason: Some("Settling".into()),
                message: None,
                last_transition_time: Some("2026-11-29T00:00:00Z".into()),
            },
        ],
        ..Default::default()
    };
    let mut i = input(Some(&record), &[], None);
    i.previous = Some(&before);
    let status = status_of(&i);
    assert_eq!(status.conditions[0].last_transition_time.as_deref(), Some("2026-11-29T00:00:00Z"));
    assert_eq!(status.conditions[1].last_transition_time.as_deref(), Some("2026-11-30T10:05:01Z"));
}

#[test]
fn reasons_become_condition_reasons() {
    assert_eq!(condition_reason("tag_missing"), "TagMissing");
    assert_eq!(condition_reason("registry_unavailable"), "RegistryUnavailable");
    assert_eq!(condition_reason("unauthorized"), "Unauthorized");
}

#[test]
fn the_last_change_names_the_packages_it_moved() {
    let record = record();
    let mut change = change();
    change.change = serde_json::from_value::<Change>(json!({
        "kind": "rebase", "reasons": ["STACK", "RUN_IMAGE"],
        "packages": {"source": "io.paketo.stack.packages",
                     "changed": [{"name": "openssl", "from": "3.0.2-0ubuntu1.15", "to": "3.0.2-0ubuntu1.16"}],
                     "added": [], "removed": [{"name": "libgone1", "version": "1.0"}]}
    }))
    .unwrap();
    let status = status_of(&input(Some(&record), &[], Some(&change)));
    let last = status.last_change.expect("last change");
    assert_eq!(last.packages.as_deref(), Some("openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16, libgone1 1.0 removed"));
    // Without a package diff, nothing is said (and nothing is serialised).
    let status = status_of(&input(Some(&record), &[], Some(&self::change())));
    assert!(serde_json::to_value(status.last_change.unwrap()).unwrap().get("packages").is_none());
}
