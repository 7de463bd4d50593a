//! `[[gitops]] batch`: the changes that land within a target's window become one commit. A
//! target's newer action takes along the changes of the actions it superseded (their summaries
//! and fixes, in its plan) and the first one's deadline; its commit lists them all.

use chrono::{DateTime, Utc};

use crate::plan::{BatchedChange, GitopsPlan};
use crate::vulns::Fix;

/// `plan` (of change `own`) takes along `older` (of change `older_change`, which it supersedes)
/// and what `older` had taken along: oldest first, each change once, never its own.
pub fn absorb(plan: &mut GitopsPlan, own: &str, older_change: &str, older: &GitopsPlan) {
    let mut taken: Vec<BatchedChange> = older.batch.clone();
    taken.push(BatchedChange {
        change_id: older_change.to_string(),
        summary: older.summary.clone(),
        fixes: older.fixes.clone(),
    });
    taken.extend(std::mem::take(&mut plan.batch));
    let mut seen = std::collections::BTreeSet::new();
    taken.retain(|c| c.change_id != own && seen.insert(c.change_id.clone()));
    plan.batch = taken;
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

/// The commit message of change `change_id`'s plan: [`super::commit_message`] when it batches
/// nothing; else the subject says how many changes it holds, a `Changes:` paragraph lists each
/// (oldest first, its summary and id), the fixes are the union of all of theirs, and a
/// `Builder-Monitor-Change` trailer names each change.
pub fn batch_message(plan: &GitopsPlan, change_id: &str, images: &[(String, String)], reasons: &[String]) -> String {
    if plan.batch.is_empty() {
        return super::commit_message(&plan.summary, images, change_id, reasons, &plan.fixes);
    }
    let mut changes: Vec<(&str, &str)> =
        plan.batch.iter().map(|c| (c.change_id.as_str(), c.summary.as_str())).collect();
    changes.push((change_id, plan.summary.as_str()));
    let fixes = union_fixes(plan.batch.iter().map(|c| c.fixes.as_slice()).chain([plan.fixes.as_slice()]));
    let subject = format!("{} changes: {}", changes.len(), plan.summary);
    super::message(&subject, &changes, images, reasons, &fixes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitops::changes_in;
    use crate::vulns::Priority;

    fn fix(id: &str, priority: Option<Priority>) -> Fix {
        Fix { id: id.into(), cves: Vec::new(), priority, packages: Vec::new() }
    }

    fn plan(summary: &str, fixes: Vec<Fix>) -> GitopsPlan {
        GitopsPlan { target: "fleet".into(), summary: summary.into(), fixes, batch: Vec::new() }
    }

    #[test]
    fn a_newer_action_takes_the_older_ones_changes_oldest_first_each_once() {
        let a = plan("run: a", vec![fix("USN-1", Some(Priority::Low))]);
        let mut b = plan("run: b", Vec::new());
        absorb(&mut b, "cb", "ca", &a);
        let mut c = plan("run: c", vec![fix("USN-2", Some(Priority::High))]);
        absorb(&mut c, "cc", "cb", &b);
        let ids: Vec<&str> = c.batch.iter().map(|x| x.change_id.as_str()).collect();
        assert_eq!(ids, ["ca", "cb"]);
        // Recorded twice (a check that planned the same move again): still once, never its own.
        absorb(&mut c, "cc", "cb", &b);
        let mut again = c.clone();
        absorb(&mut again, "cc", "cc", &plan("run: c", Vec::new()));
        let ids: Vec<&str> = again.batch.iter().map(|x| x.change_id.as_str()).collect();
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
        let a = plan("run: a", vec![fix("USN-1", Some(Priority::Low)), fix("USN-2", Some(Priority::High))]);
        let mut b = plan("run: b", vec![fix("USN-2", Some(Priority::High)), fix("CVE-3", None)]);
        absorb(&mut b, "cb", "ca", &a);
        let images = vec![("web".to_string(), "r/web@sha256:1".to_string())];
        let m = batch_message(&b, "cb", &images, &[]);
        assert!(
            m.starts_with("2 changes: run: b\n\nChanges:\n- run: a (ca)\n- run: b (cb)\n\nweb: r/web@sha256:1\n"),
            "{m}"
        );
        assert_eq!(changes_in(&m), ["ca", "cb"]);
        assert!(m.ends_with("Builder-Monitor-Fixes: USN-2, USN-1, CVE-3\n"), "{m}");
        assert_eq!(m.matches("- USN-2").count(), 1, "{m}");
        // Without a batch: the one change's message, as before.
        let alone = plan("run: a", a.fixes.clone());
        assert_eq!(
            batch_message(&alone, "ca", &images, &[]),
            crate::gitops::commit_message("run: a", &images, "ca", &[], &alone.fixes)
        );
    }
}
