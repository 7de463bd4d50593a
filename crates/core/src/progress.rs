//! What an action records of its progress while it runs, one record per kind: where a build was
//! placed, what a deploy wrote to each workload, what a gitops action committed. A later attempt
//! (after a restart) and the readers (`status`, the page) read it back.

use serde::{Serialize, Serializer};

use crate::deploy::DeployProgress;
use crate::gitops::CommitProgress;
use crate::plan::ActionKind;
use crate::pool::BuildProgress;

/// An action's progress record. Stored as the record's own JSON, untagged (the action's kind says
/// which record it is), with its keys sorted, as the ledger has always written it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A rebuild or a rebase: the pool its build runs in.
    Build(BuildProgress),
    Deploy(DeployProgress),
    Gitops(CommitProgress),
}

impl Progress {
    /// The stored record of an action of `kind`; none when it does not read as that kind's record
    /// (a record says what was seen, and the action goes on without one, as it always has).
    pub fn read(kind: ActionKind, value: serde_json::Value) -> Option<Progress> {
        match kind {
            ActionKind::Rebase | ActionKind::Rebuild => serde_json::from_value(value).ok().map(Progress::Build),
            ActionKind::Deploy => serde_json::from_value(value).ok().map(Progress::Deploy),
            ActionKind::Gitops => serde_json::from_value(value).ok().map(Progress::Gitops),
        }
    }

    /// As stored: a value, whose maps are sorted.
    pub fn to_value(&self) -> serde_json::Value {
        let value = match self {
            Progress::Build(p) => serde_json::to_value(p),
            Progress::Deploy(p) => serde_json::to_value(p),
            Progress::Gitops(p) => serde_json::to_value(p),
        };
        // Plain structs of strings, numbers and string-keyed maps always convert.
        value.unwrap_or_default()
    }

    pub fn build(&self) -> Option<&BuildProgress> {
        match self {
            Progress::Build(p) => Some(p),
            _ => None,
        }
    }

    pub fn deploy(&self) -> Option<&DeployProgress> {
        match self {
            Progress::Deploy(p) => Some(p),
            _ => None,
        }
    }

    pub fn gitops(&self) -> Option<&CommitProgress> {
        match self {
            Progress::Gitops(p) => Some(p),
            _ => None,
        }
    }
}

impl Serialize for Progress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind reads its own record, and writes it back as it was stored (keys sorted).
    #[test]
    fn records_read_by_kind_and_write_back_as_stored() {
        let placed = serde_json::json!({"pool": "linux", "queued": true});
        let read = Progress::read(ActionKind::Rebase, placed.clone()).unwrap();
        assert_eq!(read.build().map(|b| b.pool.as_str()), Some("linux"));
        assert_eq!(serde_json::to_string(&read).unwrap(), r#"{"pool":"linux","queued":true}"#);
        assert_eq!(Progress::read(ActionKind::Deploy, placed), None, "not a deploy's record");
        let deploy = serde_json::json!({"workloads": [], "started": true});
        assert_eq!(Progress::read(ActionKind::Deploy, deploy.clone()).unwrap().to_value(), deploy);
        let commit = serde_json::json!({"branch": "main", "files": ["a.yaml"], "written": {"z": "1", "a": "2"}});
        let read = Progress::read(ActionKind::Gitops, commit).unwrap();
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"{"branch":"main","files":["a.yaml"],"written":{"a":"2","z":"1"}}"#
        );
    }
}
