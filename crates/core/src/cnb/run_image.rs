//! What a run image move means, one answer for the daemon's run image watches and for `diff`: a
//! move within one OS release is a rebase (only base layers changed), a move to another release
//! (stack id, or the `io.buildpacks.base.distro.*` labels) a rebuild: the rebaser refuses an app
//! onto another distro, and app layers built against one release may not run on the next.

use std::collections::BTreeSet;

use super::STACK_ID;
use super::change::{Change, ChangeKind, FromTo, Reason};
use super::model::{BaseRelease, PinnedMetadata, PlatformMetadata};
use super::parse::parse_config;

const DISTRO_NAME: &str = "io.buildpacks.base.distro.name";
const DISTRO_VERSION: &str = "io.buildpacks.base.distro.version";
/// The longest label value kept as a release's stack id, distro name or version.
const MAX_RELEASE_BYTES: usize = 128;

/// The release an image config's labels name; `None` for an unreadable config or one without
/// any of the labels (not a CNB base image).
pub fn base_release(config: &[u8]) -> Option<BaseRelease> {
    let doc = parse_config(config).ok()?;
    let labels = &doc.config.labels;
    // A release name is a few words: a longer value is not one, and is not kept in the pin.
    let value = |name: &str| {
        labels.get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty() && v.len() <= MAX_RELEASE_BYTES)
    };
    let release = BaseRelease {
        stack_id: value(STACK_ID),
        distro_name: value(DISTRO_NAME),
        distro_version: value(DISTRO_VERSION),
    };
    (release != BaseRelease::default()).then_some(release)
}

/// Whether a pinned image is a base (run) image: no platform is a builder, and it says what it is
/// (its release labels) or what it holds (an OS package list).
pub fn is_base_image(metadata: &PinnedMetadata) -> bool {
    !metadata.platforms.is_empty()
        && metadata.platforms.values().all(|p| matches!(p, PlatformMetadata::NotBuilder))
        && (!metadata.releases.is_empty() || !metadata.packages.is_empty())
}

/// The move of a run image from the reference `from` to `to`, each side as pinned: `rebase` when
/// every platform both sides name stays on its release (or a side does not say), `rebuild` when one
/// moved to another; with the package diff of both sides' lists.
pub fn classify_run_image(from: String, to: String, previous: &PinnedMetadata, current: &PinnedMetadata) -> Change {
    let names = (from.clone(), to.clone());
    let mut change = Change::run_image_moved(from, to);
    let mut stack_ids = BTreeSet::new();
    let mut distros = BTreeSet::new();
    for (platform, after) in &current.releases {
        let Some(before) = previous.releases.get(platform).or_else(|| lone(previous)) else { continue };
        if before.stack_id.is_some() && after.stack_id.is_some() && before.stack_id != after.stack_id {
            stack_ids.insert((before.stack_id.clone(), after.stack_id.clone()));
        }
        let (was, is) = (before.distro(), after.distro());
        if was.is_some() && is.is_some() && was != is {
            distros.insert((was, is));
        }
    }
    if !(stack_ids.is_empty() && distros.is_empty()) {
        change.kind = ChangeKind::Rebuild;
        change.reasons.push(Reason::StackId);
        change.reasons.sort();
        change.stack_id = stack_ids.into_iter().next().map(|(from, to)| FromTo { from, to });
        change.distro = distros.into_iter().next().map(|(from, to)| FromTo { from, to });
    }
    change.with_packages(&previous.packages, &current.packages, (&names.0, &names.1))
}

/// The one release of a single-platform pin: a run image republished for another platform key
/// (`linux/amd64` → an index's `linux/amd64`) still compares with it.
fn lone(metadata: &PinnedMetadata) -> Option<&BaseRelease> {
    let mut all = metadata.releases.values();
    match (all.next(), all.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(labels: &[(&str, &str)]) -> Vec<u8> {
        let labels: serde_json::Map<String, serde_json::Value> =
            labels.iter().map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string()))).collect();
        serde_json::json!({"os": "linux", "architecture": "amd64", "config": {"Labels": labels}})
            .to_string()
            .into_bytes()
    }

    fn pinned(releases: &[(&str, BaseRelease)]) -> PinnedMetadata {
        PinnedMetadata {
            platforms: releases.iter().map(|(p, _)| (p.to_string(), PlatformMetadata::NotBuilder)).collect(),
            releases: releases.iter().map(|(p, r)| (p.to_string(), r.clone())).collect(),
            ..PinnedMetadata::default()
        }
    }

    fn release(stack: Option<&str>, distro: Option<(&str, &str)>) -> BaseRelease {
        BaseRelease {
            stack_id: stack.map(str::to_string),
            distro_name: distro.map(|d| d.0.to_string()),
            distro_version: distro.map(|d| d.1.to_string()),
        }
    }

    fn moved(before: &PinnedMetadata, after: &PinnedMetadata) -> Change {
        classify_run_image("run@sha256:aaa".into(), "run@sha256:bbb".into(), before, after)
    }

    #[test]
    fn the_release_is_read_from_the_labels() {
        let jammy = config(&[
            (STACK_ID, "io.buildpacks.stacks.jammy"),
            (DISTRO_NAME, "ubuntu"),
            (DISTRO_VERSION, "22.04"),
            ("org.example.other", "x"),
        ]);
        assert_eq!(base_release(&jammy), Some(release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.04")))));
        assert_eq!(base_release(&config(&[(STACK_ID, "heroku-24")])), Some(release(Some("heroku-24"), None)));
        assert_eq!(base_release(&config(&[("org.example.other", "x")])), None, "not a CNB base image");
        assert_eq!(base_release(&config(&[(STACK_ID, "  ")])), None, "an empty label says nothing");
        assert_eq!(base_release(b"not json"), None);
    }

    #[test]
    fn a_move_within_one_release_is_a_rebase() {
        let jammy = release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.04")));
        let c = moved(&pinned(&[("linux/amd64", jammy.clone())]), &pinned(&[("linux/amd64", jammy)]));
        assert_eq!(c.kind, ChangeKind::Rebase);
        assert_eq!(c.reasons, vec![Reason::Stack, Reason::RunImage]);
        assert_eq!(c.summary(), "rebase — run image sha256:aaa → sha256:bbb (run)");
    }

    #[test]
    fn a_move_to_another_release_is_a_rebuild() {
        let jammy = release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.04")));
        let noble = release(Some("io.buildpacks.stacks.noble"), Some(("ubuntu", "24.04")));
        let c = moved(&pinned(&[("linux/amd64", jammy.clone())]), &pinned(&[("linux/amd64", noble)]));
        assert_eq!(c.kind, ChangeKind::Rebuild);
        assert_eq!(c.reasons, vec![Reason::Stack, Reason::StackId, Reason::RunImage]);
        assert_eq!(
            c.summary(),
            "rebuild — stack io.buildpacks.stacks.jammy → io.buildpacks.stacks.noble; distro ubuntu 22.04 → ubuntu 24.04; \
             run image sha256:aaa → sha256:bbb (run)"
        );

        // The distro labels alone (a stack id kept across releases, as the newer images do).
        let same_stack = release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.10")));
        let c = moved(&pinned(&[("linux/amd64", jammy.clone())]), &pinned(&[("linux/amd64", same_stack)]));
        assert_eq!(c.kind, ChangeKind::Rebuild);
        assert!(c.stack_id.is_none());
        assert_eq!(c.distro.as_ref().and_then(|d| d.to.as_deref()), Some("ubuntu 22.10"));

        // The stack id alone (older images without distro labels).
        let c = moved(
            &pinned(&[("linux/amd64", release(Some("heroku-22"), None))]),
            &pinned(&[("linux/amd64", release(Some("heroku-24"), None))]),
        );
        assert_eq!(c.kind, ChangeKind::Rebuild);
    }

    #[test]
    fn a_side_that_does_not_say_is_no_reason_to_rebuild() {
        let jammy = release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.04")));
        // A pin recorded before releases were kept, or an image without the labels.
        let unlabelled = PinnedMetadata {
            platforms: [("linux/amd64".into(), PlatformMetadata::NotBuilder)].into(),
            ..Default::default()
        };
        assert_eq!(moved(&unlabelled, &pinned(&[("linux/amd64", jammy.clone())])).kind, ChangeKind::Rebase);
        assert_eq!(moved(&pinned(&[("linux/amd64", jammy.clone())]), &unlabelled).kind, ChangeKind::Rebase);
        // Only the stack id on one side, only the distro on the other: nothing to compare.
        let c = moved(
            &pinned(&[("linux/amd64", release(Some("io.buildpacks.stacks.jammy"), None))]),
            &pinned(&[("linux/amd64", release(None, Some(("ubuntu", "24.04"))))]),
        );
        assert_eq!(c.kind, ChangeKind::Rebase);
    }

    #[test]
    fn one_platform_moving_release_makes_the_move_a_rebuild() {
        let jammy = release(Some("io.buildpacks.stacks.jammy"), Some(("ubuntu", "22.04")));
        let noble = release(Some("io.buildpacks.stacks.noble"), Some(("ubuntu", "24.04")));
        let before = pinned(&[("linux/amd64", jammy.clone()), ("linux/arm64", jammy.clone())]);
        let after = pinned(&[("linux/amd64", jammy.clone()), ("linux/arm64", noble.clone())]);
        assert_eq!(moved(&before, &after).kind, ChangeKind::Rebuild);
        // A single image becoming an index compares with its one release.
        let single = pinned(&[("linux/amd64", jammy)]);
        let index = pinned(&[("linux/amd64#1", noble)]);
        assert_eq!(moved(&single, &index).kind, ChangeKind::Rebuild);
    }

    #[test]
    fn a_base_image_is_one_that_says_what_it_is() {
        let jammy = release(Some("io.buildpacks.stacks.jammy"), None);
        assert!(is_base_image(&pinned(&[("linux/amd64", jammy)])));
        let bare = PinnedMetadata {
            platforms: [("linux/amd64".into(), PlatformMetadata::NotBuilder)].into(),
            ..Default::default()
        };
        assert!(!is_base_image(&bare));
        assert!(!is_base_image(&PinnedMetadata::default()));
    }
}
