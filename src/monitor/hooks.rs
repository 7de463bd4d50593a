//! Push hook follow-ups: a hook's check runs at once and, only while the tag still shows the pin,
//! again after `HOOK_FOLLOW_UPS`, with at most one such chain per watch however many hooks arrive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::CheckOutcome;

/// After a hook's immediate check found the pin unchanged, the delays before each check again:
/// Distribution notifies before it links the tag, so the first check can be too early. A forged
/// or early hook costs at most `1 + HOOK_FOLLOW_UPS.len()` `HEAD`s.
pub const HOOK_FOLLOW_UPS: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];

/// Where a watch's hook chain stands; `n` counts its checks, 0 being the immediate one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Woken for check `n`, not started yet.
    Due(usize),
    /// Check `n` runs; `again` when a hook arrived meanwhile (that check may predate its push).
    Running { n: usize, again: bool },
    /// Waiting out the delay before check `n`.
    Delayed(usize),
}

/// The hook chains of all watches, shared by the HTTP server (hooks) and the scheduler (checks).
#[derive(Clone, Default)]
pub(super) struct HookChains {
    steps: Arc<Mutex<HashMap<String, Step>>>,
}

impl HookChains {
    fn steps(&self) -> std::sync::MutexGuard<'_, HashMap<String, Step>> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A hook for `name`: starts a chain with a check at once, unless one is under way (its next
    /// check starts after this hook, or the running one is told to look again).
    pub(super) fn hook(&self, name: &str, wakes: &mpsc::UnboundedSender<String>) {
        let mut steps = self.steps();
        match steps.get_mut(name) {
            None => {
                steps.insert(name.to_string(), Step::Due(0));
                drop(steps);
                let _ = wakes.send(name.to_string());
            }
            Some(Step::Running { again, .. }) => *again = true,
            Some(Step::Due(_) | Step::Delayed(_)) => {}
        }
    }

    /// A check of `name` starts; true when it is the one a hook chain waits for.
    pub(super) fn starts(&self, name: &str) -> bool {
        let mut steps = self.steps();
        let Some(&Step::Due(n)) = steps.get(name) else { return false };
        steps.insert(name.to_string(), Step::Running { n, again: false });
        true
    }

    /// The chain's check of `name` ended with `outcome` (`None`: not recorded). Only a tag still
    /// showing the pin, or not there yet (a first push), is checked again; any other outcome ends
    /// the chain.
    pub(super) fn done(&self, name: &str, outcome: Option<&CheckOutcome>, wakes: &mpsc::UnboundedSender<String>) {
        let mut steps = self.steps();
        let Some(Step::Running { n, again }) = steps.get(name).copied() else { return };
        // Distribution notifies before it links the tag: the pin, or no tag at all, is "too early".
        let unchanged = matches!(
            outcome,
            Some(CheckOutcome::Unchanged | CheckOutcome::Failed(crate::registry::RegistryError::NotFound { .. }))
        );
        let next = match (unchanged, again) {
            (false, false) => {
                steps.remove(name);
                return;
            }
            // A hook during a check that saw something else: that hook's push is owed a check.
            (false, true) => {
                steps.insert(name.to_string(), Step::Due(0));
                drop(steps);
                let _ = wakes.send(name.to_string());
                return;
            }
            // A hook during a check that saw the pin: its push is likely not linked yet either.
            (true, true) => 1,
            (true, false) => n + 1,
        };
        let Some(&delay) = HOOK_FOLLOW_UPS.get(next - 1) else {
            steps.remove(name);
            return;
        };
        steps.insert(name.to_string(), Step::Delayed(next));
        drop(steps);
        let (chains, wakes, name) = (self.clone(), wakes.clone(), name.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            {
                let mut steps = chains.steps();
                match steps.get_mut(&name) {
                    Some(step) if *step == Step::Delayed(next) => *step = Step::Due(next),
                    _ => return,
                }
            }
            tracing::info!(watch = %name, after_ms = delay.as_millis() as u64, "checking again after a push hook: the tag still showed the pin");
            let _ = wakes.send(name);
        });
    }

    /// Drops `name`'s chain: its watch is gone, or its check ended without an outcome.
    pub(super) fn forget(&self, name: &str) {
        self.steps().remove(name);
    }

    /// Whether a hook chain of `name` is under way.
    pub(super) fn pending(&self, name: &str) -> bool {
        self.steps().contains_key(name)
    }
}
