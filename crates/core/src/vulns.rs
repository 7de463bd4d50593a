//! Which security notices a base-image move fixes, exactly: Ubuntu's OSV records (USN and CVE
//! shapes) read into an [`Index`] by binary package name, the image's release told from its CNB
//! labels, and a record counted as fixed by a move when, before it, some binary the record lists
//! was below its fixed version and, after it, every such binary the new image has is at or above
//! it (Debian's version order, [`version`]). Pure: reading a mirror is the caller's.
//!
//! Files: [`version`] (the order), `record` (reading a record of either shape, bounded), `release`
//! (an image's release from its labels), `index` (the lean index and the fixes of a move),
//! [`openvex`] (what a move fixes as an OpenVEX document about a digest written).

use serde::{Deserialize, Serialize};

mod expedited;
mod index;
pub mod openvex;
mod record;
mod release;
#[cfg(test)]
mod tests;
pub mod version;

pub use expedited::{Expedited, ExpeditedRecord, expedited_line};
pub use index::Index;
pub use record::{MAX_AFFECTED, MAX_BINARIES, MAX_CVES, MAX_EVENTS, parse_record};
pub use release::release_of;

/// Ubuntu's priority of a notice, lowest first (`ubuntu_priority` of CVE records; a USN gives
/// none, and takes the highest of its CVEs' among the records the same move fixes).
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

/// A notice a move fixes: `{ "id", "cves": [...], "priority": "high"|…|null, "packages": [...],
/// "file", "modified", "ignored": [...] }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Fix {
    /// `USN-7000-1` or `CVE-2026-1111`.
    pub id: String,
    #[serde(default)]
    pub cves: Vec<String>,
    /// The record's own `ubuntu_priority`; a record without one (a USN) takes the highest of the
    /// records the same move fixes that are its CVEs (`priority_from` names them).
    pub priority: Option<Priority>,
    pub packages: Vec<FixedPackage>,
    /// The ids of the records the priority was taken from, when it is not the record's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priority_from: Vec<String>,
    /// The mirror's file the record was read from (as the mirror names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The record's `modified`, when it gives one (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
    /// Other copies of the record (the same id in other files) that were not used: one record per
    /// id is kept, the one with the newest `modified`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<RecordCopy>,
}

/// A copy of a record that was not used ([`Fix::ignored`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCopy {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
}

/// A record a move might fix that is not claimed: some platform's list did not show it fixed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownFix {
    pub id: String,
    pub priority: Option<Priority>,
    /// Why it is not claimed: `linux/arm64 is not fixed by the move`, a list cut at its cap, …
    pub reason: String,
}

/// Where the vulnerability data a verdict used came from, as recorded with what it allowed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DataSource {
    /// The configured source: a URL shown without its path or query (they may carry a token), or
    /// a local path.
    pub url: String,
    /// The download's `ETag`, when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The SHA-256 of the archive (a download or a local archive; of a directory, of its record
    /// files' names and bytes in the order read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why this data may not expedite a roll-out (not the configured source, not over a verified
    /// connection); `None`: it may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified: Option<String>,
    /// When the data was last known current (loaded, downloaded or confirmed unchanged) as of the
    /// match that used it: its age, as an OpenVEX document states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<chrono::DateTime<chrono::Utc>>,
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
    /// Its `modified` time, when given and readable: of two records with one id, the newer wins.
    pub modified: Option<chrono::DateTime<chrono::Utc>>,
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("not an OSV record: {0}")]
    Malformed(String),
}
