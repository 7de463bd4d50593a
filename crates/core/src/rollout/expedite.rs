//! `[rollout] expedite`: whether a change's fixes let its actions skip the soak and the windows
//! (never the freeze, approvals or health gates), and which notices allowed it.

use crate::vulns::{Fix, Priority};

/// The ids of the fixes at priority `at_least` or above, in the fixes' order: non-empty, the
/// change is expedited, and these are recorded as what allowed it. Empty when `expedite` is off
/// (`None`), the change has no `fixes` (no vulnerability data, or nothing to match), or none of
/// its fixes is that high (a fix of unknown priority never qualifies).
pub fn expedited_by(at_least: Option<Priority>, fixes: Option<&[Fix]>) -> Vec<String> {
    let (Some(at_least), Some(fixes)) = (at_least, fixes) else { return Vec::new() };
    fixes.iter().filter(|f| f.priority.is_some_and(|p| p >= at_least)).map(|f| f.id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fix(id: &str, priority: Option<Priority>) -> Fix {
        Fix { id: id.into(), cves: vec![], priority, packages: vec![] }
    }

    #[test]
    fn only_fixes_at_or_above_the_priority_allow_it() {
        let fixes = [
            fix("USN-1-1", Some(Priority::Critical)),
            fix("USN-2-1", Some(Priority::High)),
            fix("USN-3-1", Some(Priority::Medium)),
            fix("USN-4-1", None),
        ];
        assert_eq!(expedited_by(Some(Priority::High), Some(&fixes)), ["USN-1-1", "USN-2-1"]);
        assert_eq!(expedited_by(Some(Priority::Critical), Some(&fixes)), ["USN-1-1"]);
        assert_eq!(expedited_by(Some(Priority::Negligible), Some(&fixes)).len(), 3, "unknown priority never qualifies");
        assert!(expedited_by(Some(Priority::Critical), Some(&fixes[1..])).is_empty());
    }

    #[test]
    fn off_or_without_fixes_nothing_is_expedited() {
        let fixes = [fix("USN-1-1", Some(Priority::Critical))];
        assert!(expedited_by(None, Some(&fixes)).is_empty());
        assert!(expedited_by(Some(Priority::Low), None).is_empty());
        assert!(expedited_by(Some(Priority::Low), Some(&[])).is_empty());
    }
}
