//! `[rollout] expedite`: whether a change's fixes let its actions skip the soak and the windows
//! (never the freeze, approvals or health gates), and the record of what allowed it: the records
//! (id, priority, file) and the data's source (URL, ETag, SHA-256). Only data from the configured
//! source over a verified connection ([`DataSource::unverified`] unset) expedites anything.

use serde::{Deserialize, Serialize};

use crate::vulns::{DataSource, Fix, Priority};

/// What let an action skip the soak and the windows: `{records: [{id, priority, file}], source:
/// {url, etag, sha256}}`. Empty (no records): not expedited.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Expedited {
    pub records: Vec<ExpeditedRecord>,
    /// Absent only on actions recorded before sources were (their ids alone were kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DataSource>,
}

/// One record that allowed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpeditedRecord {
    pub id: String,
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl Expedited {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records' ids, in order.
    pub fn ids(&self) -> Vec<String> {
        self.records.iter().map(|r| r.id.clone()).collect()
    }

    /// Actions recorded before this form kept a list of ids: read as records without priority or
    /// file, and no source.
    fn of_ids(ids: Vec<String>) -> Self {
        let records = ids.into_iter().map(|id| ExpeditedRecord { id, priority: None, file: None }).collect();
        Expedited { records, source: None }
    }
}

impl<'de> Deserialize<'de> for Expedited {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Stored {
            Ids(Vec<String>),
            Full {
                #[serde(default)]
                records: Vec<ExpeditedRecord>,
                #[serde(default)]
                source: Option<DataSource>,
            },
        }
        Ok(match Stored::deserialize(deserializer)? {
            Stored::Ids(ids) => Expedited::of_ids(ids),
            Stored::Full { records, source } => Expedited { records, source },
        })
    }
}

/// Whether a change is expedited.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Expedite {
    /// Off, no fixes, or none that high.
    #[default]
    No,
    /// Its actions skip the soak and the windows; recorded as this.
    Yes(Expedited),
    /// Fixes that high, but the data may not expedite (the ids, and why): the actions wait as
    /// any other, and the refusal is logged.
    Refused { ids: Vec<String>, why: String },
}

/// The fixes at priority `at_least` or above, in the fixes' order, with the data's `source`:
/// [`Expedite::Yes`] when there are any and the source is verified. `No` when `expedite` is off
/// (`None`), the change has no `fixes` (no vulnerability data, or nothing to match), or none of
/// its fixes is that high (a fix of unknown priority never qualifies; an `unknown` fix is not a
/// fix). A change whose source is not recorded, or not verified, is `Refused`.
pub fn expedite(at_least: Option<Priority>, fixes: Option<&[Fix]>, source: Option<&DataSource>) -> Expedite {
    let (Some(at_least), Some(fixes)) = (at_least, fixes) else { return Expedite::No };
    let records: Vec<ExpeditedRecord> = fixes
        .iter()
        .filter(|f| f.priority.is_some_and(|p| p >= at_least))
        .map(|f| ExpeditedRecord { id: f.id.clone(), priority: f.priority, file: f.file.clone() })
        .collect();
    if records.is_empty() {
        return Expedite::No;
    }
    let ids = records.iter().map(|r| r.id.clone()).collect();
    match source {
        None => Expedite::Refused { ids, why: "the vulnerability data's source is not recorded".into() },
        Some(DataSource { unverified: Some(why), .. }) => Expedite::Refused { ids, why: why.clone() },
        Some(source) => Expedite::Yes(Expedited { records, source: Some(source.clone()) }),
    }
}

/// One line for logs and alerts: `by CVE-2026-1 (critical, osv/cve/CVE-2026-1.json) from
/// https://m.example/… (ETag "v1", sha256 ab12…)`.
pub fn expedited_line(expedited: &Expedited) -> String {
    let records: Vec<String> = expedited
        .records
        .iter()
        .map(|r| {
            let priority = r.priority.map_or("unknown", Priority::as_str);
            let file = r.file.as_deref().map(|f| format!(", {f}")).unwrap_or_default();
            format!("{}{}{file})", crate::text::escape(&r.id), format_args!(" ({priority}"))
        })
        .collect();
    let mut line = format!("by {}", records.join(", "));
    if let Some(source) = &expedited.source {
        let mut from = vec![];
        if let Some(etag) = &source.etag {
            from.push(format!("ETag {etag}"));
        }
        if let Some(sha) = &source.sha256 {
            from.push(format!("sha256 {sha}"));
        }
        line.push_str(&format!(" from {} ({})", crate::text::escape(&source.url), from.join(", ")));
    }
    line
}

#[cfg(test)]
mod tests;
