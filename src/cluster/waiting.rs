//! Why the actions that need the Kubernetes cluster wait for it, as the daemon last found it:
//! kept in its state directory for `status` and the page, which then need not ask the cluster
//! themselves (`status --cluster` still does).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file in the state directory `dir` that says why actions wait for the cluster.
pub fn note_file(dir: &Path) -> PathBuf {
    dir.join("cluster-wait.json")
}

/// What [`note_file`] holds.
#[derive(Serialize, Deserialize)]
struct Note {
    /// Why, as the daemon logged it (no credential: the cluster's error or the missing setting).
    why: String,
    /// When the daemon found it (RFC 3339).
    since: String,
}

/// Records that the cluster's actions wait, and why (`None`: they no longer wait, the note goes).
/// A note that cannot be written is logged, never fatal: `status` then asks nothing and shows none.
pub fn note(dir: &Path, why: Option<&str>, now: chrono::DateTime<chrono::Utc>) {
    let path = note_file(dir);
    let Some(why) = why else {
        let _ = std::fs::remove_file(&path);
        return;
    };
    let note = Note { why: why.to_string(), since: builder_monitor_core::schedule::timestamp(now) };
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, serde_json::to_vec(&note).unwrap_or_default()));
    if let Err(error) = written {
        tracing::debug!(path = %path.display(), error = %error, "cannot keep why actions wait for the cluster, for `status`");
    }
}

/// Why the actions that need the cluster wait, as the daemon last noted it in `dir` (none: it
/// noted no wait, or the cluster answered since).
pub fn noted(dir: &Path) -> Option<String> {
    let text = std::fs::read(note_file(dir)).ok()?;
    serde_json::from_slice::<Note>(&text).ok().map(|n| n.why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_reads_back_until_the_cluster_answers() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(noted(dir.path()), None);
        note(dir.path(), Some("the Kubernetes cluster of [kubernetes] does not answer"), chrono::Utc::now());
        assert_eq!(noted(dir.path()).as_deref(), Some("the Kubernetes cluster of [kubernetes] does not answer"));
        note(dir.path(), None, chrono::Utc::now());
        assert_eq!(noted(dir.path()), None);
        std::fs::write(note_file(dir.path()), b"{not json").unwrap();
        assert_eq!(noted(dir.path()), None, "a damaged note shows nothing");
    }
}
