//! What each receiver type gets for an event: the event JSON itself (webhook), a Slack incoming
//! webhook body with Block Kit sections, or a CloudEvents 1.0 structured-mode envelope.

use serde_json::{Value, json};

use crate::config::AlertKind;
use builder_monitor_core::cnb;
use builder_monitor_core::event::{Event, EventType};

/// A request body and its content type.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

pub fn render(kind: AlertKind, event: &Event) -> Rendered {
    // The webhook body is the event serialized straight from its type, fields in contract order.
    let (content_type, body) = match kind {
        AlertKind::Webhook => ("application/json", serde_json::to_vec(event)),
        AlertKind::Slack => ("application/json", serde_json::to_vec(&slack_body(event))),
        AlertKind::CloudEvents => ("application/cloudevents+json", serde_json::to_vec(&cloudevent(event))),
    };
    Rendered { content_type, body: body.unwrap_or_default() }
}

/// `heroku/builder:24` rather than `docker.io/heroku/builder:24`.
pub fn short_image(image: &str) -> String {
    image.strip_prefix("docker.io/library/").or_else(|| image.strip_prefix("docker.io/")).unwrap_or(image).to_string()
}

fn short_digest(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

/// One line saying what happened: `heroku/builder:24 moved: rebuild — heroku/nodejs 3.2.1 → 3.3.0`.
pub fn summary(event: &Event) -> String {
    let image = short_image(&event.builder.image);
    match event.event_type {
        EventType::BuilderChanged | EventType::RunImageChanged => {
            let subject = match (&event.run_image, event.event_type) {
                (Some(run), EventType::RunImageChanged) => {
                    let users: Vec<&str> = event.builders.iter().map(|b| b.name.as_str()).collect();
                    format!("{} (run image of {})", short_image(run), users.join(", "))
                }
                _ => image,
            };
            match &event.change {
                Some(change) => format!("{subject} moved: {}", builder_monitor_core::cnb::explain(change)),
                None => format!("{subject} moved"),
            }
        }
        EventType::BuilderPinned => {
            let digest = event.current.as_ref().map(|c| short_digest(&c.digest)).unwrap_or("?");
            format!("{image} pinned to {digest}")
        }
        EventType::CheckFailed => match &event.error {
            Some(e) => format!("{image}: check failed ({}): {}", e.reason, e.message),
            None => format!("{image}: check failed"),
        },
        EventType::CheckRecovered => {
            let n = event.error.as_ref().map_or(0, |e| e.consecutive_failures);
            format!("{image}: checks recovered after {n} failed")
        }
        EventType::RegistryUnavailable | EventType::RegistryRecovered => {
            let Some(o) = &event.outage else { return format!("{}: {image}", event.event_type) };
            let n = o.watches.len();
            let list = o.watches.join(", ");
            if event.event_type == EventType::RegistryUnavailable {
                format!(
                    "registry {} unavailable: {n} watches failing since {} ({list}): {}",
                    o.registry, o.since, o.message
                )
            } else {
                format!(
                    "registry {} recovered: its {n} watches failing since {} answer again ({list})",
                    o.registry, o.since
                )
            }
        }
        EventType::AlertTest => "builder-monitor test alert: if you read this, delivery to this receiver works".into(),
        EventType::ActionAwaitingApproval | EventType::ActionHeld | EventType::ActionExpedited => {
            let Some(r) = &event.rollout else { return format!("{}: {image}", event.event_type) };
            let list: Vec<String> = r.actions.iter().map(|a| format!("{} of {}", a.kind, a.image)).collect();
            let change = r.change.as_deref().unwrap_or("?");
            if event.event_type == EventType::ActionExpedited {
                let by = r.expedited.as_ref().map(builder_monitor_core::rollout::expedited_line).unwrap_or_default();
                format!("{image}: expedited (no windows, no soak): {} (change {change}; {by})", list.join(", "))
            } else if event.event_type == EventType::ActionHeld {
                let why = r.reason.as_deref().unwrap_or("a lower wave failed");
                format!(
                    "{image}: held after {why}: {} (change {change}; `builder-monitor release {change}`)",
                    list.join(", ")
                )
            } else {
                format!(
                    "{image}: awaiting approval: {} (change {change}; `builder-monitor approve {change}`)",
                    list.join(", ")
                )
            }
        }
        EventType::RolloutFrozen | EventType::RolloutUnfrozen => {
            let r = event.rollout.clone().unwrap_or_default();
            let by = r.by.as_deref().unwrap_or("?");
            let reason = r.reason.map(|r| format!(": {r}")).unwrap_or_default();
            if event.event_type == EventType::RolloutFrozen {
                let stops = builder_monitor_core::rollout::FREEZE_STOPS;
                format!("roll-out frozen by {by}{reason}: {stops} until `builder-monitor unfreeze`")
            } else {
                format!("roll-out unfrozen by {by}: waiting actions start again")
            }
        }
        other => format!("{other}: {image}"),
    }
}

fn mrkdwn(text: impl Into<String>) -> Value {
    json!({ "type": "mrkdwn", "text": text.into() })
}

/// Package moves a Slack message shows before `… N more`.
const SLACK_PACKAGE_ROWS: usize = 10;
/// Notice ids a Slack message names before `N more`.
const SLACK_FIXES: usize = 3;

/// Registry text inside Slack mrkdwn: the three characters Slack reserves escaped, and no backtick
/// that could close the code block.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('`', "'")
}

/// A Slack incoming-webhook body: the summary line, then previous/current, reasons, OS package
/// moves and images.
pub fn slack_body(event: &Event) -> Value {
    let line = summary(event);
    let mut blocks = vec![json!({ "type": "section", "text": mrkdwn(format!("*{line}*")) })];
    let mut fields = Vec::new();
    if let Some(p) = &event.previous {
        fields.push(mrkdwn(format!("*Previous*\n`{}`", p.reference)));
    }
    if let Some(c) = &event.current {
        fields.push(mrkdwn(format!("*Current*\n`{}`", c.reference)));
    }
    if !fields.is_empty() {
        blocks.push(json!({ "type": "section", "fields": fields }));
    }
    if let Some(change) = &event.change {
        let reasons: Vec<String> = change
            .reasons
            .iter()
            .map(|r| serde_json::to_value(r).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default())
            .collect();
        let mut text = format!("*Kind:* {}", change.kind.as_str());
        if !reasons.is_empty() {
            text.push_str(&format!("\n*Reasons:* {}", reasons.join(", ")));
        }
        for b in &change.buildpacks {
            let v = |s: &Option<String>| s.clone().unwrap_or_else(|| "–".into());
            text.push_str(&format!("\n• {} {} → {}", b.id, v(&b.from), v(&b.to)));
        }
        blocks.push(json!({ "type": "section", "text": mrkdwn(text) }));
        if let Some(packages) = &change.packages {
            let table = slack_escape(&packages.table(SLACK_PACKAGE_ROWS));
            let text = format!("*OS packages* ({})\n```\n{table}\n```", packages.source.as_str());
            blocks.push(json!({ "type": "section", "text": mrkdwn(text) }));
        } else if let Some(note) = &change.packages_note {
            blocks.push(json!({ "type": "section", "text": mrkdwn(format!("*OS packages:* {}", slack_escape(note))) }));
        }
        if let Some(fixes) = change.fixes.as_ref().filter(|f| !f.is_empty()) {
            let mut shown: Vec<String> = fixes.iter().take(SLACK_FIXES).map(cnb::fix_label).collect::<Vec<_>>();
            if fixes.len() > SLACK_FIXES {
                shown.push(format!("{} more", fixes.len() - SLACK_FIXES));
            }
            let text = format!("*Fixes* ({}): {}", fixes.len(), slack_escape(&shown.join(", ")));
            blocks.push(json!({ "type": "section", "text": mrkdwn(text) }));
        }
    }
    if let Some(images) = event.images.as_ref().filter(|i| !i.is_empty()) {
        let list: Vec<String> = images.iter().map(|i| format!("{} ({})", i.name, i.action)).collect();
        blocks.push(json!({ "type": "section", "text": mrkdwn(format!("*Affected images:* {}", list.join(", "))) }));
    }
    blocks.push(json!({
        "type": "context",
        "elements": [mrkdwn(format!("`{}` · event `{}` · {}", event.event_type, event.id, event.time))],
    }));
    json!({ "text": line, "blocks": blocks })
}

/// A CloudEvents 1.0 structured-mode envelope around the event.
pub fn cloudevent(event: &Event) -> Value {
    json!({
        "specversion": "1.0",
        "id": event.id,
        "source": format!("/builder-monitor/builders/{}", event.builder.name),
        "type": format!("dev.buildermonitor.{}", event.event_type),
        "subject": event.builder.image,
        "time": event.time,
        "datacontenttype": "application/json",
        "data": event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::cnb::{BuildpackChange, Change, ChangeKind, Reason};
    use builder_monitor_core::event::{ImageAction, Pin, Subject};

    fn changed() -> Event {
        let mut e = Event::new(
            "abc".into(),
            EventType::BuilderChanged,
            "2026-11-30T12:00:00Z".into(),
            Subject { name: "heroku-24".into(), image: "docker.io/heroku/builder:24".into() },
        );
        e.previous = Some(Pin {
            digest: "sha256:a".into(),
            reference: "docker.io/heroku/builder@sha256:a".into(),
            platforms: Default::default(),
        });
        e.current = Some(Pin {
            digest: "sha256:b".into(),
            reference: "docker.io/heroku/builder@sha256:b".into(),
            platforms: Default::default(),
        });
        let mut change = Change::unknown("x");
        change.kind = ChangeKind::Rebuild;
        change.note = None;
        change.reasons = vec![Reason::Buildpack];
        change.buildpacks = vec![BuildpackChange {
            id: "heroku/nodejs".into(),
            from: Some("3.2.1".into()),
            to: Some("3.3.0".into()),
            republished: false,
        }];
        e.change = Some(change);
        e.images = Some(vec![ImageAction { name: "petclinic".into(), action: "rebuild".into() }]);
        e
    }

    #[test]
    fn slack_names_the_first_fixes_and_counts_the_rest() {
        use builder_monitor_core::vulns::{Fix, Priority};
        let mut e = changed();
        let fix = |id: &str| Fix { id: id.into(), cves: vec![], priority: Some(Priority::High), ..Fix::default() };
        let ids = ["USN-1-1", "USN-2-1", "USN-3-1", "USN-4-1", "USN-5-1"];
        e.change.as_mut().unwrap().fixes = Some(ids.iter().map(|i| fix(i)).collect());
        let body = slack_body(&e).to_string();
        assert!(body.contains("*Fixes* (5): USN-1-1 (high), USN-2-1 (high), USN-3-1 (high), 2 more"), "{body}");
        assert!(body.contains("fixes USN-1-1 (high), 4 more"), "{body}");
        e.change.as_mut().unwrap().fixes = None;
        assert!(!slack_body(&e).to_string().contains("ixes"));
    }

    #[test]
    fn slack_summary_names_what_moved() {
        let body = slack_body(&changed());
        assert_eq!(body["text"], "heroku/builder:24 moved: rebuild — heroku/nodejs 3.2.1 → 3.3.0");
        let blocks = body["blocks"].as_array().unwrap();
        assert!(blocks[1]["fields"][0]["text"].as_str().unwrap().contains("docker.io/heroku/builder@sha256:a"));
        assert!(blocks[2]["text"]["text"].as_str().unwrap().contains("*Reasons:* BUILDPACK"));
        assert!(blocks[3]["text"]["text"].as_str().unwrap().contains("petclinic (rebuild)"));
    }

    #[test]
    fn slack_shows_package_moves_as_a_short_table() {
        use builder_monitor_core::packages::{PackageChange, PackageDiff, PackageVersion, Source};
        let mut e = changed();
        let change = e.change.as_mut().unwrap();
        change.packages = Some(PackageDiff {
            source: Source::PaketoLabel,
            changed: (0..12)
                .map(|i| PackageChange { name: format!("lib{i:02}"), arch: None, from: "1".into(), to: "2".into() })
                .collect(),
            added: vec![PackageVersion { name: "x<y>`".into(), arch: None, version: "1".into() }],
            removed: vec![],
            platforms: Default::default(),
        });
        let body = slack_body(&e);
        let table = body["blocks"][3]["text"]["text"].as_str().unwrap();
        assert!(
            table.starts_with("*OS packages* (io.paketo.stack.packages)\n```\npackage  from  to\nlib00    1     2\n"),
            "{table}"
        );
        assert!(table.ends_with("lib09    1     2\n… 3 more\n```"), "{table}");
        assert!(body["text"].as_str().unwrap().contains("lib00 1 → 2, lib01 1 → 2, lib02 1 → 2; 10 more"));
        e.change.as_mut().unwrap().packages = None;
        e.change.as_mut().unwrap().packages_note = Some("new image: <b>".into());
        let body = slack_body(&e);
        assert_eq!(body["blocks"][3]["text"]["text"], "*OS packages:* new image: &lt;b&gt;");
    }

    #[test]
    fn cloudevent_envelope() {
        let e = changed();
        let ce = cloudevent(&e);
        assert_eq!(ce["specversion"], "1.0");
        assert_eq!(ce["id"], "abc");
        assert_eq!(ce["source"], "/builder-monitor/builders/heroku-24");
        assert_eq!(ce["type"], "dev.buildermonitor.builder.changed");
        assert_eq!(ce["data"], serde_json::to_value(&e).unwrap());
        assert_eq!(render(AlertKind::CloudEvents, &e).content_type, "application/cloudevents+json");
    }

    #[test]
    fn webhook_body_is_the_event() {
        let e = changed();
        let r = render(AlertKind::Webhook, &e);
        let back: Event = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(back, e);
    }
}
