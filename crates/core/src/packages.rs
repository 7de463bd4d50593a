//! OS package lists of base images (the `io.paketo.stack.packages` label; CycloneDX, SPDX and Syft
//! documents of a CNB base-image SBOM layer) and the diff of two of them. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::text::escape;

/// The Paketo stack label: a JSON array of `{name, version, arch, source, summary}`.
pub const PAKETO_PACKAGES: &str = "io.paketo.stack.packages";
/// The CNB base-image label naming the diffID of the layer that holds `/cnb/sbom/bom.<ext>.json`.
pub const BASE_SBOM: &str = "io.buildpacks.base.sbom";
/// Most entries of a package list read per image (real run images: ~100, full build images:
/// ~700). Each pin keeps its lists in the ledger, and the Kubernetes ledger is one ConfigMap
/// (1 MiB) per watch. A longer list is cut here: its read stops at entry 5,001, the rest unread,
/// and the list keeps the first 5,000 entries' packages, marked cut (`cut_at`).
pub const MAX_PACKAGES: usize = 5_000;

/// Where a package list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Source {
    #[serde(rename = "io.paketo.stack.packages")]
    PaketoLabel,
    #[serde(rename = "sbom:cyclonedx")]
    CycloneDx,
    #[serde(rename = "sbom:spdx")]
    Spdx,
    #[serde(rename = "sbom:syft")]
    Syft,
}

impl Source {
    /// The SBOM formats, in the order one is preferred when a layer holds several.
    pub const SBOM: [Source; 3] = [Source::CycloneDx, Source::Spdx, Source::Syft];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::PaketoLabel => PAKETO_PACKAGES,
            Source::CycloneDx => "sbom:cyclonedx",
            Source::Spdx => "sbom:spdx",
            Source::Syft => "sbom:syft",
        }
    }

    /// The SBOM format of a file in an SBOM layer (`cnb/sbom/bom.cdx.json`, with or without a
    /// leading `/` or `./`).
    pub fn of_sbom_path(path: &str) -> Option<Source> {
        let path = path.trim_start_matches("./").trim_start_matches('/');
        match path {
            "cnb/sbom/bom.cdx.json" => Some(Source::CycloneDx),
            "cnb/sbom/bom.spdx.json" => Some(Source::Spdx),
            "cnb/sbom/bom.syft.json" => Some(Source::Syft),
            _ => None,
        }
    }
}

/// One OS package.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Package {
    pub name: String,
    /// When the list holds it (Paketo's label; an SBOM's purl `arch=` qualifier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default)]
    pub version: String,
}

/// What is known about the packages of one platform image, as kept with its pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Packages {
    /// Sorted by name and arch, one entry per (name, arch).
    Listed {
        source: Source,
        packages: Vec<Package>,
        /// The list went on past [`MAX_PACKAGES`] entries: only the packages of its first
        /// `cut_at` entries are here, and packages beyond them are not compared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut_at: Option<usize>,
    },
    /// The image names a list that could not be read, and why.
    Unreadable { note: String },
}

impl Packages {
    pub fn unreadable(note: impl Into<String>) -> Self {
        Packages::Unreadable { note: note.into() }
    }

    /// A parsed list, or why there is none.
    pub fn from_result(source: Source, parsed: Result<PackageList, String>) -> Self {
        match parsed {
            Ok(PackageList { packages, cut_at }) => Packages::Listed { source, packages, cut_at },
            Err(note) => Packages::Unreadable { note },
        }
    }

    /// How many entries were read when the list was cut at [`MAX_PACKAGES`].
    pub fn cut_at(&self) -> Option<usize> {
        match self {
            Packages::Listed { cut_at, .. } => *cut_at,
            Packages::Unreadable { .. } => None,
        }
    }
}

/// A package list as read: its packages, and where it was cut when it went on past the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageList {
    pub packages: Vec<Package>,
    /// Entries read before the read stopped ([`MAX_PACKAGES`]), when the list had more.
    pub cut_at: Option<usize>,
}

/// The note a list cut at `cut_at` entries gives, wherever it is used: `image` names whose list
/// it is (a reference, or `the new image` with its platform).
pub fn cut_note(image: &str, cut_at: usize) -> String {
    format!(
        "the package list of {} was cut at {cut_at} entries (the most read of a list): packages beyond them are not compared",
        escape(image)
    )
}

mod parse;

pub use parse::{Lookup, MAX_FIELD_BYTES, lookup, parse_paketo_label, parse_sbom, parse_sbom_from};

// ---- the diff ---------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PackageChange {
    pub name: String,
    /// Only when the name is listed for several architectures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PackageVersion {
    pub name: String,
    /// Only when the name is listed for several architectures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    pub version: String,
}

/// The `change.packages` object: what moved between two package lists, each part sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageDiff {
    pub source: Source,
    #[serde(default)]
    pub changed: Vec<PackageChange>,
    #[serde(default)]
    pub added: Vec<PackageVersion>,
    #[serde(default)]
    pub removed: Vec<PackageVersion>,
    /// Each platform's diff, when the platforms' diffs differ (the top level is then the preferred
    /// platform's: linux/amd64, else the first).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<String, PackageDiff>,
}

impl PackageDiff {
    /// Whether nothing moved.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }

    /// The name of every package that moved, on any platform.
    pub fn names(&self) -> BTreeSet<&str> {
        let mut names: BTreeSet<&str> = self.changed.iter().map(|c| c.name.as_str()).collect();
        names.extend(self.added.iter().chain(&self.removed).map(|p| p.name.as_str()));
        for diff in self.platforms.values() {
            names.extend(diff.names());
        }
        names
    }

    /// Each move for people, upgrades first: `openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16`,
    /// `tzdata 2024a added`, `libfoo 1.0 removed` (registry text escaped).
    pub fn lines(&self) -> Vec<String> {
        let name = |n: &str, arch: &Option<String>| match arch {
            Some(a) => format!("{}:{}", escape(n), escape(a)),
            None => escape(n).into_owned(),
        };
        let changed =
            self.changed.iter().map(|c| format!("{} {} → {}", name(&c.name, &c.arch), escape(&c.from), escape(&c.to)));
        let added = self.added.iter().map(|p| format!("{} {} added", name(&p.name, &p.arch), escape(&p.version)));
        let removed = self.removed.iter().map(|p| format!("{} {} removed", name(&p.name, &p.arch), escape(&p.version)));
        changed.chain(added).chain(removed).collect()
    }

    /// At most `shown` moves for a summary line: `openssl 1 → 2, libssl3 1 → 2; 2 more`.
    pub fn brief(&self, shown: usize) -> String {
        let lines = self.lines();
        if lines.is_empty() {
            return "no OS package changed".into();
        }
        let mut out = lines.iter().take(shown).cloned().collect::<Vec<_>>().join(", ");
        if lines.len() > shown {
            let _ = write!(out, "; {} more", lines.len() - shown);
        }
        out
    }
}

impl PackageDiff {
    /// An aligned table for people (`diff`, Slack), at most `rows` moves and a `… N more` line:
    /// `package  from  to`, a `–` for the missing side of an addition or removal.
    pub fn table(&self, rows: usize) -> String {
        let name = |n: &str, arch: &Option<String>| match arch {
            Some(a) => format!("{}:{}", escape(n), escape(a)),
            None => escape(n).into_owned(),
        };
        let dash = || "–".to_string();
        let mut lines: Vec<[String; 3]> = vec![["package".into(), "from".into(), "to".into()]];
        lines.extend(
            self.changed.iter().map(|c| [name(&c.name, &c.arch), escape(&c.from).into(), escape(&c.to).into()]),
        );
        lines.extend(self.added.iter().map(|p| [name(&p.name, &p.arch), dash(), escape(&p.version).into()]));
        lines.extend(self.removed.iter().map(|p| [name(&p.name, &p.arch), escape(&p.version).into(), dash()]));
        if lines.len() == 1 {
            return "no OS package changed".into();
        }
        let more = lines.len().saturating_sub(rows + 1);
        lines.truncate(rows + 1);
        let width = |i: usize| lines.iter().map(|l| l[i].chars().count()).max().unwrap_or(0);
        let (w0, w1) = (width(0), width(1));
        let mut out: Vec<String> =
            lines.iter().map(|[a, b, c]| format!("{a:<w0$}  {b:<w1$}  {c}").trim_end().to_string()).collect();
        if more > 0 {
            out.push(format!("… {more} more"));
        }
        out.join("\n")
    }
}

/// The diff of two lists of one platform, or why there is none. A package missing from a cut
/// list may lie beyond its cut: one not in a cut new list is not called removed, one not in a cut
/// old list not called added (the notes of the cut say so).
pub fn diff(before: &Packages, after: &Packages) -> Result<PackageDiff, String> {
    let (before_source, before_list, after_source, after_list) = match (before, after) {
        (Packages::Listed { source: bs, packages: b, .. }, Packages::Listed { source: as_, packages: a, .. }) => {
            (*bs, b, *as_, a)
        }
        (Packages::Unreadable { note: then }, Packages::Unreadable { note: now }) => {
            return Err(format!("previous image: {then}; new image: {now}"));
        }
        (Packages::Unreadable { note }, _) => return Err(format!("previous image: {note}")),
        (_, Packages::Unreadable { note }) => return Err(format!("new image: {note}")),
    };
    if before_source != after_source {
        return Err(format!(
            "the package lists come from different sources ({} before, {} now)",
            before_source.as_str(),
            after_source.as_str()
        ));
    }
    let keyed = |list: &[Package]| -> BTreeMap<(String, Option<String>), String> {
        list.iter().map(|p| ((p.name.clone(), p.arch.clone()), p.version.clone())).collect()
    };
    let (old, new) = (keyed(before_list), keyed(after_list));
    // Names listed under more than one arch keep their arch in the diff, so entries stay distinct.
    let mut arches: BTreeMap<&str, BTreeSet<&Option<String>>> = BTreeMap::new();
    for (name, arch) in old.keys().chain(new.keys()) {
        arches.entry(name).or_default().insert(arch);
    }
    let shown_arch = |name: &str, arch: &Option<String>| arch.clone().filter(|_| arches[name].len() > 1);
    let mut out = PackageDiff {
        source: after_source,
        changed: vec![],
        added: vec![],
        removed: vec![],
        platforms: BTreeMap::new(),
    };
    for ((name, arch), version) in &new {
        match old.get(&(name.clone(), arch.clone())) {
            Some(from) if from == version => {}
            Some(from) => out.changed.push(PackageChange {
                name: name.clone(),
                arch: shown_arch(name, arch),
                from: from.clone(),
                to: version.clone(),
            }),
            None if before.cut_at().is_some() => {}
            None => out.added.push(PackageVersion {
                name: name.clone(),
                arch: shown_arch(name, arch),
                version: version.clone(),
            }),
        }
    }
    for ((name, arch), version) in old.iter().filter(|_| after.cut_at().is_none()) {
        if !new.contains_key(&(name.clone(), arch.clone())) {
            out.removed.push(PackageVersion {
                name: name.clone(),
                arch: shown_arch(name, arch),
                version: version.clone(),
            });
        }
    }
    Ok(out)
}

/// The package diff of a move of a multi-platform image (platform → list on each side): each
/// platform in both is diffed; equal diffs merge into one, else the preferred platform's is the top
/// level and every platform's is under `platforms`. The note says why a platform has no diff, and
/// names each side (`names`: before, after) whose list was cut; both are `None` when neither side
/// has any package information.
pub fn diff_platforms(
    before: &BTreeMap<String, Packages>,
    after: &BTreeMap<String, Packages>,
    names: (&str, &str),
) -> (Option<PackageDiff>, Option<String>) {
    if before.is_empty() && after.is_empty() {
        return (None, None);
    }
    let mut diffs: BTreeMap<String, PackageDiff> = BTreeMap::new();
    let mut notes = Vec::new();
    let several = after.len() > 1 || before.len() > 1;
    let prefixed = |platform: &str, note: String| if several { format!("{platform}: {note}") } else { note };
    for (platform, now) in after {
        for (name, list) in [(names.0, before.get(platform)), (names.1, Some(now))] {
            if let Some(cut_at) = list.and_then(Packages::cut_at) {
                notes.push(prefixed(platform, cut_note(name, cut_at)));
            }
        }
        match before.get(platform) {
            Some(then) => match diff(then, now) {
                Ok(d) => {
                    diffs.insert(platform.clone(), d);
                }
                Err(note) => notes.push(prefixed(platform, note)),
            },
            None => notes.push(prefixed(platform, "no package list was recorded for the previous image".into())),
        }
    }
    for platform in before.keys().filter(|p| !after.contains_key(*p)) {
        notes.push(prefixed(platform, "the new image has no package list".into()));
    }
    // One platform's list needs both sides: a lone side says nothing about a move.
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let mut values = diffs.values();
    let Some(first) = values.next() else { return (None, note) };
    if values.all(|d| d == first) {
        return (Some(first.clone()), note);
    }
    let preferred = diffs.get("linux/amd64").unwrap_or(first).clone();
    let mut merged = preferred;
    merged.platforms = diffs;
    (Some(merged), note)
}

#[cfg(test)]
mod tests;
