//! `[rollout]`: the windows actions start in, the kinds that wait for approval, `max_in_flight`,
//! how deploys are judged (`soak`, `undo`, `fail_after`, `deploy_timeout`), and which security
//! fixes skip the soak and the windows (`expedite`).
//! Time zone names are resolved here (the system database) so the core's gate stays I/O free.

use std::collections::BTreeSet;

use jiff::tz::TimeZone;
use serde::Deserialize;
use toml::Spanned;

use super::{DurationText, Validator};
use builder_monitor_core::deploy::Undo;
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::{Rollout, Window};
use builder_monitor_core::vulns::Priority;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRollout {
    windows: Option<Vec<RawWindow>>,
    approve: Option<Vec<Spanned<String>>>,
    max_in_flight: Option<Spanned<i64>>,
    soak: Option<Spanned<DurationText>>,
    undo: Option<Spanned<String>>,
    fail_after: Option<Spanned<DurationText>>,
    deploy_timeout: Option<Spanned<DurationText>>,
    expedite: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    days: Spanned<String>,
    start: Spanned<String>,
    end: Spanned<String>,
    timezone: Spanned<String>,
}

/// An IANA zone from the system database; `UTC` needs none, so it works where none is installed.
fn time_zone(name: &str) -> Result<TimeZone, String> {
    if name == "UTC" {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|_| {
        if jiff::tz::db().is_definitively_empty() {
            format!(
                "unknown time zone \"{name}\": no time zone database found (install tzdata, or set TZDIR to its directory)"
            )
        } else {
            format!("unknown time zone \"{name}\" (an IANA name such as \"Europe/Berlin\" or \"UTC\")")
        }
    })
}

impl Validator<'_> {
    pub(super) fn rollout(&mut self, raw: RawRollout) -> Option<Rollout> {
        let errors_before = self.diagnostics.len();
        let mut rollout = Rollout::default();
        for w in raw.windows.unwrap_or_default() {
            if let Some(window) = self.window(w) {
                rollout.windows.0.push(window);
            }
        }
        for kind in raw.approve.unwrap_or_default() {
            match ActionKind::parse(kind.get_ref()) {
                Some(k) => {
                    rollout.approve.insert(k);
                }
                None => self.error(
                    kind.span(),
                    format!(
                        "unknown action kind \"{}\" in approve, expected rebuild, rebase, deploy or gitops",
                        kind.get_ref()
                    ),
                ),
            }
        }
        if let Some(m) = &raw.max_in_flight {
            match usize::try_from(*m.get_ref()) {
                Ok(n) if n >= 1 => rollout.max_in_flight = Some(n),
                _ => self.error(m.span(), "max_in_flight must be at least 1"),
            }
        }
        if let Some(soak) = &raw.soak
            && let Some(d) = self.duration(soak, "soak")
        {
            rollout.soak = d;
        }
        if let Some(e) = &raw.expedite {
            match Priority::parse(e.get_ref()) {
                Some(p) => rollout.expedite = Some(p),
                None => self.error(
                    e.span(),
                    format!(
                        "unknown priority \"{}\" in expedite, expected negligible, low, medium, high or critical",
                        e.get_ref()
                    ),
                ),
            }
        }
        if let Some(undo) = &raw.undo {
            match Undo::parse(undo.get_ref()) {
                Some(u) => rollout.undo = u,
                None => self.error(undo.span(), super::images::unknown_undo(undo.get_ref())),
            }
        }
        let fail_after = raw.fail_after.as_ref().and_then(|f| self.positive_duration(f, "fail_after"));
        let deploy_timeout = raw.deploy_timeout.as_ref().and_then(|t| self.positive_duration(t, "deploy_timeout"));
        // Compared only when each one written is valid (a bad one has its own message).
        let comparable = raw.fail_after.is_none() == fail_after.is_none()
            && raw.deploy_timeout.is_none() == deploy_timeout.is_none();
        rollout.fail_after = fail_after.unwrap_or(rollout.fail_after);
        rollout.deploy_timeout = deploy_timeout.unwrap_or(rollout.deploy_timeout);
        if comparable && rollout.fail_after > rollout.deploy_timeout {
            let text = |d| humantime::format_duration(d).to_string();
            let (fail, timeout) = (text(rollout.fail_after), text(rollout.deploy_timeout));
            // At the key written: fail_after when it is, else the deploy_timeout below the default.
            match (&raw.fail_after, &raw.deploy_timeout) {
                (Some(f), _) => self.error(
                    f.span(),
                    format!("fail_after {fail} is longer than deploy_timeout {timeout}: make it at most that"),
                ),
                (None, Some(t)) => self.error(
                    t.span(),
                    format!(
                        "deploy_timeout {timeout} is shorter than fail_after {fail} (its default): make it longer, or set fail_after"
                    ),
                ),
                (None, None) => {}
            }
        }
        (self.diagnostics.len() == errors_before).then_some(rollout)
    }

    fn window(&mut self, raw: RawWindow) -> Option<Window> {
        let tz = match time_zone(raw.timezone.get_ref()) {
            Ok(tz) => tz,
            Err(message) => {
                self.error(raw.timezone.span(), message);
                // The other fields are still checked, so every mistake shows at once.
                TimeZone::UTC
            }
        };
        let window =
            Window::new(raw.days.get_ref(), raw.start.get_ref(), raw.end.get_ref(), tz, raw.timezone.get_ref());
        match window {
            Ok(window) => Some(window),
            Err(err) => {
                let span = match err.field() {
                    "days" => raw.days.span(),
                    "start" => raw.start.span(),
                    _ => raw.end.span(),
                };
                self.error(span, err.to_string());
                None
            }
        }
    }
}

/// How `check` names the roll-out: one line, or none when nothing is configured.
pub(super) fn summary(rollout: &Rollout) -> Option<String> {
    if *rollout == Rollout::default() {
        return None;
    }
    let windows = if rollout.windows.0.is_empty() {
        "always open".to_string()
    } else {
        let each: Vec<String> = rollout
            .windows
            .0
            .iter()
            .map(|w| format!("{} {}-{} {}", w.days, clock(w.start), clock(w.end), w.tz_name))
            .collect();
        format!("windows {}", each.join("; "))
    };
    let cap = rollout.max_in_flight.map(|n| format!(", at most {n} actions of a change at once")).unwrap_or_default();
    let approve: Vec<&str> = rollout.approve.iter().map(|k| k.as_str()).collect::<BTreeSet<_>>().into_iter().collect();
    let approve = match approve.split_last() {
        None => String::new(),
        Some((last, [])) => format!(", approval for {last}"),
        Some((last, rest)) => format!(", approval for {} and {last}", rest.join(", ")),
    };
    let defaults = Rollout::default();
    let mut deploys = Vec::new();
    if rollout.soak != defaults.soak {
        deploys.push(format!("soak {}", humantime::format_duration(rollout.soak)));
    }
    if rollout.undo != defaults.undo {
        deploys.push(format!("undo {}", rollout.undo.as_str()));
    }
    if rollout.fail_after != defaults.fail_after {
        deploys.push(format!("fail after {}", humantime::format_duration(rollout.fail_after)));
    }
    if rollout.deploy_timeout != defaults.deploy_timeout {
        deploys.push(format!("deploy timeout {}", humantime::format_duration(rollout.deploy_timeout)));
    }
    let deploys = if deploys.is_empty() { String::new() } else { format!(", deploys: {}", deploys.join(", ")) };
    Some(format!("rollout: {windows}{cap}{approve}{deploys}\n"))
}

fn clock(minutes: u16) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Config, ConfigError};

    const BUILDER: &str = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n";

    fn parse(text: &str) -> Result<Config, Vec<String>> {
        Config::parse(Path::new("/etc/bm/config.toml"), &format!("{BUILDER}{text}")).map_err(|e| match e {
            ConfigError::Invalid { diagnostics, .. } => {
                diagnostics.into_iter().map(|d| format!("{}:{}: {}", d.line - 3, d.column, d.message)).collect()
            }
            other => vec![other.to_string()],
        })
    }

    fn image(name: &str, extra: &str) -> String {
        format!("[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"r.example/{name}\"\n{extra}")
    }

    #[test]
    fn expedite_names_a_priority() {
        let c = parse("[rollout]\nexpedite = \"high\"\n").unwrap();
        assert_eq!(c.rollout.expedite, Some(Priority::High));
        assert_eq!(parse("").unwrap().rollout.expedite, None);
        let errors = parse("[rollout]\nexpedite = \"urgent\"\n").unwrap_err();
        assert!(errors[0].contains("unknown priority \"urgent\" in expedite, expected negligible"), "{errors:?}");
    }

    #[test]
    fn without_rollout_settings_nothing_holds_actions_back() {
        let c = parse(&image("app", "")).unwrap();
        assert_eq!(c.rollout, Rollout::default());
        assert!(c.rollout.windows.0.is_empty());
        let app = c.image("app").unwrap();
        assert_eq!((app.wave, app.approve), (1, false));
        assert!(!app.needs_approval(ActionKind::Rebuild, &c.rollout));
        assert!(!app.needs_approval(ActionKind::Rebase, &c.rollout));
        assert_eq!(summary(&c.rollout), None);
        assert!(!c.summary().contains("rollout:"), "{}", c.summary());
    }

    #[test]
    fn rollout_settings_are_read() {
        let text = format!(
            "{}{}{}",
            image("canary", "wave = 0\n"),
            image("app", "wave = 2\napprove = true\n"),
            r#"
[rollout]
windows = [
  { days = "Mon-Fri", start = "09:00", end = "17:00", timezone = "Europe/Berlin" },
  { days = "sat", start = "22:00", end = "06:00", timezone = "UTC" },
]
approve = ["rebuild", "rebuild"]
max_in_flight = 3
"#
        );
        let c = parse(&text).unwrap();
        let (canary, app) = (c.image("canary").unwrap(), c.image("app").unwrap());
        assert_eq!((canary.wave, canary.approve, app.wave, app.approve), (0, false, 2, true));
        assert_eq!(c.rollout.max_in_flight, Some(3));
        assert_eq!(c.rollout.approve, BTreeSet::from([ActionKind::Rebuild]));
        assert!(canary.needs_approval(ActionKind::Rebuild, &c.rollout));
        assert!(!canary.needs_approval(ActionKind::Rebase, &c.rollout));
        assert!(app.needs_approval(ActionKind::Rebase, &c.rollout), "approve = true covers every kind");
        let windows = &c.rollout.windows.0;
        assert_eq!(windows.len(), 2);
        assert_eq!(
            windows[0],
            Window::new("Mon-Fri", "09:00", "17:00", TimeZone::get("Europe/Berlin").unwrap(), "Europe/Berlin").unwrap()
        );
        assert_eq!((windows[1].start, windows[1].end, windows[1].timezone.clone()), (22 * 60, 6 * 60, TimeZone::UTC));
        let summary = c.summary();
        assert!(
            summary.contains(
                "rollout: windows Mon-Fri 09:00-17:00 Europe/Berlin; Sat 22:00-06:00 UTC, at most 3 actions of a change at once, approval for rebuild\n"
            ),
            "{summary}"
        );
        assert!(summary.contains("canary: r.example/canary:latest (builder jammy, policy auto, wave 0)"), "{summary}");
        assert!(
            summary.contains("app: r.example/app:latest (builder jammy, policy auto, wave 2, approval)"),
            "{summary}"
        );
    }

    #[test]
    fn both_kinds_can_need_approval() {
        let c = parse(&format!("{}[rollout]\napprove = [\"rebase\", \"rebuild\"]\n", image("app", ""))).unwrap();
        let app = c.image("app").unwrap();
        assert!(
            app.needs_approval(ActionKind::Rebase, &c.rollout) && app.needs_approval(ActionKind::Rebuild, &c.rollout)
        );
        assert_eq!(summary(&c.rollout).unwrap(), "rollout: always open, approval for rebase and rebuild\n");
    }

    #[test]
    fn every_invalid_rollout_value_is_reported_at_its_position() {
        let text = format!(
            "{}{}{}",
            image("a", "wave = -1\n"),
            image("b", "wave = 4294967296\n"),
            r#"
[rollout]
windows = [
  { days = "Mon-Fr", start = "09:00", end = "17:00", timezone = "Europe/Berlin" },
  { days = "Mon", start = "9am", end = "17:00", timezone = "Europe/Berln" },
  { days = "Mon", start = "09:00", end = "25:00", timezone = "UTC" },
  { days = "Mon", start = "09:00", end = "09:00", timezone = "UTC" },
]
approve = ["rebuild", "build"]
max_in_flight = 0
"#
        );
        let errors = parse(&text).unwrap_err();
        let expect = [
            "5:8: wave must be between 0 and 4294967295",
            "10:8: wave must be between 0 and 4294967295",
            "14:12: days \"Mon-Fr\": unknown day \"Fr\"",
            "15:27: start \"9am\" is not a time of day HH:MM",
            "15:60: unknown time zone \"Europe/Berln\" (an IANA name such as \"Europe/Berlin\" or \"UTC\")",
            "16:42: end \"25:00\" is not a time of day HH:MM (00:00 to 24:00)",
            "17:42: end \"09:00\" is the same as start: a window needs a length",
            "19:23: unknown action kind \"build\" in approve, expected rebuild, rebase, deploy or gitops",
            "20:17: max_in_flight must be at least 1",
        ];
        for (got, want) in errors.iter().zip(expect.iter()) {
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}\nall: {errors:#?}");
        }
        assert_eq!(errors.len(), expect.len(), "{errors:#?}");
    }

    #[test]
    fn unknown_and_missing_rollout_keys_are_refused() {
        let errors = parse("[rollout]\nwave = 1\n").unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("2:1: unknown field `wave`"), "{errors:?}");

        let errors =
            parse("[rollout]\nwindows = [{ days = \"Mon\", start = \"09:00\", end = \"17:00\", zone = \"UTC\" }]\n")
                .unwrap_err();
        assert!(errors[0].starts_with("2:60: unknown field `zone`"), "{errors:?}");

        let errors =
            parse("[rollout]\nwindows = [{ days = \"Mon\", start = \"09:00\", end = \"17:00\" }]\n").unwrap_err();
        assert!(errors[0].contains("missing field `timezone`"), "{errors:?}");

        let errors = parse(&image("a", "approve = \"yes\"\n")).unwrap_err();
        assert!(errors[0].starts_with("5:11: invalid type"), "{errors:?}");
    }
}
