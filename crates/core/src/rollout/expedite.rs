//! `[rollout] expedite`: whether a change's fixes let its actions skip the soak and the windows
//! (never the freeze, approvals or health gates), and the record of what allowed it: the records
//! (id, priority, file) and the data's source (URL, ETag, SHA-256). Only data from the configured
//! source over a verified connection ([`DataSource::unverified`] unset) expedites anything.

use crate::vulns::{DataSource, Fix, Priority};
pub use crate::vulns::{Expedited, ExpeditedRecord, expedited_line};

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

#[cfg(test)]
mod tests;
