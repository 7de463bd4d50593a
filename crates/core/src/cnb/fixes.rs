//! Which security notices a move fixes, on its change: each platform's package lists on both sides
//! matched against the vulnerability index for that platform's release; a fix is claimed only when
//! every platform's full list shows it, any other a platform shows is `unknown` with why; or a
//! note why nothing could be matched. The change records where the data came from.

use std::collections::{BTreeMap, BTreeSet};

use super::change::Change;
use super::model::{PinnedMetadata, PlatformMetadata};
use crate::packages::{Package, Packages};
use crate::vulns::{Fix, Index, Priority, Release, UnknownFix, release_of};

/// The release of each platform of a pinned image: a run image's labels (a lone one for every
/// platform), else the builder's own `io.buildpacks.base.distro.*` target or stack id.
pub fn releases_of(metadata: &PinnedMetadata) -> BTreeMap<String, Release> {
    let mut out = BTreeMap::new();
    for (platform, release) in &metadata.releases {
        if let Some(r) =
            release_of(release.distro_name.as_deref(), release.distro_version.as_deref(), release.stack_id.as_deref())
        {
            out.insert(platform.clone(), r);
        }
    }
    for (platform, meta) in &metadata.platforms {
        if out.contains_key(platform) {
            continue;
        }
        if let PlatformMetadata::Builder(b) = meta
            && let Some(r) =
                release_of(b.target.distro_name.as_deref(), b.target.distro_version.as_deref(), b.stack_id.as_deref())
        {
            out.insert(platform.clone(), r);
        }
    }
    out
}

/// Every binary package name the lists of `metadata` carry (its own and its run image's, every
/// platform): the names a vulnerability index must keep for a move from or to it to be judged in
/// full ([`Index::with_names`]).
pub fn package_names(metadata: &PinnedMetadata) -> BTreeSet<String> {
    let run_image = metadata.run_image.iter().flat_map(|r| r.packages.values());
    let mut names = BTreeSet::new();
    for list in metadata.packages.values().chain(run_image) {
        if let Packages::Listed { packages, .. } = list {
            names.extend(packages.iter().map(|p| p.name.clone()));
        }
    }
    names
}

/// The versioned packages of a list, or why it has none to match.
fn versioned(list: Option<&Packages>, side: &str) -> Result<Vec<Package>, String> {
    match list {
        None => Err(format!("the {side} image has no package list")),
        Some(Packages::Unreadable { .. }) => Err(format!("the {side} image's package list is unreadable")),
        Some(Packages::Listed { packages, .. })
            if !packages.is_empty() && packages.iter().all(|p| p.version.is_empty()) =>
        {
            Err(format!("the {side} image's package list has names only, no versions"))
        }
        Some(Packages::Listed { packages, .. }) => {
            Ok(packages.iter().filter(|p| !p.version.is_empty()).cloned().collect())
        }
    }
}

/// What matching a move found: the fixes claimed (every platform's full list shows them) and
/// those some platform's list showed but that cannot be claimed, each with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matched {
    pub fixes: Vec<Fix>,
    pub unknown: Vec<UnknownFix>,
}

/// One platform's verdict: the fixes its lists show, and whether its new list was cut (then
/// nothing it shows can be claimed: a binary past the cut may still be vulnerable).
struct PlatformVerdict {
    fixes: Vec<Fix>,
    cut_at: Option<usize>,
}

/// The fixes of a move from `before` to `after` (platform → list on each side), each platform
/// matched for its release in `releases` (a lone release stands for every platform). A fix is
/// claimed only when every platform of the new image was matched on a full list and shows it;
/// any other fix some platform shows is `unknown`, with the reason (a platform that does not
/// show it fixed, a list cut at its cap, a platform that could not be matched). `Err`: no
/// platform could be matched, and why.
pub fn fixes_of(
    index: &Index,
    before: &BTreeMap<String, Packages>,
    after: &BTreeMap<String, Packages>,
    releases: &BTreeMap<String, Release>,
) -> Result<Matched, String> {
    if before.is_empty() && after.is_empty() {
        return Err("neither image has a package list".into());
    }
    let lone = (releases.len() == 1).then(|| releases.values().next()).flatten();
    let lone_before = (before.len() == 1).then(|| before.values().next()).flatten();
    let mut matched: BTreeMap<&str, PlatformVerdict> = BTreeMap::new();
    let mut notes: Vec<(&str, String)> = Vec::new();
    let several = after.len() > 1;
    for (platform, now) in after {
        let Some(release) = releases.get(platform).or(lone) else {
            notes.push((platform, "the image names no Ubuntu release (distro labels or stack id)".into()));
            continue;
        };
        if !index.keeps(release) {
            notes.push((platform, format!("no vulnerability data of {} is loaded", release.0)));
            continue;
        }
        let then = before.get(platform).or(lone_before);
        match (versioned(then, "previous"), versioned(Some(now), "new")) {
            (Ok(b), Ok(a)) => {
                let verdict = PlatformVerdict { fixes: index.fixes(release, &b, &a), cut_at: now.cut_at() };
                matched.insert(platform, verdict);
            }
            (Err(note), _) | (_, Err(note)) => notes.push((platform, note)),
        }
    }
    if matched.is_empty() {
        let prefixed =
            |(platform, note): &(&str, String)| if several { format!("{platform}: {note}") } else { note.clone() };
        let mut notes: Vec<String> = notes.iter().map(prefixed).collect();
        if after.is_empty() {
            notes.push("the new image has no package list".into());
        }
        return Err(notes.join("; "));
    }
    Ok(claimed(&matched, &notes, several))
}

/// The fixes every platform shows on a full list, and the others with why they are not claimed.
fn claimed(matched: &BTreeMap<&str, PlatformVerdict>, unmatched: &[(&str, String)], several: bool) -> Matched {
    let on = |platform: &str| if several { format!(" ({platform})") } else { String::new() };
    // Every fix any platform shows, once, as the preferred platform (linux/amd64, else the first) has it.
    let preferred = matched.get("linux/amd64").into_iter().chain(matched.values());
    let mut shown: Vec<Fix> = Vec::new();
    for verdict in preferred {
        for fix in &verdict.fixes {
            if !shown.iter().any(|f| f.id == fix.id) {
                shown.push(fix.clone());
            }
        }
    }
    let mut out = Matched::default();
    for fix in shown {
        let mut reasons: Vec<String> = Vec::new();
        for (platform, verdict) in matched {
            if !verdict.fixes.iter().any(|f| f.id == fix.id) {
                reasons.push(format!("{platform} is not shown fixed by the move"));
            } else if let Some(cut) = verdict.cut_at {
                let why = "a binary past the cut may still be vulnerable";
                reasons.push(format!("the new image's package list{} was cut at {cut} entries: {why}", on(platform)));
            }
        }
        for (platform, note) in unmatched {
            reasons.push(format!("{platform} could not be matched: {note}"));
        }
        if reasons.is_empty() {
            out.fixes.push(fix);
        } else {
            out.unknown.push(UnknownFix { id: fix.id, priority: fix.priority, reason: reasons.join("; ") });
        }
    }
    out
}

impl Change {
    /// Adds what the move fixes: `index` is the vulnerability data (`None`: none configured, and
    /// the change has no `fixes` field at all); `before`/`after` the lists of the images whose
    /// packages reach app images; `releases` the new image's release per platform. With lists
    /// that matched nothing, `fixes` is `[]`; without lists to match, `fixes_note` says why.
    pub fn with_fixes(
        mut self,
        index: Option<&Index>,
        before: &BTreeMap<String, Packages>,
        after: &BTreeMap<String, Packages>,
        releases: &BTreeMap<String, Release>,
    ) -> Self {
        let Some(index) = index else { return self };
        match fixes_of(index, before, after, releases) {
            Ok(matched) => {
                (self.fixes, self.fixes_unknown, self.fixes_note) = (Some(matched.fixes), matched.unknown, None)
            }
            Err(note) => (self.fixes, self.fixes_unknown, self.fixes_note) = (None, Vec::new(), Some(note)),
        }
        self.fixes_source = index.source().cloned();
        // Only beside a claimed fix: what an OpenVEX document's package purls need.
        let mut matched_in: BTreeSet<&Release> = releases.values().collect();
        let claims = self.fixes.as_ref().is_some_and(|f| !f.is_empty());
        self.fixes_release =
            (claims && matched_in.len() == 1).then(|| matched_in.pop_first()).flatten().map(|r| r.0.clone());
        self
    }

    /// The fixes of a move from the pin `previous` to `current`, each side's lists chosen as the
    /// change's packages were: a builder whose run image moved by its run image's lists, else the
    /// image's own.
    pub fn with_fixes_of_pins(
        self,
        index: Option<&Index>,
        previous: &PinnedMetadata,
        current: &PinnedMetadata,
    ) -> Self {
        let empty = BTreeMap::new();
        let [before, after] = [previous, current].map(|m| m.run_image.as_ref().map_or(&empty, |r| &r.packages));
        let releases = releases_of(current);
        if self.run_image.is_some() && !(before.is_empty() && after.is_empty()) {
            return self.with_fixes(index, before, after, &releases);
        }
        self.with_fixes(index, &previous.packages, &current.packages, &releases)
    }

    /// The fixes' ids at the highest priority `at_least` or above, when any (what allows an
    /// expedited roll-out).
    pub fn fixes_at_least(&self, at_least: Priority) -> Vec<String> {
        let fixes = self.fixes.as_deref().unwrap_or_default();
        fixes.iter().filter(|f| f.priority.is_some_and(|p| p >= at_least)).map(|f| f.id.clone()).collect()
    }
}

#[cfg(test)]
mod tests;
