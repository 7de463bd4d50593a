//! Which of two run images is newer, by the pin history the ledger keeps of a run image watch:
//! a rebase never moves an app back onto a run image pinned before the one it is on.

use super::Refusal;

/// A run image pin as a history lists it: the tag's digest (an index or a manifest) and, for an
/// index, its platform manifests' digests (what an app's `runImage.reference` names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownPin {
    pub digest: String,
    pub platforms: Vec<String>,
}

/// Where `digest` stands in `history` (newest first): the first pin that is it or lists it.
fn position(history: &[KnownPin], digest: &str) -> Option<usize> {
    history.iter().position(|p| p.digest == digest || p.platforms.iter().any(|d| d == digest))
}

/// `Err(OlderRunImage)` when a history holding both digests pinned `target` before `on` (the run
/// image the app is on now). Digests a history does not hold say nothing: no refusal.
pub fn not_older(histories: &[Vec<KnownPin>], on: &str, target: &str) -> Result<(), Refusal> {
    for history in histories {
        if let (Some(now), Some(next)) = (position(history, on), position(history, target))
            && now < next
        {
            return Err(Refusal::OlderRunImage { on: on.to_string(), target: target.to_string() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(digest: &str, platforms: &[&str]) -> KnownPin {
        KnownPin { digest: digest.into(), platforms: platforms.iter().map(|p| p.to_string()).collect() }
    }

    #[test]
    fn a_run_image_pinned_earlier_is_older() {
        // v3 newest, then v2, then v1; each an index of one platform manifest.
        let history = vec![pin("i3", &["m3"]), pin("i2", &["m2"]), pin("i1", &["m1"])];
        let histories = [history];
        assert_eq!(
            not_older(&histories, "m3", "m2"),
            Err(Refusal::OlderRunImage { on: "m3".into(), target: "m2".into() })
        );
        // By the index digest too, and forward or in place is fine.
        assert!(not_older(&histories, "m3", "i1").is_err());
        assert_eq!(not_older(&histories, "m2", "m3"), Ok(()));
        assert_eq!(not_older(&histories, "m2", "i2"), Ok(()));
    }

    #[test]
    fn digests_no_history_holds_are_not_judged() {
        let histories = [vec![pin("i2", &["m2"]), pin("i1", &["m1"])], vec![pin("x1", &[])]];
        assert_eq!(not_older(&histories, "elsewhere", "m1"), Ok(()));
        assert_eq!(not_older(&histories, "m2", "x1"), Ok(()), "two watches' pins are not ordered");
        assert_eq!(not_older(&[], "m2", "m1"), Ok(()));
    }

    #[test]
    fn a_pin_moved_back_to_is_the_newest() {
        // The publisher moved the tag v1 → v2 → v1: v1 is pinned again, newest.
        let histories = [vec![pin("i1", &["m1"]), pin("i2", &["m2"])]];
        assert_eq!(not_older(&histories, "m2", "m1"), Ok(()));
        assert!(not_older(&histories, "m1", "m2").is_err());
    }
}
