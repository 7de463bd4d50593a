//! An action's progress record in the Kubernetes ledger: kept in its row as the JSON it was
//! written as, and decoded once, when the entry is read, by the row's kind (`ActionRow`'s
//! deserialization), so the rest of the ledger reads it typed.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::progress::Progress;

/// An action's progress record as its entry stores it, and what it reads as for the action's
/// kind (decoded once, when the entry is read). Written back as it was stored, so an entry's bytes
/// stay the same whether or not its record reads; one that does not is read as none (see
/// [`Progress::read`]).
#[derive(Debug, Clone)]
pub(super) struct StoredProgress {
    stored: serde_json::Value,
    read: Option<Progress>,
}

impl StoredProgress {
    /// `progress`, recorded now by an action of `kind`.
    pub(super) fn of(kind: ActionKind, progress: &Progress) -> Self {
        let mut stored = StoredProgress { stored: progress.to_value(), read: None };
        stored.decode(kind);
        stored
    }

    pub(super) fn decode(&mut self, kind: ActionKind) {
        self.read = Progress::read(kind, self.stored.clone());
    }

    /// What it reads as.
    pub(super) fn read(&self) -> Option<&Progress> {
        self.read.as_ref()
    }
}

impl Serialize for StoredProgress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.stored.serialize(s)
    }
}

impl<'de> Deserialize<'de> for StoredProgress {
    /// Not decoded yet: the row that holds it decodes it by its kind.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(StoredProgress { stored: serde_json::Value::deserialize(d)?, read: None })
    }
}

impl StoredProgress {
    /// What it reads as, taken.
    pub(super) fn into_read(self) -> Option<Progress> {
        self.read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record that reads is typed by its kind; one that does not (or is another kind's) reads as
    /// none; both are written back byte for byte.
    #[test]
    fn a_record_reads_by_its_kind_and_is_written_back_as_stored() {
        let cases = [
            (ActionKind::Rebuild, r#"{"pool":"arm","queued":true}"#, true),
            (ActionKind::Deploy, r#"{"pool":"arm","queued":true}"#, false),
            (ActionKind::Rebase, r#"{"pool":7,"zz":[1,2]}"#, false),
            (ActionKind::Gitops, r#"[1,"x"]"#, false),
        ];
        for (kind, text, reads) in cases {
            let mut stored: StoredProgress = serde_json::from_str(text).unwrap();
            assert!(stored.read().is_none(), "decoded only by its row's kind");
            stored.decode(kind);
            assert_eq!(stored.read().is_some(), reads, "{kind:?} {text}");
            assert_eq!(serde_json::to_string(&stored).unwrap(), text);
        }
        let placed = stored_build();
        assert_eq!(placed.read().and_then(Progress::build).map(|b| b.pool.as_str()), Some("linux"));
        assert_eq!(serde_json::to_string(&placed).unwrap(), r#"{"pool":"linux"}"#);
    }

    fn stored_build() -> StoredProgress {
        let progress = Progress::read(ActionKind::Rebuild, serde_json::json!({"pool": "linux", "queued": false}));
        StoredProgress::of(ActionKind::Rebuild, &progress.unwrap())
    }
}
