//! An event's one line for people (logs, chat messages, the page).

use std::fmt::Write as _;

use super::{Event, EventType, ImageAction};

/// The longest free text (an error message, an action's detail) a summary line quotes.
const SUMMARY_TEXT_MAX: usize = 160;

/// The first line of `text`, cut after a whole word (`crate::text::clip`); ` …` marks what is left out.
fn clipped(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    match crate::text::clip(line, SUMMARY_TEXT_MAX) {
        std::borrow::Cow::Owned(cut) => cut,
        std::borrow::Cow::Borrowed(line) if line.len() < text.trim().len() => format!("{line} …"),
        std::borrow::Cow::Borrowed(line) => line.to_string(),
    }
}

/// App images a summary names before it counts the rest.
const SUMMARY_IMAGES_MAX: usize = 5;

/// `; planned: rebuild petclinic, rebase shop, and 3 more`: the actions a move planned, or nothing
/// when it planned none.
fn planned_actions(images: &[ImageAction]) -> String {
    if images.is_empty() {
        return String::new();
    }
    let named: Vec<String> =
        images.iter().take(SUMMARY_IMAGES_MAX).map(|i| format!("{} {}", i.action, i.name)).collect();
    let mut out = format!("; planned: {}", named.join(", "));
    if images.len() > SUMMARY_IMAGES_MAX {
        let _ = write!(out, ", and {} more", images.len() - SUMMARY_IMAGES_MAX);
    }
    out
}

/// `sha256:0123456789ab`, enough to tell pins apart in a log line.
fn short_digest(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

impl Event {
    /// One line for people: `builder.changed paketo-jammy-base: rebuild — paketo-buildpacks/java
    /// 18.1.0 → 18.2.0`.
    pub fn summary(&self) -> String {
        let mut out = format!("{} {}", self.event_type, self.builder.name);
        if let Some(run_image) = &self.run_image {
            let _ = write!(out, " (run image {run_image})");
        }
        let detail = match self.event_type {
            EventType::BuilderChanged | EventType::RunImageChanged => self.change.as_ref().map(|c| {
                let rollback = if self.rollback == Some(true) { " (rollback)" } else { "" };
                let planned = self.images.as_deref().map(planned_actions).unwrap_or_default();
                format!("{}{rollback}{planned}", crate::cnb::explain(c))
            }),
            EventType::BuilderPinned => self.current.as_ref().map(|p| format!("pinned to {}", short_digest(&p.digest))),
            EventType::CheckFailed => self
                .error
                .as_ref()
                .map(|e| format!("{} — {} ({} in a row)", e.reason, clipped(&e.message), e.consecutive_failures)),
            EventType::CheckRecovered => self
                .error
                .as_ref()
                .map(|e| format!("recovered after {} failed checks ({})", e.consecutive_failures, e.reason)),
            EventType::BuildStarted
            | EventType::BuildSucceeded
            | EventType::BuildFailed
            | EventType::RebaseSucceeded
            | EventType::RebaseFailed
            | EventType::DeployStarted
            | EventType::DeploySucceeded
            | EventType::DeployFailed
            | EventType::DeployRolledBack
            | EventType::DeployOverridden
            | EventType::GitopsCommitted
            | EventType::GitopsFailed
            | EventType::GitopsOverridden
            | EventType::ActionRefused
            | EventType::SignatureReplaced => self.action.as_ref().map(|a| {
                let mut text = format!("{} of {}, attempt {}/{}", a.kind, a.image, a.attempt, a.max_attempts);
                if let Some(detail) = &a.detail {
                    let _ = write!(text, " — {}", clipped(detail));
                }
                text
            }),
            EventType::RegistryUnavailable => self
                .outage
                .as_ref()
                .map(|o| format!("{} — {} watches failing ({})", o.registry, o.watches.len(), clipped(&o.message))),
            EventType::RegistryRecovered => {
                self.outage.as_ref().map(|o| format!("{} — {} watches answer again", o.registry, o.watches.len()))
            }
            EventType::ActionAwaitingApproval | EventType::ActionHeld | EventType::ActionExpedited => {
                self.rollout.as_ref().map(|r| {
                    let images: Vec<String> = r.actions.iter().map(|a| format!("{} of {}", a.kind, a.image)).collect();
                    let mut text = format!("change {}: {}", r.change.as_deref().unwrap_or("?"), images.join(", "));
                    if let Some(reason) = &r.reason {
                        let _ = write!(text, " — {}", clipped(reason));
                    }
                    text
                })
            }
            EventType::RolloutFrozen | EventType::RolloutUnfrozen => self.rollout.as_ref().map(|r| {
                let mut text = format!("by {}", r.by.as_deref().unwrap_or("?"));
                if let Some(reason) = &r.reason {
                    let _ = write!(text, " — {}", clipped(reason));
                }
                text
            }),
            EventType::ImageRolledBack => self.rolled_back.as_ref().map(|r| {
                let digest = |p: Option<&super::Pin>| p.map_or("nothing", |p| short_digest(&p.digest)).to_string();
                let undone = r.undone.as_deref().map(|u| format!(", undoing its {u}")).unwrap_or_default();
                format!(
                    "{} moved back from {} to {} by {}{undone}",
                    r.image,
                    digest(self.previous.as_ref()),
                    digest(self.current.as_ref()),
                    r.by
                )
            }),
            EventType::AlertTest => None,
        };
        if let Some(detail) = detail {
            let _ = write!(out, ": {detail}");
        }
        out
    }
}
