//! `[[gitops]] batch`: the changes that land within a target's window become one commit. A
//! target's newer action takes along the changes of the actions it superseded (their summaries
//! and fixes, in its plan) and the first one's deadline; its commit lists them all.

use chrono::{DateTime, Utc};

use crate::vulns::Fix;

/// An earlier change a batched gitops action's commit takes along.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchedChange {
    pub change_id: String,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<Fix>,
}

/// `batch` (of change `own`) takes along `older` (a change it supersedes) and `older_batch`, what
/// that one had taken along: oldest first, each change once, never its own.
pub fn absorb(batch: &mut Vec<BatchedChange>, own: &str, older: BatchedChange, older_batch: &[BatchedChange]) {
    let mut taken: Vec<BatchedChange> = older_batch.to_vec();
    taken.push(older);
    taken.append(batch);
    let mut seen = std::collections::BTreeSet::new();
    taken.retain(|c| c.change_id != own && seen.insert(c.change_id.clone()));
    *batch = taken;
}

/// When a batched action may start: the deadline of the first action its batch holds (the
/// earliest of the superseded actions' `inherited` ones), else `window` after `now`; never later
/// than that.
pub fn deadline(
    now: DateTime<Utc>,
    window: std::time::Duration,
    inherited: impl IntoIterator<Item = DateTime<Utc>>,
) -> DateTime<Utc> {
    let own = now + chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    inherited.into_iter().fold(own, std::cmp::min)
}

/// The fixes of every change of a batch, each id once (its first occurrence), sorted as a move's
/// are: priority highest first (unknown last), then id.
pub fn union_fixes<'a>(lists: impl IntoIterator<Item = &'a [Fix]>) -> Vec<Fix> {
    let mut out: Vec<Fix> = Vec::new();
    for fix in lists.into_iter().flatten() {
        if !out.iter().any(|f| f.id == fix.id) {
            out.push(fix.clone());
        }
    }
    out.sort_by(|a, b| b.priority.cmp(&a.priority).then_with(|| a.id.cmp(&b.id)));
    out
}

/// The commit message of change `change_id` (its `summary` and `fixes`) with the changes of
/// `batch`: [`super::commit_message`] when the batch is empty; else the subject says how many
/// changes it holds, a `Changes:` paragraph lists each (oldest first, its summary and id), the
/// fixes are the union of all of theirs, and a `Builder-Monitor-Change` trailer names each change.
pub fn batch_message(
    change_id: &str,
    summary: &str,
    fixes: &[Fix],
    batch: &[BatchedChange],
    images: &[(String, String)],
    reasons: &[String],
) -> String {
    if batch.is_empty() {
        return super::commit_message(summary, images, change_id, reasons, fixes);
    }
    let mut changes: Vec<(&str, &str)> = batch.iter().map(|c| (c.change_id.as_str(), c.summary.as_str())).collect();
    changes.push((change_id, summary));
    let all = union_fixes(batch.iter().map(|c| c.fixes.as_slice()).chain([fixes]));
    let subject = format!("{} changes: {summary}", changes.len());
    super::message(&subject, &changes, images, reasons, &all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitops::changes_in;
    use crate::vulns::Priority;

    fn fix(id: &str, priority: Option<Priority>) -> Fix {
        Fix { id: id.into(), priority, ..Fix::default() }
    }

    fn change(id: &str, fixes: Vec<Fix>) -> BatchedChange {
        BatchedChange { change_id: id.into(), summary: format!("run: {id}"), fixes }
    }

    #[test]
    fn a_newer_action_takes_the_older_ones_changes_oldest_first_each_once() {
        // b supersedes a; c supersedes b, which had taken a along.
        let mut b = Vec::new();
        absorb(&mut b, "cb", change("ca", vec![fix("USN-1", Some(Priority::Low))]), &[]);
        let mut c = Vec::new();
        absorb(&mut c, "cc", change("cb", Vec::new()), &b);
        let ids: Vec<&str> = c.iter().map(|x| x.change_id.as_str()).collect();
        assert_eq!(ids, ["ca", "cb"]);
        assert_eq!(c[0].fixes[0].id, "USN-1");
        // Taken again (a check that planned the same move again), or its own: still once, never its own.
        absorb(&mut c, "cc", change("cb", Vec::new()), &b);
        absorb(&mut c, "cc", change("cc", Vec::new()), &[]);
        let ids: Vec<&str> = c.iter().map(|x| x.change_id.as_str()).collect();
        assert_eq!(ids, ["ca", "cb"]);
    }

    #[test]
    fn the_deadline_is_the_first_actions() {
        let now = DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z").unwrap().to_utc();
        let hour = std::time::Duration::from_secs(3600);
        assert_eq!(deadline(now, hour, []), now + chrono::Duration::hours(1));
        let first = now + chrono::Duration::minutes(10);
        assert_eq!(deadline(now, hour, [first, now + chrono::Duration::minutes(50)]), first);
    }

    #[test]
    fn a_batch_message_names_every_change_and_the_union_of_their_fixes() {
        let a = change("ca", vec![fix("USN-1", Some(Priority::Low)), fix("USN-2", Some(Priority::High))]);
        let fixes = vec![fix("USN-2", Some(Priority::High)), fix("CVE-3", None)];
        let images = vec![("web".to_string(), "r/web@sha256:1".to_string())];
        let m = batch_message("cb", "run: cb", &fixes, std::slice::from_ref(&a), &images, &[]);
        assert!(
            m.starts_with("2 changes: run: cb\n\nChanges:\n- run: ca (ca)\n- run: cb (cb)\n\nweb: r/web@sha256:1\n"),
            "{m}"
        );
        assert_eq!(changes_in(&m), ["ca", "cb"]);
        assert!(m.ends_with("Builder-Monitor-Fixes: USN-2, USN-1, CVE-3\n"), "{m}");
        assert_eq!(m.matches("- USN-2").count(), 1, "{m}");
        // Without a batch: the one change's message, as before.
        assert_eq!(
            batch_message("ca", "run: ca", &a.fixes, &[], &images, &[]),
            crate::gitops::commit_message("run: ca", &images, "ca", &[], &a.fixes)
        );
    }
}
