//! `classify`: what a builder move means for the app images built on it (rebase, rebuild, unknown,
//! none), platform by platform, and `describe` for people.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::change::{BuildpackChange, Change, ChangeKind, FromTo, PlatformChange, Reason};
use super::model::{BuilderMetadata, OrderEntry, PinnedMetadata, PlatformMetadata, RunImagePin};
use crate::reference::ImageRef;
use crate::text::escape;

/// Compares two run image names, treating `index.docker.io/x` and `docker.io/x` as one.
pub(super) fn same_image(a: &str, b: &str) -> bool {
    match (ImageRef::parse(a), ImageRef::parse(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub(super) struct PlatformComparison {
    kind: ChangeKind,
    reasons: BTreeSet<Reason>,
    buildpacks: Vec<BuildpackChange>,
    lifecycle: Option<FromTo>,
    run_image: Option<FromTo>,
    stack_id: Option<FromTo>,
}

pub(super) fn compare(
    prev: &BuilderMetadata,
    cur: &BuilderMetadata,
    prev_run: Option<&RunImagePin>,
    cur_run: Option<&RunImagePin>,
) -> PlatformComparison {
    let mut reasons = BTreeSet::new();

    let buildpacks = buildpack_changes(prev, cur);
    if !buildpacks.is_empty() {
        reasons.insert(Reason::Buildpack);
    }

    let lifecycle = (prev.lifecycle.version != cur.lifecycle.version)
        .then(|| FromTo { from: prev.lifecycle.version.clone(), to: cur.lifecycle.version.clone() });
    if lifecycle.is_some() {
        reasons.insert(Reason::Lifecycle);
    }

    if normalized_order(prev.order.as_deref()) != normalized_order(cur.order.as_deref()) {
        reasons.insert(Reason::Order);
    }

    let stack_id =
        (prev.stack_id != cur.stack_id).then(|| FromTo { from: prev.stack_id.clone(), to: cur.stack_id.clone() });
    let mixins = |m: &[String]| m.iter().cloned().collect::<BTreeSet<_>>();
    if stack_id.is_some()
        || prev.target != cur.target
        || mixins(&prev.mixins) != mixins(&cur.mixins)
        || prev.user_id != cur.user_id
        || prev.group_id != cur.group_id
    {
        reasons.insert(Reason::StackId);
    }

    let run_image = run_image_change(prev, cur, prev_run, cur_run);
    if run_image.is_some() {
        reasons.insert(Reason::RunImage);
        reasons.insert(Reason::Stack);
    }
    if prev.base_layers != cur.base_layers {
        reasons.insert(Reason::Stack);
    }

    let kind = if reasons.is_empty() {
        ChangeKind::None
    } else if reasons.iter().all(|r| matches!(r, Reason::Stack | Reason::RunImage)) {
        ChangeKind::Rebase
    } else {
        ChangeKind::Rebuild
    };
    PlatformComparison { kind, reasons, buildpacks, lifecycle, run_image, stack_id }
}

/// The buildpacks that changed: versions per id (one version replaced by another is one change;
/// otherwise each version gone or new), and layers republished under the same version. Sorted.
fn buildpack_changes(prev: &BuilderMetadata, cur: &BuilderMetadata) -> Vec<BuildpackChange> {
    let before = prev.buildpack_set();
    let after = cur.buildpack_set();
    let mut buildpacks = Vec::new();
    let ids: BTreeSet<&String> = before.keys().chain(after.keys()).map(|(id, _)| id).collect();
    for id in ids {
        let versions = |set: &BTreeMap<(String, String), Option<String>>| -> BTreeMap<String, Option<String>> {
            set.iter().filter(|((i, _), _)| i == id).map(|((_, v), l)| (v.clone(), l.clone())).collect()
        };
        let (old, new) = (versions(&before), versions(&after));
        if old == new {
            continue;
        }
        let change = |from: Option<String>, to: Option<String>, republished| BuildpackChange {
            id: id.clone(),
            from,
            to,
            republished,
        };
        let old_only: Vec<&String> = old.keys().filter(|v| !new.contains_key(*v)).collect();
        let new_only: Vec<&String> = new.keys().filter(|v| !old.contains_key(*v)).collect();
        let nonempty = |v: &String| (!v.is_empty()).then(|| v.clone());
        match (old_only.as_slice(), new_only.as_slice()) {
            ([from], [to]) => buildpacks.push(change(nonempty(from), nonempty(to), false)),
            _ => {
                buildpacks.extend(old_only.into_iter().map(|v| change(nonempty(v), None, false)));
                buildpacks.extend(new_only.into_iter().map(|v| change(None, nonempty(v), false)));
            }
        }
        for (v, layer) in &old {
            if new.get(v).is_some_and(|new_layer| new_layer != layer) {
                buildpacks.push(change(nonempty(v), nonempty(v), true));
            }
        }
    }
    buildpacks.sort();
    buildpacks
}

/// The run image's move: its name in the metadata, and the digest it resolved to when pinned
/// (the digests when both are known, else the names).
fn run_image_change(
    prev: &BuilderMetadata,
    cur: &BuilderMetadata,
    prev_run: Option<&RunImagePin>,
    cur_run: Option<&RunImagePin>,
) -> Option<FromTo> {
    let names_differ = match (prev.run_image(), cur.run_image()) {
        (Some(a), Some(b)) => !same_image(a, b),
        (a, b) => a.is_some() != b.is_some(),
    };
    let prev_ref = prev_run.and_then(|r| r.reference.clone());
    let cur_ref = cur_run.and_then(|r| r.reference.clone());
    let refs_differ = matches!((&prev_ref, &cur_ref), (Some(a), Some(b)) if a != b);
    if refs_differ || (names_differ && prev_ref.is_some() && cur_ref.is_some()) {
        Some(FromTo { from: prev_ref, to: cur_ref })
    } else if names_differ {
        Some(FromTo { from: prev.run_image().map(str::to_string), to: cur.run_image().map(str::to_string) })
    } else {
        None
    }
}

/// Order groups as written, each group's entries as a set of (id, optional). Versions are left out:
/// a version bump is a BUILDPACK change, and pack writes resolved versions into the order label.
pub(super) fn normalized_order(order: Option<&[Vec<OrderEntry>]>) -> Option<Vec<BTreeSet<(String, bool)>>> {
    order.map(|groups| groups.iter().map(|g| g.iter().map(|e| (e.id.clone(), e.optional)).collect()).collect())
}

/// What a move from `previous` to `current` means, per platform, then combined: any rebuild makes
/// the whole change a rebuild; unknown beats rebase; rebase only when every platform can rebase.
pub fn classify(previous: &PinnedMetadata, current: &PinnedMetadata) -> Change {
    let mut pairs: Vec<(String, &PlatformMetadata, &PlatformMetadata)> = current
        .platforms
        .iter()
        .filter_map(|(k, cur)| previous.platforms.get(k).map(|prev| (k.clone(), prev, cur)))
        .collect();
    if pairs.is_empty() {
        // No platform in common (e.g. a single amd64 image replaced by an arm64 one): compare the
        // images themselves; their targets differ, which is a rebuild.
        match (previous.platforms.iter().next(), current.platforms.iter().next()) {
            (Some((pk, prev)), Some((ck, cur))) => pairs.push((format!("{pk} → {ck}"), prev, cur)),
            _ => return Change { notes: current.notes.clone(), ..Change::unknown("no platform metadata to compare") },
        }
    }
    let base_moved = pairs.iter().any(|(_, p, c)| match (p, c) {
        (PlatformMetadata::Builder(p), PlatformMetadata::Builder(c)) => p.base_layers != c.base_layers,
        _ => false,
    });
    let mut change = Change::of_kind(ChangeKind::None);
    let mut reasons = BTreeSet::new();
    let mut notes = Vec::new();
    for (platform, prev, cur) in pairs {
        let (kind, platform_reasons) = match (prev, cur) {
            (PlatformMetadata::Builder(p), PlatformMetadata::Builder(c)) => {
                let cmp = compare(p, c, previous.run_image.as_ref(), current.run_image.as_ref());
                reasons.extend(cmp.reasons.iter().copied());
                for b in cmp.buildpacks {
                    if !change.buildpacks.contains(&b) {
                        change.buildpacks.push(b);
                    }
                }
                change.lifecycle = change.lifecycle.or(cmp.lifecycle);
                change.run_image = change.run_image.or(cmp.run_image);
                change.stack_id = change.stack_id.or(cmp.stack_id);
                (cmp.kind, cmp.reasons.into_iter().collect())
            }
            (p, c) => {
                let side = |m: &PlatformMetadata| match m {
                    PlatformMetadata::Builder(_) => None,
                    PlatformMetadata::NotBuilder => Some("is not a CNB builder".to_string()),
                    PlatformMetadata::Unreadable { error } => Some(format!("has unreadable metadata ({error})")),
                };
                if let Some(why) = side(p) {
                    notes.push(format!("{platform}: the previous image {why}"));
                }
                if let Some(why) = side(c) {
                    notes.push(format!("{platform}: the new image {why}"));
                }
                (ChangeKind::Unknown, Vec::new())
            }
        };
        change.kind = change.kind.max(kind);
        change.platforms.insert(platform, PlatformChange { kind, reasons: platform_reasons });
    }
    change.reasons = reasons.into_iter().collect();
    change.buildpacks.sort();
    if !notes.is_empty() {
        change.note = Some(notes.join("; "));
    }
    // The run image's packages are what reach app images; the builder's own (its build image's)
    // stand in when only its base layers moved.
    let run_lists = |m: &PinnedMetadata| m.run_image.as_ref().map(|r| r.packages.clone()).unwrap_or_default();
    let run_name = |m: &PinnedMetadata, side: &str| {
        m.run_image.as_ref().map_or(format!("the {side} run image"), |r| r.reference.clone().unwrap_or(r.image.clone()))
    };
    if change.reasons.contains(&Reason::RunImage) {
        let names = (run_name(previous, "previous"), run_name(current, "new"));
        change = change.with_packages(&run_lists(previous), &run_lists(current), (&names.0, &names.1));
    }
    if change.packages.is_none() && change.packages_note.is_none() && base_moved {
        let names = ("the previous builder image", "the new builder image");
        change = change.with_packages(&previous.packages, &current.packages, names);
    }
    change.notes = current.notes.clone();
    change
}

/// Renders builder metadata for `resolve`, registry strings escaped.
pub fn describe(meta: &BuilderMetadata) -> String {
    let mut out = String::new();
    let or_dash = |s: Option<&str>| escape(s.unwrap_or("-")).into_owned();
    let _ = writeln!(out, "  stack:      {}", or_dash(meta.stack_id.as_deref()));
    let _ = writeln!(out, "  lifecycle:  {}", or_dash(meta.lifecycle.version.as_deref()));
    let _ = writeln!(out, "  run image:  {}", or_dash(meta.run_image()));
    if let Some(description) = &meta.description {
        let _ = writeln!(out, "  about:      {}", escape(description));
    }
    let _ = writeln!(out, "  buildpacks: {}", meta.buildpacks.len());
    for b in &meta.buildpacks {
        let _ = writeln!(out, "    {} {}", escape(&b.id), or_dash(b.version.as_deref()));
    }
    out
}
