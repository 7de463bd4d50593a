//! What let an action skip the soak and the windows (`[rollout] expedite`), as actions and the
//! `action.expedited` event record it: the records (id, priority, file) and the data's source.
//! Here, below the events and the roll-out, so both can name it; `rollout::expedite` decides.

use serde::{Deserialize, Serialize};

use super::{DataSource, Priority};

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
