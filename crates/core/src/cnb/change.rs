//! The change object of `builder.changed` and `run_image.changed` events: what kind of move it is,
//! why and what moved; the one line people read is its explanation (`explain.rs`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::packages::{self, PackageDiff, Packages};
use crate::text::escape;
use crate::vulns::{DataSource, Fix, UnknownFix};

/// The cheapest correct reaction to a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Nothing that affects app images moved.
    None,
    /// Only the run image / base layers moved: app images can be rebased.
    Rebase,
    /// Metadata missing or unreadable on either side: policies decide (default rebuild).
    Unknown,
    /// Buildpacks, lifecycle, order or stack identity changed: app images must be rebuilt.
    Rebuild,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::None => "none",
            ChangeKind::Rebase => "rebase",
            ChangeKind::Rebuild => "rebuild",
            ChangeKind::Unknown => "unknown",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "none" => ChangeKind::None,
            "rebase" => ChangeKind::Rebase,
            "rebuild" => ChangeKind::Rebuild,
            "unknown" => ChangeKind::Unknown,
            _ => return None,
        })
    }
}

/// Why a change is what it is, in kpack's vocabulary where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Reason {
    /// Base layers (everything but buildpack layers) or the run image changed.
    Stack,
    /// A buildpack was added, removed, changed version or was republished (new layer, same version).
    Buildpack,
    /// The lifecycle version changed.
    Lifecycle,
    /// The detection order changed.
    Order,
    /// Stack id, target (os/arch/variant/distro), mixins or the CNB user/group changed.
    StackId,
    /// The run image itself moved (always with STACK).
    RunImage,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BuildpackChange {
    pub id: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Same version, different layer: the buildpack was republished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub republished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromTo {
    pub from: Option<String>,
    pub to: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlatformChange {
    pub kind: ChangeKind,
    pub reasons: Vec<Reason>,
}

/// Package moves a summary line names before `; N more`.
pub(super) const SUMMARY_PACKAGES: usize = 3;

/// The `change` object of `builder.changed` and `run_image.changed` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    #[serde(default)]
    pub reasons: Vec<Reason>,
    #[serde(default)]
    pub buildpacks: Vec<BuildpackChange>,
    #[serde(default)]
    pub lifecycle: Option<FromTo>,
    #[serde(default)]
    pub run_image: Option<FromTo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<FromTo>,
    /// The OS release a run image moved between (`ubuntu 22.04` → `ubuntu 24.04`), from its
    /// `io.buildpacks.base.distro.*` labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distro: Option<FromTo>,
    /// Per-platform kinds and reasons, when the builder has platforms.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<String, PlatformChange>,
    /// Why the kind is `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Which OS packages moved, when the base or run image moved and both sides list them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<PackageDiff>,
    /// Why a base move has no (or only a partial) package diff: a list unreadable or cut at its
    /// cap, a side without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_note: Option<String>,
    /// The security notices the move fixes (`cnb::fixes`), when vulnerability data is configured
    /// and both sides list versioned packages: `[]` when they matched nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixes: Option<Vec<Fix>>,
    /// Why vulnerability data could not be matched to the move (a side without a list, lists with
    /// names only, an image of no known release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixes_note: Option<String>,
    /// Notices some platform's list shows fixed that are not claimed (another platform does not
    /// show them fixed, a list was cut at its cap, a platform could not be matched), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixes_unknown: Vec<UnknownFix>,
    /// Where the vulnerability data of `fixes` came from (URL or path, ETag, SHA-256), and why
    /// it may not expedite a roll-out when it may not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixes_source: Option<DataSource>,
    /// The OSV ecosystem the new image's fixes were matched in (`Ubuntu:22.04:LTS`), when one for
    /// all its platforms: the `distro` of the package purls an OpenVEX document names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixes_release: Option<String>,
    /// What was left unread or not kept on the new side (an index cut to `max_platforms`, parts of
    /// a pin over its ledger budget), so the change was decided on less than the whole image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Change {
    pub(super) fn of_kind(kind: ChangeKind) -> Self {
        Change {
            kind,
            reasons: Vec::new(),
            buildpacks: Vec::new(),
            lifecycle: None,
            run_image: None,
            stack_id: None,
            distro: None,
            platforms: BTreeMap::new(),
            note: None,
            packages: None,
            packages_note: None,
            fixes: None,
            fixes_note: None,
            fixes_unknown: Vec::new(),
            fixes_source: None,
            fixes_release: None,
            notes: Vec::new(),
        }
    }

    /// Adds the package diff of a base move from `before` to `after` (platform → list); `names`
    /// (before, after) name the images in the note of a cut list.
    pub fn with_packages(
        mut self,
        before: &BTreeMap<String, Packages>,
        after: &BTreeMap<String, Packages>,
        names: (&str, &str),
    ) -> Self {
        (self.packages, self.packages_note) = packages::diff_platforms(before, after, names);
        self
    }

    /// A move whose meaning cannot be told, and why.
    pub fn unknown(note: impl Into<String>) -> Self {
        let mut change = Change::of_kind(ChangeKind::Unknown);
        change.note = Some(note.into());
        change
    }

    /// A run image move: app images on it can be rebased.
    pub fn run_image_moved(from: String, to: String) -> Self {
        let mut change = Change::of_kind(ChangeKind::Rebase);
        change.reasons = vec![Reason::Stack, Reason::RunImage];
        change.run_image = Some(FromTo { from: Some(from), to: Some(to) });
        change
    }
}

/// `run image sha256:3681161cd3cf… → sha256:1a772728b0a5… (registry.example/cnb/run)`: digests
/// short, the repository named once when both sides share it (a summary line stays readable).
pub(super) fn run_image_move(from: &str, to: &str) -> String {
    let short = crate::text::short_reference;
    match (from.split_once('@'), to.split_once('@')) {
        (Some((repo, a)), Some((same, b))) if repo == same => {
            format!("run image {} → {} ({repo})", short(a), short(b))
        }
        _ => format!("run image {} → {}", short(from), short(to)),
    }
}

/// Notice ids a summary line names before `, N more`.
pub const SUMMARY_FIXES: usize = 1;

/// The fixes for a summary line: `fixes USN-7000-1 (high), 2 more`; `fixes no known notice`
/// for `[]`; `None` when there is no `fixes` field.
pub fn fixes_brief(fixes: Option<&[Fix]>) -> Option<String> {
    let fixes = fixes?;
    if fixes.is_empty() {
        return Some("fixes no known notice".into());
    }
    let mut out = String::from("fixes ");
    let shown: Vec<String> = fixes.iter().take(SUMMARY_FIXES).map(fix_label).collect();
    out.push_str(&shown.join(", "));
    if fixes.len() > SUMMARY_FIXES {
        let _ = write!(out, ", {} more", fixes.len() - SUMMARY_FIXES);
    }
    Some(out)
}

/// `USN-7000-1 (high)`, or the bare id without a priority (registry-free text, still escaped: the
/// ids come from the operator's mirror).
pub fn fix_label(fix: &Fix) -> String {
    match fix.priority {
        Some(p) => format!("{} ({})", escape(&fix.id), p.as_str()),
        None => escape(&fix.id).into_owned(),
    }
}

/// A fix not claimed: `USN-7000-1 (high) unknown: linux/arm64 is not shown fixed by the move`.
pub fn unknown_fix_line(fix: &UnknownFix) -> String {
    let label = match fix.priority {
        Some(p) => format!("{} ({})", escape(&fix.id), p.as_str()),
        None => escape(&fix.id).into_owned(),
    };
    format!("{label} unknown: {}", escape(&fix.reason))
}

/// Where a fix's record came from, for `plan --explain` and `diff`: `USN-7000-1 from
/// osv/usn/USN-7000-1.json (modified 2026-02-01T00:00:00Z); not used: old/USN-7000-1.json
/// (modified 2026-01-01T00:00:00Z)` (the copies of its id that were not used, when any).
pub fn fix_origin_line(fix: &Fix) -> String {
    let at = |modified: &Option<String>| match modified {
        Some(m) => format!(" (modified {})", escape(m)),
        None => " (no modified)".to_string(),
    };
    let file = fix.file.as_deref().map_or_else(|| "?".to_string(), |f| escape(f).into_owned());
    let mut line = format!("{} from {file}{}", escape(&fix.id), at(&fix.modified));
    if !fix.priority_from.is_empty() {
        let from: Vec<String> = fix.priority_from.iter().map(|id| escape(id).into_owned()).collect();
        let _ = write!(line, ", priority from {}", from.join(", "));
    }
    if !fix.ignored.is_empty() {
        let copies: Vec<String> =
            fix.ignored.iter().map(|c| format!("{}{}", escape(&c.file), at(&c.modified))).collect();
        let _ = write!(line, "; not used: {}", copies.join(", "));
    }
    line
}

/// One line per fix for a commit body or a page: `USN-7000-1 (high): CVE-2026-1111, CVE-2026-1112`.
pub fn fix_line(fix: &Fix) -> String {
    if fix.cves.is_empty() {
        return fix_label(fix);
    }
    let cves: Vec<String> = fix.cves.iter().map(|c| escape(c).into_owned()).collect();
    format!("{}: {}", fix_label(fix), cves.join(", "))
}
