//! Which security notices a base-image move fixes, exactly: Ubuntu's OSV records (USN and CVE
//! shapes) read into an [`Index`] by binary package name, the image's release told from its CNB
//! labels, and a record counted as fixed by a move when, before it, some binary the record lists
//! was below its fixed version and, after it, every such binary the new image has is at or above
//! it (Debian's version order, [`version`]). Pure: reading a mirror is the caller's.
//!
//! Files: [`version`] (the order), `record` (reading a record of either shape, bounded), `release`
//! (an image's release from its labels), `index` (the lean index and the fixes of a move).

use serde::{Deserialize, Serialize};

mod index;
mod record;
mod release;
#[cfg(test)]
mod tests;
pub mod version;

pub use index::Index;
pub use record::{MAX_AFFECTED, MAX_BINARIES, MAX_CVES, MAX_EVENTS, parse_record};
pub use release::release_of;

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

/// One `affected[]` entry of a record, as far as matching needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Affected {
    /// `Ubuntu:22.04:LTS`, `Ubuntu:Pro:22.04:LTS`, …
    pub ecosystem: String,
    /// The source package.
    pub source: String,
    /// The `fixed` event's version (of the source); `None`: not fixed in this release.
    pub fixed: Option<String>,
    /// The binaries the fix ships, with the version that fixes each (empty: none known, never
    /// fixed).
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
