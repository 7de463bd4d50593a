//! Which security notices a move fixes, on its change: each platform's package lists on both sides
//! matched against the vulnerability index for that platform's release, merged as package diffs
//! are (the preferred platform's, linux/amd64 else the first), or a note why nothing could be
//! matched.

use std::collections::BTreeMap;

use super::change::Change;
use super::model::{PinnedMetadata, PlatformMetadata};
use crate::packages::{Package, Packages};
use crate::vulns::{Fix, Index, Priority, Release, release_of};

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

/// The fixes of a move from `before` to `after` (platform → list on each side), each platform
/// matched for its release in `releases` (a lone release stands for every platform). `Ok` with the
/// preferred platform's fixes (linux/amd64, else the first matched), or why no platform could be.
pub fn fixes_of(
    index: &Index,
    before: &BTreeMap<String, Packages>,
    after: &BTreeMap<String, Packages>,
    releases: &BTreeMap<String, Release>,
) -> Result<Vec<Fix>, String> {
    if before.is_empty() && after.is_empty() {
        return Err("neither image has a package list".into());
    }
    let lone = (releases.len() == 1).then(|| releases.values().next()).flatten();
    let lone_before = (before.len() == 1).then(|| before.values().next()).flatten();
    let mut matched: BTreeMap<&str, Vec<Fix>> = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    let several = after.len() > 1;
    for (platform, now) in after {
        let prefixed = |note: String| if several { format!("{platform}: {note}") } else { note };
        let Some(release) = releases.get(platform).or(lone) else {
            notes.push(prefixed("the image names no Ubuntu release (distro labels or stack id)".into()));
            continue;
        };
        if !index.keeps(release) {
            notes.push(prefixed(format!("no vulnerability data of {} is loaded", release.0)));
            continue;
        }
        let then = before.get(platform).or(lone_before);
        match (versioned(then, "previous"), versioned(Some(now), "new")) {
            (Ok(b), Ok(a)) => {
                matched.insert(platform, index.fixes(release, &b, &a));
            }
            (Err(note), _) | (_, Err(note)) => notes.push(prefixed(note)),
        }
    }
    if after.is_empty() {
        notes.push("the new image has no package list".into());
    }
    match matched.get("linux/amd64").or_else(|| matched.values().next()) {
        Some(fixes) => Ok(fixes.clone()),
        None => Err(notes.join("; ")),
    }
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
            Ok(fixes) => (self.fixes, self.fixes_note) = (Some(fixes), None),
            Err(note) => (self.fixes, self.fixes_note) = (None, Some(note)),
        }
        self.fixes_source = index.source().cloned();
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
