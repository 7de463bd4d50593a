//! The roll-out gates over stored action rows, as both backends apply them: which pending actions
//! may start now (one action per app image at a time, holds on an image), and when the next may.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{ActionRecord, Kinds};
use builder_monitor_core::rollout::{ActionState, Freeze, GateAction, Rollout, Wait, gate};

/// A pending action as the roll-out gates see it: when it is due, and whether it may start.
pub(in crate::ledger) struct Gated {
    pub key: String,
    pub due: DateTime<Utc>,
    pub verdict: Result<(), Wait>,
}

/// What keeps a pending action back whatever its change: another action of its image running
/// (image → its change), or a hold on its image (image → the holding change and since when).
#[derive(Debug, Clone, Default)]
pub(in crate::ledger) struct ImageLocks {
    pub running: BTreeMap<String, String>,
    pub held: BTreeMap<String, (String, DateTime<Utc>)>,
}

impl ImageLocks {
    /// From `rows`: every running action and every unreleased hold among them.
    pub fn of(rows: &[ActionRecord]) -> Self {
        let mut locks = ImageLocks::default();
        for a in rows {
            if a.state == ActionState::Running {
                locks.running.insert(a.image.clone(), a.change.clone());
            }
            if a.holds && !a.released {
                locks.hold(a.image.clone(), a.change.clone(), a.updated);
            }
        }
        locks
    }

    /// Adds a hold; of two on one image, the later one counts.
    pub fn hold(&mut self, image: String, change: String, since: DateTime<Utc>) {
        match self.held.get(&image) {
            Some((_, at)) if *at >= since => {}
            _ => {
                self.held.insert(image, (change, since));
            }
        }
    }
}

/// The pending actions (of `kinds`) among `rows` — every action of the changes concerned — each
/// with when it is due and the roll-out gates' verdict, soonest due first. An action whose image
/// has another action running waits for it, and so does every later one of an image already let
/// through: one action per app image at a time, so an older change's action can never write after
/// a newer one's. An action recorded before its image was held waits for `release` (a newer
/// change's actions are recorded after the hold, and go).
pub(in crate::ledger) fn gate_rows(
    rows: &[ActionRecord],
    kinds: Kinds,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
    locks: &ImageLocks,
) -> Vec<Gated> {
    let mut by_change: BTreeMap<&str, Vec<&ActionRecord>> = Default::default();
    for r in rows {
        by_change.entry(r.change.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for actions in by_change.values() {
        let view: Vec<GateAction> = actions.iter().map(|a| a.gate_action()).collect();
        let mut verdicts = gate(&view, rollout, freeze, now);
        for a in actions.iter().filter(|a| a.state == ActionState::Pending && kinds.contains(a.action)) {
            let mut verdict = verdicts.remove(&a.key).unwrap_or(Ok(()));
            if let Some((change, since)) = locks.held.get(&a.image)
                && verdict.is_ok()
                && a.created <= *since
                && !a.released
            {
                verdict = Err(Wait::ImageHeld { image: a.image.clone(), change: change.clone() });
            }
            out.push((a.created, a.key.clone(), a.next_attempt, verdict, a.image.clone(), a.change.clone()));
        }
    }
    out.sort_by(|a, b| (a.2, a.0, &a.1).cmp(&(b.2, b.0, &b.1)));
    let mut busy = locks.running.clone();
    out.into_iter()
        .map(|(_, key, due, verdict, image, change)| {
            let verdict = match busy.get(&image) {
                Some(other) if verdict.is_ok() => Err(Wait::ImageBusy { image, change: other.clone() }),
                _ => {
                    if verdict.is_ok() {
                        busy.insert(image, change);
                    }
                    verdict
                }
            };
            Gated { key, due, verdict }
        })
        .collect()
}

/// When the next of the `gated` pending actions may start.
pub(in crate::ledger) fn next_start(
    gated: Vec<Gated>,
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if freeze.is_some() || gated.is_empty() {
        return None;
    }
    // Closed windows hold back all but expedited actions, which the gates let through.
    let opens = (!rollout.windows.is_open(now)).then(|| rollout.windows.next_open(now));
    let due = gated
        .into_iter()
        .filter_map(|g| match g.verdict {
            Ok(()) => Some(g.due),
            // A soak ends on its own: the action is due when it does.
            Err(Wait::Soak { until, .. }) => Some(g.due.max(until)),
            Err(_) => None,
        })
        .min();
    match opens {
        Some(opens) => [due, opens].into_iter().flatten().min(),
        None => due,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::actions::tests::action;

    /// A hold keeps back the image's actions recorded before it (unless released), not newer ones,
    /// and not other images'.
    #[test]
    fn an_image_hold_keeps_back_only_the_images_older_actions() {
        let t = |s: &str| builder_monitor_core::schedule::parse_timestamp(s).unwrap();
        let pending = |key: &str, image: &str, created: &str| ActionRecord {
            key: key.into(),
            image: image.into(),
            change: key.into(),
            created: t(created),
            ..action(ActionState::Pending, false, None)
        };
        let rows = [
            pending("older", "app", "2026-12-01T09:00:00Z"),
            pending("newer", "app", "2026-12-01T11:00:00Z"),
            pending("other", "api", "2026-12-01T09:00:00Z"),
        ];
        let mut locks = ImageLocks::default();
        locks.hold("app".into(), "c0".into(), t("2026-12-01T10:00:00Z"));
        let gated = gate_rows(&rows, Kinds::ALL, &Rollout::default(), None, t("2026-12-01T12:00:00Z"), &locks);
        let verdict = |key: &str| gated.iter().find(|g| g.key == key).map(|g| g.verdict.clone()).unwrap();
        assert_eq!(verdict("older"), Err(Wait::ImageHeld { image: "app".into(), change: "c0".into() }));
        assert_eq!(verdict("newer"), Ok(()));
        assert_eq!(verdict("other"), Ok(()));
        let mut released = rows.clone();
        released[0].released = true;
        let gated = gate_rows(&released, Kinds::ALL, &Rollout::default(), None, t("2026-12-01T12:00:00Z"), &locks);
        // Released: it goes (and the newer one of the same image waits its turn behind it).
        assert_eq!(gated.iter().find(|g| g.key == "older").unwrap().verdict, Ok(()));
    }
}
