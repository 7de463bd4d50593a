//! Which security notices a base-image move fixes, exactly: Ubuntu's OSV records (USN and CVE
//! shapes) read into an [`Index`] by binary package name, the image's release told from its CNB
//! labels, and a record counted as fixed by a move when, before it, some binary the record lists
//! was below its fixed version and, after it, every such binary the new image has is at or above
//! it (Debian's version order, [`version`]). Pure: reading a mirror is the caller's.
//!
//! SKELETON (lead, issue 43): the types and signatures below are the contract the loader
//! (`src/vulns/`) and the wiring build against; the bodies marked `unimplemented!` are filled in
//! by the core's own work.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::packages::Package;

pub mod version;

/// Ubuntu's priority of a notice, lowest first (`ubuntu_priority` of CVE records; a USN takes the
/// highest of its CVEs' when the index knows them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Negligible,
    Low,
    Medium,
    High,
    Critical,
}

impl Priority {
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Negligible => "negligible",
            Priority::Low => "low",
            Priority::Medium => "medium",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "negligible" => Priority::Negligible,
            "low" => Priority::Low,
            "medium" => Priority::Medium,
            "high" => Priority::High,
            "critical" => Priority::Critical,
            _ => return None,
        })
    }
}

/// One binary package a fix moved: its versions before and after the move.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FixedPackage {
    pub name: String,
    pub from: String,
    pub to: String,
}

/// A notice a move fixes: `{ "id", "cves": [...], "priority": "high"|…|null, "packages": [...] }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fix {
    /// `USN-7000-1` or `CVE-2026-1111`.
    pub id: String,
    #[serde(default)]
    pub cves: Vec<String>,
    pub priority: Option<Priority>,
    pub packages: Vec<FixedPackage>,
}

/// The OSV ecosystem of one Ubuntu release (`Ubuntu:22.04:LTS`): records of other ecosystems
/// (other releases, `Ubuntu:Pro:*`) never apply to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Release(pub String);

/// The release of an image from `io.buildpacks.base.distro.name`/`.version` (`ubuntu`, `22.04`),
/// else from its stack id (`io.buildpacks.stacks.jammy` = 22.04, `noble` = 24.04, …); `None` for
/// anything else.
pub fn release_of(distro_name: Option<&str>, distro_version: Option<&str>, stack_id: Option<&str>) -> Option<Release> {
    let _ = (distro_name, distro_version, stack_id);
    unimplemented!("issue 43: core")
}

/// One `affected[]` entry of a record, as far as matching needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affected {
    /// `Ubuntu:22.04:LTS`, `Ubuntu:Pro:22.04:LTS`, …
    pub ecosystem: String,
    /// The source package.
    pub source: String,
    /// The `fixed` event's version (of the source); `None`: not fixed in this release.
    pub fixed: Option<String>,
    /// The binaries the fix ships, with the version that fixes each.
    pub binaries: Vec<(String, String)>,
}

/// An OSV record (a USN or a CVE), as far as matching needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: String,
    /// The CVEs it names (a USN's `upstream`, `UBUNTU-` stripped; a CVE record names itself).
    pub cves: Vec<String>,
    /// The highest `ubuntu_priority` among its affected entries, when given.
    pub priority: Option<Priority>,
    pub affected: Vec<Affected>,
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("not an OSV record: {0}")]
    Malformed(String),
}

/// Reads one OSV record (either of Ubuntu's shapes: USN `binaries` as `[{binary_name,
/// binary_version}]`, CVE `binaries` as `[{name: version}]` with `ubuntu_priority`).
pub fn parse_record(json: &[u8]) -> Result<Record, RecordError> {
    let _ = json;
    unimplemented!("issue 43: core")
}

/// The records that apply to some releases, indexed by binary package name. Only what the given
/// releases need is kept: a record's entries of other ecosystems are dropped on insert.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Releases kept (empty: every `Ubuntu:*` release but `Pro`).
    releases: Vec<Release>,
    /// Binary name → (release, record number, fixed version of that binary).
    by_binary: BTreeMap<String, Vec<(u16, u32, String)>>,
    records: Vec<(String, Vec<String>, Option<Priority>)>,
}

impl Index {
    /// An empty index keeping only `releases`' entries.
    pub fn new(releases: Vec<Release>) -> Self {
        Index { releases, ..Index::default() }
    }

    /// Adds `record`'s entries of the kept releases; `false` when none applied (nothing kept).
    pub fn insert(&mut self, record: Record) -> bool {
        let _ = (&self.releases, &mut self.by_binary, &mut self.records, record);
        unimplemented!("issue 43: core")
    }

    /// Records kept.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records a move of `release` from `before` to `after` (one platform's binary packages)
    /// fixes, sorted by priority (highest first, unknown last) then id.
    pub fn fixes(&self, release: &Release, before: &[Package], after: &[Package]) -> Vec<Fix> {
        let _ = (release, before, after);
        unimplemented!("issue 43: core")
    }
}
